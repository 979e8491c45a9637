"""The fleet's signals (semantics.md sections 9 and 11): stop orders, the tool breaker's
rule, and the spend caps reached.

Everything here is pure and ordered by its input, never by a clock:

- `decode_fleet_record` reads one record of the `loopwarden.fleet` topic (or a line of
  `replay --fleet FILE`): a `StopOrder`, a `Breaker` or a `SpendCapSignal`, checked as
  wire-format.md says.
- `FleetView` is what a call is judged against: the orders, breakers and spend cap
  signals received so far (offline: all the orders of the file, and the breakers and
  caps the input reached before the call, each cap bounded by the file's lifts; live:
  what a worker has read from the fleet topic).
- `ToolBreakerFold` is the breaker's rule, a fold over failures in event order: each
  failure either opens a breaker (returned, to be put in a view or published) or not.
"""

from __future__ import annotations

from collections import deque
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct

from .config import SpendCapConfig, ToolBreakerConfig
from .errors import DecodeError
from .wire import MAX_SAFE_INTEGER, ToolCall

Millis = Annotated[int, Meta(ge=-MAX_SAFE_INTEGER, le=MAX_SAFE_INTEGER)]
NonEmpty = Annotated[str, Meta(min_length=1)]
KEPT_BREAKERS = 16  # per tool: the newest breakers a view keeps (older ones ended long ago)
KEPT_SPEND_SIGNALS = 16  # per cap and key: the newest windows' signals a view keeps (older windows ended)
SPEND_UNITS = ("tokens", "cost", "calls")  # a cap's kinds, in the order they are taken
Amount = Annotated[int, Meta(ge=0)]


class StopOrder(Struct, frozen=True, kw_only=True, tag_field="kind", tag="stop"):
    """An operator's order to stop an agent, a gateway or a run over `[from_ts, until_ts)`
    in event time (`until_ts` None: until lifted). Exactly one target is set."""

    id: NonEmpty
    agent_id: NonEmpty | None = None
    gateway_id: NonEmpty | None = None
    run_id: NonEmpty | None = None
    from_ts: Millis
    until_ts: Millis | None = None
    reason: str
    issued_by: str | None = None

    def target(self) -> tuple[Literal["agent_id", "gateway_id", "run_id"], str]:
        if self.agent_id is not None:
            return "agent_id", self.agent_id
        if self.gateway_id is not None:
            return "gateway_id", self.gateway_id
        assert self.run_id is not None  # decode_fleet_record checked there is one
        return "run_id", self.run_id

    def in_force(self, ts: int) -> bool:
        return self.from_ts <= ts and (self.until_ts is None or ts < self.until_ts)


class Breaker(Struct, frozen=True, kw_only=True, tag_field="kind", tag="breaker"):
    """An open tool breaker: calls of `tool_name` in `[from_ts, until_ts)` are blocked."""

    id: NonEmpty
    tool_name: NonEmpty
    outcome: NonEmpty
    from_ts: Millis
    until_ts: Millis
    runs: int
    gateways: int
    window_ms: int


class SpendCapSignal(Struct, frozen=True, kw_only=True, tag_field="kind", tag="spend_cap"):
    """A spend cap reached (semantics.md section 11): calls whose key for cap `cap` is
    `key` are paused over `[from_ts, until_ts)`, never past the window's end.

    `id` is `{cap}:{key}:{window_start}`. `used` and `ceiling` are in the unit's own terms
    (tokens, micro-dollars, calls). The spend stage writes `until_ts` = `window_end`; a
    lift republishes the record with an earlier one. A record read with a null `until_ts`
    (which lifts nothing) is taken with the window's end (`decode_fleet_record`)."""

    id: NonEmpty
    cap: NonEmpty
    key: str
    window_start: Millis
    window_end: Millis
    from_ts: Millis
    until_ts: Millis
    unit: Literal["tokens", "cost", "calls"]
    used: Amount
    ceiling: Annotated[int, Meta(ge=1)]

    def end(self) -> int:
        """Where the pause ends: `until_ts`, if before the window's end."""
        return self.until_ts if self.until_ts < self.window_end else self.window_end

    def in_force(self, ts: int) -> bool:
        return self.from_ts <= ts < self.end()


class _SpendCapIn(Struct, frozen=True, kw_only=True, tag_field="kind", tag="spend_cap"):
    """A spend cap record as read: `until_ts` may be null (`SpendCapSignal` otherwise)."""

    id: NonEmpty
    cap: NonEmpty
    key: str
    window_start: Millis
    window_end: Millis
    from_ts: Millis
    until_ts: Millis | None = None
    unit: Literal["tokens", "cost", "calls"]
    used: Amount
    ceiling: Annotated[int, Meta(ge=1)]


FleetRecord = StopOrder | Breaker | SpendCapSignal
_RecordIn = StopOrder | Breaker | _SpendCapIn  # what is read; a spend cap's record checked, then made whole
_decoder = msgspec.json.Decoder(_RecordIn)
_encoder = msgspec.json.Encoder()


def decode_fleet_record(data: bytes | str) -> FleetRecord:
    """One fleet record; DecodeError naming the problem (an unknown kind, a stop order
    without a target or with two, a wrong type)."""
    try:
        rec = _decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise DecodeError(f"not a fleet record: {exc}") from None
    except msgspec.DecodeError as exc:
        raise DecodeError(f"not a fleet record: invalid JSON: {exc}") from None
    if isinstance(rec, StopOrder):
        targets = [n for n in ("agent_id", "gateway_id", "run_id") if getattr(rec, n) is not None]
        if len(targets) != 1:
            named = ", ".join(targets) if targets else "none"
            raise DecodeError(
                f"stop order {rec.id!r} must name exactly one of agent_id, gateway_id, run_id (it names {named})"
            )
        if rec.until_ts is not None and rec.until_ts < rec.from_ts:
            raise DecodeError(f"stop order {rec.id!r}: until_ts {rec.until_ts} is before from_ts {rec.from_ts}")
    elif isinstance(rec, _SpendCapIn):
        return _checked_spend_cap(rec)
    return rec


def _checked_spend_cap(rec: _SpendCapIn) -> SpendCapSignal:
    """A spend cap record whose fields agree (its id names its cap, key and window, by
    which lifts find their signal; it starts in its window), with a null `until_ts` taken
    as the window's end; DecodeError naming what does not agree. A `until_ts` before
    `from_ts` is taken, not refused: it pauses nothing (a lift written before the cap was
    reached there), which is what a lift means."""
    name = f"spend cap record {rec.id!r}"
    if rec.id != f"{rec.cap}:{rec.key}:{rec.window_start}":
        raise DecodeError(
            f"{name}: its id is not {{cap}}:{{key}}:{{window_start}} ({rec.cap!r}, {rec.key!r}, {rec.window_start})"
        )
    if rec.window_end <= rec.window_start:
        raise DecodeError(f"{name}: window_end {rec.window_end} is not after window_start {rec.window_start}")
    if not rec.window_start <= rec.from_ts < rec.window_end:
        raise DecodeError(f"{name}: from_ts {rec.from_ts} is not in its window [{rec.window_start}, {rec.window_end})")
    fields = msgspec.structs.asdict(rec)
    fields["until_ts"] = rec.window_end if rec.until_ts is None else rec.until_ts
    return SpendCapSignal(**fields)


def encode_fleet_record(rec: FleetRecord) -> bytes:
    return _encoder.encode(rec)


def _norm(agent_id: str) -> str:
    return agent_id.strip().lower()


class FleetView:
    """The stop orders, breakers and spend cap signals a call is judged against
    (semantics.md sections 9 and 11).

    `orders`, `breakers` and `spend` are empty in the common case; the engine tests them
    before asking anything, so a quiet fleet costs one truth test per call.

    A spend cap signal's end only ever moves earlier: of the records of one id, the view
    keeps the newest's fields with the earliest `until_ts` any of them gave (a lift). So
    the order the records arrive in does not matter, a record published again does not
    undo a lift, and a lift read before the cap is reached (offline: `lift`, from
    `replay --fleet FILE`) still ends the signal when the input reaches it."""

    __slots__ = ("_by_target", "_lifts", "breakers", "orders", "spend")

    def __init__(self, records: Any = ()) -> None:
        self.orders: dict[str, StopOrder] = {}
        self.breakers: dict[str, list[Breaker]] = {}
        self.spend: dict[tuple[str, str], dict[str, SpendCapSignal]] = {}  # (cap, key) -> signals by id
        self._by_target: dict[tuple[str, str], dict[str, StopOrder]] = {}
        self._lifts: dict[str, int] = {}  # signal id -> the earliest until_ts a lift gave
        for rec in records:
            self.put(rec)

    def put(self, rec: FleetRecord) -> None:
        """Take a record: a later stop order with the same id replaces the earlier one (a
        lift), a breaker joins its tool's list, a spend cap signal is in force (its end
        the earliest of its records' and lifts')."""
        if isinstance(rec, StopOrder):
            old = self.orders.pop(rec.id, None)
            if old is not None:
                self._target_index(old).pop(old.id, None)
            self.orders[rec.id] = rec
            self._target_index(rec)[rec.id] = rec
            return
        if isinstance(rec, SpendCapSignal):
            self._put_spend(rec)
            return
        kept = self.breakers.setdefault(rec.tool_name, [])
        kept[:] = [b for b in kept if b.id != rec.id]
        kept.append(rec)
        if len(kept) > KEPT_BREAKERS:
            del kept[0]

    def lift(self, rec: SpendCapSignal) -> None:
        """Take a spend cap record as a lift only (offline, `replay --fleet FILE`): it
        ends the signal of its id, held or reached later, at its `until_ts`; it pauses
        nothing by itself (offline replay reaches caps from its input)."""
        until = rec.until_ts
        if until >= rec.window_end:
            return  # lifts nothing
        known = self._lifts.get(rec.id)
        if known is None or until < known:
            self._lifts[rec.id] = until
        held = self.spend.get((rec.cap, rec.key), {}).get(rec.id)
        if held is not None:
            self._put_spend(held)

    def _put_spend(self, rec: SpendCapSignal) -> None:
        signals = self.spend.setdefault((rec.cap, rec.key), {})
        end = self._lifts.get(rec.id)
        old = signals.pop(rec.id, None)
        if old is not None and (end is None or old.until_ts < end):
            end = old.until_ts
        if end is not None and end < rec.until_ts:
            rec = msgspec.structs.replace(rec, until_ts=end)
        signals[rec.id] = rec
        if len(signals) > KEPT_SPEND_SIGNALS:
            del signals[min(signals, key=lambda i: signals[i].window_start)]

    def _target_index(self, order: StopOrder) -> dict[str, StopOrder]:
        field, value = order.target()
        if field == "agent_id":
            value = _norm(value)
        return self._by_target.setdefault((field, value), {})

    def stop_for(self, ev: ToolCall) -> StopOrder | None:
        """The stop order in force at the call's ts that matches it (among several, the
        smallest id in code-point order); None for a call without ts."""
        ts = ev.ts
        if ts is None or not self.orders:
            return None
        found: StopOrder | None = None
        keys = [("run_id", ev.run_id), ("gateway_id", ev.gateway_id)]
        if ev.agent_id is not None:
            keys.append(("agent_id", _norm(ev.agent_id)))
        for key in keys:
            for order in self._by_target.get(key, {}).values():
                if order.in_force(ts) and (found is None or order.id < found.id):
                    found = order
        return found

    def breaker_for(self, tool: str, ts: int | None) -> Breaker | None:
        """The breaker of `tool` (normalized) whose interval holds `ts`, the newest if several."""
        if ts is None:
            return None
        for b in reversed(self.breakers.get(tool, ())):
            if b.from_ts <= ts < b.until_ts:
                return b
        return None

    def spend_for(self, caps: tuple[SpendCapConfig, ...], ev: ToolCall) -> tuple[SpendCapConfig, SpendCapSignal] | None:
        """The spend cap signal in force at the call's ts for the call's key under one of
        `caps` (the config's; a signal of a cap the config does not have applies to
        nothing), with its cap; among several, the smallest signal id in code-point
        order. None for a call without ts."""
        ts = ev.ts
        if ts is None or not self.spend:
            return None
        found: tuple[SpendCapConfig, SpendCapSignal] | None = None
        for cap in caps:
            key = cap.key_of(ev.agent_id, ev.gateway_id)
            if key is None:
                continue
            signals = self.spend.get((cap.id, key))
            if not signals:
                continue
            for s in signals.values():
                if s.in_force(ts) and (found is None or s.id < found[1].id):
                    found = cap, s
        return found


class ToolBreakerFold:
    """The tool breaker's rule over failures in event order (semantics.md section 9).

    Per (tool, outcome) it keeps the failures of the last two windows (by the newest ts
    seen): a failure older than that could count only for a failure that arrives later
    with a ts more than a window older than the newest, which gateways' clocks would have
    to disagree by; past that the rule is exact.

    `recheck_late` (the live stage's, never offline replay's): a failure older than the
    newest one seen for its (tool, outcome) is also judged at that newest time, as if it
    had arrived in event order; offline the input order is the event order, exactly."""

    __slots__ = ("_failures", "_last_end", "_newest", "_open", "config", "recheck_late")

    def __init__(self, config: ToolBreakerConfig, recheck_late: bool = False) -> None:
        self.config = config
        self.recheck_late = recheck_late  # live only: see observe
        self._failures: dict[tuple[str, str], deque[tuple[int, str, str]]] = {}
        self._newest: dict[tuple[str, str], int] = {}
        self._last_end: dict[str, int] = {}  # tool -> until_ts of its last breaker
        self._open: dict[str, list[tuple[int, int]]] = {}  # tool -> intervals of its breakers (newest last)

    def observe(self, tool: str, outcome: str, ts: int, run_id: str, gateway_id: str) -> Breaker | None:
        """Take one failure; the breaker it opens, if any."""
        cfg = self.config
        key = (tool, outcome)
        window = self._failures.get(key)
        if window is None:
            window = self._failures[key] = deque()
        window.append((ts, run_id, gateway_id))
        newest = self._newest.get(key)
        if newest is None or ts > newest:
            newest = self._newest[key] = ts
        horizon = newest - 2 * cfg.window_ms
        while window and window[0][0] <= horizon:
            window.popleft()
        b = self._judge(tool, outcome, ts, window)
        if b is None and self.recheck_late and ts < newest:
            # Live, failures reach the stage in the order the workers folded them, not in
            # event order: a late one is also counted where the rule would have counted it
            # had it come in order, at the newest failure's time.
            b = self._judge(tool, outcome, newest, window)
        return b

    def _judge(self, tool: str, outcome: str, ts: int, window: deque[tuple[int, str, str]]) -> Breaker | None:
        """The rule at time `ts` for (tool, outcome): a breaker if it opens there."""
        cfg = self.config
        for start, end in self._open.get(tool, ()):
            if start <= ts < end:
                return None  # T has an open breaker at t
        low = max(ts - cfg.window_ms, self._last_end.get(tool, ts - cfg.window_ms) - 1)
        runs: set[str] = set()
        gateways: set[str] = set()
        for f_ts, f_run, f_gw in window:
            if low < f_ts <= ts:
                runs.add(f_run)
                gateways.add(f_gw)
        if len(runs) < cfg.min_runs:
            return None
        until = ts + cfg.cool_down_ms
        self._last_end[tool] = until
        kept = self._open.setdefault(tool, [])
        kept.append((ts, until))
        if len(kept) > KEPT_BREAKERS:
            del kept[0]
        return Breaker(
            id=f"{tool}:{outcome}:{ts}",
            tool_name=tool,
            outcome=outcome,
            from_ts=ts,
            until_ts=until,
            runs=len(runs),
            gateways=len(gateways),
            window_ms=cfg.window_ms,
        )


class ToolWindow(Struct, frozen=True, array_like=True):
    """One tool's part of the breaker's state, as a fleet stage stores it (in a table
    keyed by tool name): its failures by outcome, the newest ts seen per outcome, the end
    of its last breaker and the intervals of its breakers."""

    failures: dict[str, list[tuple[int, str, str]]]
    newest: dict[str, int]
    last_end: int | None
    intervals: list[tuple[int, int]]


_window_encoder = msgspec.msgpack.Encoder()
_window_decoder = msgspec.msgpack.Decoder(ToolWindow)


def export_tool(rule: ToolBreakerFold, tool: str) -> bytes:
    """The rule's state for `tool`, encoded (what `import_tool` takes back)."""
    failures = {o: list(w) for (t, o), w in rule._failures.items() if t == tool}
    newest = {o: ts for (t, o), ts in rule._newest.items() if t == tool}
    window = ToolWindow(failures, newest, rule._last_end.get(tool), list(rule._open.get(tool, ())))
    return _window_encoder.encode(window)


def import_tool(rule: ToolBreakerFold, tool: str, data: bytes) -> None:
    """Put a state `export_tool` encoded back into `rule` (a recovering fleet stage)."""
    w = _window_decoder.decode(data)
    for outcome, items in w.failures.items():
        rule._failures[(tool, outcome)] = deque(tuple(i) for i in items)  # type: ignore[misc]
    for outcome, ts in w.newest.items():
        rule._newest[(tool, outcome)] = ts
    if w.last_end is not None:
        rule._last_end[tool] = w.last_end
    rule._open[tool] = [tuple(i) for i in w.intervals]  # type: ignore[misc]
