"""Fleet spend caps (semantics.md section 11): what an event adds to a cap, and the rule
that reaches one. Pure, ordered by its input, never by a clock.

The arithmetic is written once, for both places that count:

- `spend_of(caps, event)`: what an applied, non-duplicate event adds to each cap it
  matches, as `SpendRecord`s: the records a worker forwards to the `loopwarden.spend`
  topic (keyed by `SpendRecord.topic_key()`), and what the offline fold counts.
- `add_spend(cap, count, record)`: one record added to its key's count in its window
  (`SpendCount`, what the spend stage's windowed table holds per key and window): the
  new count, and the signal (`fleet.SpendCapSignal`) if the record reaches the cap.
- `SpendFold`: offline replay's rule, the two above over the events in input order.

The live spend stage keeps a `SpendCount` per `topic_key()` in a tumbling window of
`cap.window_ms` in event time (`SpendRecord.ts`), counts each `event_id` once, and
publishes the signal `add_spend` returns to the fleet topic, as the fold puts it in
its view.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta, Struct

from .config import SpendCapConfig, micro_dollars
from .errors import DecodeError
from .fleet import SPEND_UNITS, SpendCapSignal
from .wire import MAX_SAFE_INTEGER, Event, ToolCall, Usage

Millis = Annotated[int, Meta(ge=-MAX_SAFE_INTEGER, le=MAX_SAFE_INTEGER)]
Amount = Annotated[int, Meta(ge=0, le=2**63 - 1)]
MAX_COUNT = 2**63 - 1  # a count stops here (what a stored count and a record hold)
KEPT_WINDOWS = 8  # per cap and key: the windows the offline fold keeps counting (see SpendFold)


class SpendRecord(Struct, frozen=True, kw_only=True):
    """A record of the `loopwarden.spend` topic (wire-format.md): what one event adds to
    one cap for one key, in the window starting at `window_start` (its `ts`'s). Keyed by
    `{cap}:{key}`; `event_id` (`{run_id}:{seq}`) lets the stage count a record read twice
    once."""

    cap: Annotated[str, Meta(min_length=1)]
    key: str
    window_start: Millis
    ts: Millis
    event_id: Annotated[str, Meta(min_length=1)]
    tokens: Amount = 0
    cost_micros: Amount = 0
    calls: Amount = 0

    def topic_key(self) -> str:
        return f"{self.cap}:{self.key}"


_record_decoder = msgspec.json.Decoder(SpendRecord)
_record_encoder = msgspec.json.Encoder()


def decode_spend_record(data: bytes | str) -> SpendRecord:
    """One record of the spend topic; DecodeError naming the problem (a wrong type, a
    negative amount, a `ts` before its window's start)."""
    try:
        rec = _record_decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise DecodeError(f"not a spend record: {exc}") from None
    except msgspec.DecodeError as exc:
        raise DecodeError(f"not a spend record: invalid JSON: {exc}") from None
    if rec.ts < rec.window_start:
        raise DecodeError(f"spend record {rec.event_id!r}: ts {rec.ts} is before its window_start {rec.window_start}")
    return rec


def encode_spend_record(rec: SpendRecord) -> bytes:
    return _record_encoder.encode(rec)


def check_spend_record(rec: SpendRecord, cap: SpendCapConfig) -> str | None:
    """Why `rec` cannot count for `cap` (the config's cap of its id), or None: its window
    must be the one its ts falls in under the cap's `windowMs` (a worker under another
    config forwarded it)."""
    if rec.cap != cap.id:
        return f"the record is for cap {rec.cap!r}, not {cap.id!r}"
    if cap.window_of(rec.ts) != rec.window_start:
        return f"window_start {rec.window_start} is not the start of ts {rec.ts}'s window of {cap.window_ms} ms"
    return None


class SpendCount(Struct, frozen=True, array_like=True, gc=False):
    """What one key has spent on one cap in one window, in each kind's unit, and whether
    the cap was reached there (at most once per key and window, semantics.md section 11)."""

    tokens: int = 0
    cost_micros: int = 0
    calls: int = 0
    reached: bool = False


NOTHING = SpendCount()


def amounts_of(ev: Event) -> tuple[int, int, int] | None:
    """(tokens, micro-dollars, calls) an event adds to a cap it matches: a usage event
    its tokens and cost (section 8's arithmetic), a tool_call one call; None for the
    other events."""
    kind = type(ev)
    if kind is ToolCall:
        return 0, 0, 1
    if kind is Usage:
        u: Usage = ev  # type: ignore[assignment]  # (checked by type, without isinstance)
        return u.input_tokens + u.output_tokens, micro_dollars(u.cost_usd) if u.cost_usd else 0, 0
    return None


def spend_of(caps: tuple[SpendCapConfig, ...], ev: Event) -> list[SpendRecord]:
    """What an applied, non-duplicate event adds to each of `caps` it matches, in the
    caps' order: nothing for an event without `ts`, or of a type that counts for none."""
    ts = ev.ts
    if ts is None or not caps:
        return []
    amounts = amounts_of(ev)
    if amounts is None:
        return []
    tokens, cost, calls = amounts
    event_id = f"{ev.run_id}:{ev.seq}"
    out = []
    for cap in caps:
        key = cap.key_of(ev.agent_id, ev.gateway_id)
        if key is not None:
            out.append(
                SpendRecord(
                    cap=cap.id,
                    key=key,
                    window_start=cap.window_of(ts),
                    ts=ts,
                    event_id=event_id,
                    tokens=tokens,
                    cost_micros=cost,
                    calls=calls,
                )
            )
    return out


def reached_kind(cap: SpendCapConfig, count: SpendCount) -> tuple[str, int, int] | None:
    """The first kind (tokens, cost, calls) whose count is at least its ceiling, as (unit,
    used, ceiling), or None."""
    for unit, used, ceiling in zip(
        SPEND_UNITS, (count.tokens, count.cost_micros, count.calls), cap.ceilings(), strict=True
    ):
        if ceiling is not None and used >= ceiling:
            return unit, used, ceiling
    return None


def add_spend(cap: SpendCapConfig, count: SpendCount, rec: SpendRecord) -> tuple[SpendCount, SpendCapSignal | None]:
    """One record added to its key's count in its window (`count`: what the key spent
    there before it; `NOTHING` for a new window): the new count, and the signal if this
    record reaches the cap (the first after which a kind's count is at least its
    ceiling; once per key and window). The signal is in force from the record's ts to
    the window's end. Counts stop at MAX_COUNT."""
    new = SpendCount(
        min(count.tokens + rec.tokens, MAX_COUNT),
        min(count.cost_micros + rec.cost_micros, MAX_COUNT),
        min(count.calls + rec.calls, MAX_COUNT),
        count.reached,
    )
    if count.reached:
        return new, None
    hit = reached_kind(cap, new)
    if hit is None:
        return new, None
    unit, used, ceiling = hit
    start = rec.window_start
    end = start + cap.window_ms
    signal = SpendCapSignal(
        id=f"{cap.id}:{rec.key}:{start}",
        cap=cap.id,
        key=rec.key,
        window_start=start,
        window_end=end,
        from_ts=rec.ts,
        until_ts=end,
        unit=unit,  # type: ignore[arg-type]  # one of SPEND_UNITS
        used=used,
        ceiling=ceiling,
    )
    return msgspec.structs.replace(new, reached=True), signal


class SpendFold:
    """The spend caps' rule over events in input order (offline replay): each applied,
    non-duplicate event is counted (`spend_of`, `add_spend`) and the signals it reaches
    are returned, to be put in the view later calls are judged against.

    Per cap and key it keeps the counts of its newest KEPT_WINDOWS windows (by start).
    An event whose window is older than every window it dropped is not counted: its
    window's count is gone, and counting from nothing could reach the cap there twice.
    For that, gateways' clocks would have to disagree by KEPT_WINDOWS windows; short of
    that the rule is exact."""

    __slots__ = ("_by_id", "_counts", "_floor", "caps")

    def __init__(self, caps: tuple[SpendCapConfig, ...]) -> None:
        self.caps = caps
        self._by_id = {cap.id: cap for cap in caps}
        self._counts: dict[tuple[str, str], dict[int, SpendCount]] = {}
        self._floor: dict[tuple[str, str], int] = {}  # the newest window start dropped, per cap and key

    def observe(self, ev: Event) -> list[SpendCapSignal]:
        """Count one applied, non-duplicate event; the signals it reaches, in the caps' order."""
        out = []
        for rec in spend_of(self.caps, ev):
            signal = self.add(self._by_id[rec.cap], rec)
            if signal is not None:
                out.append(signal)
        return out

    def add(self, cap: SpendCapConfig, rec: SpendRecord) -> SpendCapSignal | None:
        """Count one record of `cap`; the signal it reaches, if any."""
        where = (rec.cap, rec.key)
        windows = self._counts.get(where)
        if windows is None:
            windows = self._counts[where] = {}
        start = rec.window_start
        count = windows.get(start)
        if count is None:
            floor = self._floor.get(where)
            if floor is not None and start <= floor:
                return None  # its window's count was dropped (see the class)
            count = NOTHING
        new, signal = add_spend(cap, count, rec)
        windows[start] = new
        if len(windows) > KEPT_WINDOWS:
            oldest = min(windows)
            del windows[oldest]
            self._floor[where] = max(oldest, self._floor.get(where, oldest))
        return signal

    def count(self, cap_id: str, key: str, window_start: int) -> SpendCount | None:
        """What `key` spent on the cap in that window so far (None: nothing, or dropped)."""
        return self._counts.get((cap_id, key), {}).get(window_start)


class SpendState(Struct, frozen=True, array_like=True, gc=False):
    """What the live spend stage keeps for one cap, key and window (its windowed table's
    value), whole enough that a reader of the table's changelog needs no config: the
    cap's ceilings and window, the count, the marks warned (the highest of 0, 80 and 95
    percent, per kind), the signal once reached, and per source partition of the events
    topic the highest offset counted (`seen`): a record forwarded again after a
    worker's restart carries the same source offset, and counts once."""

    cap: str
    key: str
    window_start: int
    window_ms: int
    ceilings: tuple[int | None, int | None, int | None]
    count: SpendCount = NOTHING
    marks: tuple[int, int, int] = (0, 0, 0)
    signal: str | None = None
    seen: dict[int, int] = {}

    def counted(self, partition: int, offset: int) -> bool:
        """Whether the record from that source offset was counted already."""
        top = self.seen.get(partition)
        return top is not None and offset <= top


_state_encoder = msgspec.msgpack.Encoder()
_state_decoder = msgspec.msgpack.Decoder(SpendState)


def encode_spend_state(state: SpendState) -> bytes:
    return _state_encoder.encode(state)


def decode_spend_state(data: bytes) -> SpendState:
    return _state_decoder.decode(data)


def new_marks(state: SpendState) -> list[tuple[str, int, int, int, int]]:
    """The marks (80 and 95 percent of a ceiling) the count reached and that were not
    warned yet: (unit, mark, percent, used, ceiling), one per kind at most (its highest
    new mark)."""
    out = []
    for unit, used, ceiling, warned in zip(
        SPEND_UNITS, counts_of(state.count), state.ceilings, state.marks, strict=True
    ):
        if ceiling is None:
            continue
        reached = max((m for m in (80, 95) if used * 100 >= m * ceiling), default=0)
        if reached > warned:
            out.append((unit, reached, used * 100 // ceiling, used, ceiling))
    return out


def counts_of(c: SpendCount) -> tuple[int, int, int]:
    """(tokens, micro-dollars, calls)."""
    return (c.tokens, c.cost_micros, c.calls)
