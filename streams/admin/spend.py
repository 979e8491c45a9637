"""`loopwarden spend`: each spend cap's keys in their current window (semantics.md
section 11), read from the topics; `top` shows the nearest to their ceiling from the same.

Where it comes from:

- the spend stage's tables (streams/worker/spend.py): one Faust table of tumbling windows
  per window length, `spend-{window_ms}`, whose changelog topic is
  `{app_id}-spend-{window_ms}-changelog`. A record's key is Faust's windowed key as JSON,
  `["{cap}:{key}", [window start s, window end s - 0.1]]`; its value a msgpack
  `SpendState` (`detectors.spend.decode_spend_state`), whole: the cap, the key, the
  window, the ceilings and the count, and the signal once the cap is reached. So only the
  value is read, and the latest value of each key is the key's count now;
- the fleet topic's `spend_cap` records: which reached caps were lifted, and when.

Only the current windows are shown: live, event time is about the wall clock, so a
window holds "now" when `window_start <= now < window_end`. A window's records are
written once it has begun; each table is read from `READ_BEFORE_MS` before the start of
its current window (gateways whose clocks run that far ahead of the spend stage's are
the only reason to look earlier).

The pure parts (`SpendBoard`, `spend_rows`, `report`, `text_lines`) take the time they
are asked about; `read_spend` reads the topics.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from detectors import DetectionConfig
from detectors.config import SpendCapConfig
from detectors.errors import LoopwardenError
from detectors.fleet import SPEND_UNITS, FleetView, SpendCapSignal
from detectors.policy import utc_text
from detectors.spend import SpendState, counts_of, decode_spend_state

from ..kafka import clients, ranges
from ..kafka.settings import Settings
from .config_topic import read_configs
from .fleet_topic import FleetLedger

READ_BEFORE_MS = 300_000  # each table is read from this long before its current window's start
_TABLE = re.compile(r"-spend-(\d+)-changelog$")


def table_topic(settings: Settings, window_ms: int) -> str:
    """The changelog topic of the spend stage's table of `window_ms` windows."""
    return settings.spend_table_topic(window_ms)


def tables_among(names: Iterable[str], settings: Settings) -> dict[int, str]:
    """The spend stage's changelog topics among topic names, by window length."""
    head = f"{settings.app_id}-spend-"
    out = {}
    for name in names:
        m = _TABLE.search(name)
        if m and name == f"{head}{m.group(1)}-changelog" and int(m.group(1)) > 0:
            out[int(m.group(1))] = name
    return dict(sorted(out.items()))


def window_start(window_ms: int, now_ms: int) -> int:
    """The start of the window of `window_ms` that holds `now_ms` (aligned to the epoch)."""
    return now_ms // window_ms * window_ms


def read_from(window_ms: int, now_ms: int) -> int:
    """Where a table of `window_ms` windows is read from, in ms (a record's timestamp)."""
    return max(0, window_start(window_ms, now_ms) - READ_BEFORE_MS)


# --- the rows (pure) -------------------------------------------------------------------------


def is_current(start: int, window_ms: int, now_ms: int) -> bool:
    return start <= now_ms < start + window_ms


def _percent(used: int, ceiling: int) -> float:
    return round(used * 100 / ceiling, 1)


def _kinds(ceilings: Iterable[int | None], counts: Iterable[int]) -> list[dict[str, Any]]:
    """Each kind with a ceiling: its unit, what was used, the ceiling, the percent used."""
    return [
        {"unit": unit, "used": used, "ceiling": ceiling, "percent": _percent(used, ceiling)}
        for unit, used, ceiling in zip(SPEND_UNITS, counts, ceilings, strict=True)
        if ceiling
    ]


def fullness(state: SpendState) -> tuple[bool, float]:
    """How near a key is to its cap: reached, then the highest percent of a ceiling. Within
    a window it only grows, so the nearest keys of a stream of states are kept exactly by
    keeping the nearest so far (`SpendBoard`)."""
    kinds = _kinds(state.ceilings, counts_of(state.count))
    return state.signal is not None or state.count.reached, max((k["percent"] for k in kinds), default=0.0)


def spend_row(
    state: SpendState | None, signal: SpendCapSignal | None, now_ms: int, per: str | None = None
) -> dict[str, Any]:
    """One key's row in its window: its count per kind (from its state; from the signal
    alone when the table had none), how near it is, the time left in the window, and,
    when the cap was reached there, the signal: its id, whether it pauses now, whether it
    was lifted. `signal` is the fleet topic's record (its earliest `until_ts`)."""
    if state is not None:
        cap, key, start, end = state.cap, state.key, state.window_start, state.window_start + state.window_ms
        kinds = _kinds(state.ceilings, counts_of(state.count))
        signal_id = state.signal
    else:
        assert signal is not None
        cap, key, start, end = signal.cap, signal.key, signal.window_start, signal.window_end
        kinds = _kinds([signal.ceiling if u == signal.unit else None for u in SPEND_UNITS], [signal.used] * 3)
        signal_id = signal.id
    if signal is not None:
        signal_id = signal.id
    top = max(kinds, key=lambda k: k["percent"], default=None)
    lifted = signal is not None and signal.until_ts < signal.window_end
    return {
        "cap": cap,
        "per": per,
        "key": key,
        "window_start": start,
        "window_end": end,
        "time_left_s": round(max(0, end - now_ms) / 1000, 1),
        "kinds": kinds,
        "percent": top["percent"] if top else 0.0,
        "unit": signal.unit if signal is not None else (top["unit"] if top else None),
        "reached": signal_id is not None,
        "signal": signal_id,
        "reached_at": signal.from_ts if signal is not None else None,
        "paused": signal is not None and signal.in_force(now_ms),
        "paused_until": signal.end() if signal is not None else None,
        "lifted": lifted,
        "lifted_at": signal.until_ts if signal is not None and lifted else None,
    }


def row_order(row: dict[str, Any]) -> tuple[Any, ...]:
    """Reached first (pausing now, then lifted), then the fullest, then by cap and key."""
    return (not row["reached"], row["lifted"], -row["percent"], row["cap"], row["key"])


def spend_rows(
    states: Iterable[SpendState],
    signals: Iterable[SpendCapSignal],
    now_ms: int,
    caps: Iterable[SpendCapConfig] | None = None,
) -> list[dict[str, Any]]:
    """The rows of the keys whose window holds `now_ms`, reached first (`row_order`): every
    state given, and every signal of a key with none. With `caps` (the config's), only
    theirs, each with its `per`."""
    per = {c.id: c.per for c in caps} if caps is not None else None
    by_id = {s.id: s for s in signals if is_current(s.window_start, s.window_end - s.window_start, now_ms)}
    out = []
    for st in states:
        if not is_current(st.window_start, st.window_ms, now_ms) or (per is not None and st.cap not in per):
            continue
        sig = by_id.pop(f"{st.cap}:{st.key}:{st.window_start}", None)
        out.append(spend_row(st, sig, now_ms, per.get(st.cap) if per is not None else None))
    for sig in by_id.values():
        if per is None or sig.cap in per:
            out.append(spend_row(None, sig, now_ms, per.get(sig.cap) if per is not None else None))
    return sorted(out, key=row_order)


def spend_signals(view: FleetView) -> list[SpendCapSignal]:
    """The spend cap signals a fleet view holds, each with the earliest end its records gave."""
    return [s for signals in view.spend.values() for s in signals.values()]


class SpendBoard:
    """The latest state of each key of the spend tables' changelogs, for windows that have
    not ended. With `limit`, only the `limit` nearest to their cap (`fullness`) are kept
    (the rest are dropped as more come, and come back with their next state). A record
    that is not a state is counted in `skipped`; a tombstone forgets its key."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = limit
        self.skipped = 0
        self._states: dict[bytes, SpendState] = {}

    def add(self, key: bytes | None, value: bytes | None, now_ms: int) -> None:
        k = key or b""
        if value is None:
            self._states.pop(k, None)
            return
        try:
            state = decode_spend_state(value)
        except (msgspec.DecodeError, msgspec.ValidationError):
            self.skipped += 1
            return
        if state.window_start + state.window_ms <= now_ms:  # an ended window
            self._states.pop(k, None)
            return
        self._states[k] = state
        if self.limit is not None and len(self._states) > 2 * self.limit:
            self._trim(now_ms)

    def _trim(self, now_ms: int) -> None:
        live = {k: s for k, s in self._states.items() if s.window_start + s.window_ms > now_ms}
        if self.limit is not None and len(live) > self.limit:
            kept = sorted(live, key=lambda k: fullness(live[k]), reverse=True)[: self.limit]
            live = {k: live[k] for k in kept}
        self._states = live

    def states(self, now_ms: int) -> list[SpendState]:
        """The states of the windows holding `now_ms` (those of ended windows are dropped)."""
        self._trim(now_ms)
        return [s for s in self._states.values() if s.window_start <= now_ms]


# --- what `loopwarden spend` prints (pure) -------------------------------------------------------


@dataclass
class SpendRead:
    """What was read: the tables' states, the fleet topic, each window length's table
    (None: the topic does not exist: no spend stage ever counted such caps here)."""

    board: SpendBoard = field(default_factory=SpendBoard)
    fleet: FleetLedger = field(default_factory=FleetLedger)
    tables: dict[int, str | None] = field(default_factory=dict)


def _cap_entry(cap: SpendCapConfig, read: SpendRead, rows: list[dict[str, Any]], now_ms: int) -> dict[str, Any]:
    start = window_start(cap.window_ms, now_ms)
    mine = [r for r in rows if r["cap"] == cap.id]
    return {
        "id": cap.id,
        "per": cap.per,
        "agents": list(cap.agents) if cap.agents is not None else None,
        "window_ms": cap.window_ms,
        "window_start": start,
        "window_end": start + cap.window_ms,
        "ceilings": dict(zip(SPEND_UNITS, cap.ceilings(), strict=True)),
        "table": read.tables.get(cap.window_ms),
        "keys": len(mine),
        "reached": sum(1 for r in mine if r["reached"]),
    }


def report(
    caps: tuple[SpendCapConfig, ...], read: SpendRead, now_ms: int, source: str | None, limit: int | None = None
) -> dict[str, Any]:
    """`loopwarden spend --json`: the config's caps (their current window, table, keys
    counted, reached), the rows of their keys (at most `limit`), and what is worth saying
    (no caps, no table)."""
    rows = spend_rows(read.board.states(now_ms), spend_signals(read.fleet.view), now_ms, caps)
    notes = []
    if not caps:
        notes.append(
            "no spend caps in the config"
            + (f" ({source})" if source else " (no --config, and no config published on the config topic)")
            + ": nothing is capped (loopwarden.fleet.spendCaps, README)"
        )
    for ms in sorted({c.window_ms for c in caps}):
        if read.tables.get(ms) is None:
            names = ", ".join(c.id for c in caps if c.window_ms == ms)
            notes.append(
                f"no spend stage table for {ms} ms windows ({names}): no worker with these caps has run on "
                "these topics yet (is --topic-prefix the workers'?)"
            )
    return {
        "at": now_ms,
        "config": source,
        "caps": [_cap_entry(c, read, rows, now_ms) for c in caps],
        "rows": rows if limit is None else rows[:limit],
        "not_shown": 0 if limit is None else max(0, len(rows) - limit),
        "notes": notes,
        "skipped": read.board.skipped + read.fleet.skipped,
    }


def amount(unit: str, n: int) -> str:
    """A count in its unit's terms, for people: `$1.25`, `12,000 tokens`, `40 calls`."""
    if unit == "cost":
        return f"${n / 1_000_000:,.2f}"
    return f"{n:,} {unit}"


def used_text(unit: str, used: int, ceiling: int) -> str:
    """`7 of 5 calls`, `$0.50 of $20.00`."""
    if unit == "cost":
        return f"{amount(unit, used)} of {amount(unit, ceiling)}"
    return f"{used:,} of {amount(unit, ceiling)}"


def duration(seconds: float) -> str:
    """`45s`, `2m05s`, `12m`, `1h`, `3h05m`."""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s" if s < 600 and s % 60 else f"{s // 60}m"
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s % 3600 // 60 else f"{s // 3600}h"


def key_text(key: str, per: str | None) -> str:
    if per == "all":
        return "(all)"
    return key or "(none)"


def row_state(row: dict[str, Any]) -> str:
    """What a reached row says: paused until when, lifted, or reached."""
    if not row["reached"]:
        return ""
    if row["lifted"]:
        return f"reached, lifted at {utc_text(row['lifted_at'])} [{row['signal']}]"
    if row["paused"]:
        return f"REACHED, paused until {utc_text(row['paused_until'])} [{row['signal']}]"
    return f"reached [{row['signal']}]"


def text_lines(rep: dict[str, Any]) -> list[str]:
    """`loopwarden spend` for people: a line per cap, then its keys' rows, a line per kind."""
    out = [f"spend caps at {utc_text(rep['at'])} (config: {rep['config'] or 'none'})"]
    out += [f"note: {n}" for n in rep["notes"]]
    for cap in rep["caps"]:
        ceilings = ", ".join(amount(u, c) for u, c in cap["ceilings"].items() if c)
        left = duration(max(0, cap["window_end"] - rep["at"]) / 1000)
        out.append(
            f"\n{cap['id']}: per {cap['per']}, {ceilings} per {duration(cap['window_ms'] / 1000)} window "
            f"(ends in {left}); {cap['keys']} key(s) counted, {cap['reached']} reached"
        )
        for row in (r for r in rep["rows"] if r["cap"] == cap["id"]):
            who = key_text(row["key"], row["per"])
            for i, k in enumerate(row["kinds"]):
                head = f"  {who:<24}" if i == 0 else " " * 26
                used = used_text(k["unit"], k["used"], k["ceiling"])
                tail = f"  {row_state(row)}" if i == 0 and row["reached"] else ""
                out.append(f"{head} {used:<36} {k['percent']:>6.1f}%{tail}".rstrip())
    if rep["not_shown"]:
        out.append(f"\n{rep['not_shown']} more key(s) not shown (--limit)")
    return out


# --- reading the topics ------------------------------------------------------------------------------


async def topic_names(r: ranges.Range, settings: Settings) -> set[str]:
    """Every topic the range's consumer may see (one metadata request)."""
    from aiokafka.errors import KafkaError

    try:
        names: set[str] = await r.consumer.topics()
    except KafkaError as exc:
        raise clients.translate(exc, settings) from None
    return names


async def read_spend(
    settings: Settings, window_lengths: Iterable[int] | None, now_ms: int, limit: int | None = None, timeout: float = 60
) -> SpendRead:
    """The tables of these window lengths (None: every table there is) from where their
    current windows begin, and the fleet topic, up to their end offsets now."""
    read = SpendRead(board=SpendBoard(limit))
    r = await ranges.open_range(settings)
    try:
        tables = tables_among(await topic_names(r, settings), settings)
        wanted = sorted(set(window_lengths) if window_lengths is not None else set(tables))
        for ms in wanted:
            topic = tables.get(ms)
            read.tables[ms] = topic
            if topic is not None:
                await r.add(topic, read_from(ms, now_ms), must_exist=False)
        await r.add(settings.fleet_topic, ranges.BEGINNING, partitions=[0], must_exist=False)

        def take(records: list[Any]) -> None:
            for m in records:
                if m.topic == settings.fleet_topic:
                    read.fleet.add(m.key, m.value, m.headers or (), f"{m.topic}@{m.offset}")
                else:
                    read.board.add(m.key, m.value, now_ms)

        await r.drain(timeout, take)
    finally:
        await r.close()
    return read


async def spend_report(
    settings: Settings, config: DetectionConfig | None, source: str | None, now_ms: int, limit: int | None = None
) -> dict[str, Any]:
    """`loopwarden spend`: the caps of `config` (None: of the config topic's current
    config), their keys read from the topics, as `report` gives them."""
    if config is None:
        history = await read_configs(settings)
        if history.current is not None and history.current_config() is None:
            raise LoopwardenError(
                f"the current config {history.current} is not on {settings.config_topic} (unreadable or removed)"
            )
        config = history.current_config()
        source = f"{settings.config_topic}: {history.current}" if history.current is not None else None
    caps = config.spend_caps if config is not None else ()
    read = await read_spend(settings, [c.window_ms for c in caps], now_ms) if caps else SpendRead()
    return report(caps, read, now_ms, source, limit)
