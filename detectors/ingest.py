"""The one ingest path: admitting a message, folding it, and the loop over a source.

The worker (a Kafka batch), `loopwarden replay` (a file) and the topic audit all fold
their messages through `fold`, which admits each one (the checks of wire-format.md,
"Bad input") and folds it (`apply`, then its decisions encoded), so a message is refused
for the same reason, or decided the same way, wherever it is read. Nothing here raises
anything but an EventError for bad input, whatever the bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from msgspec import UNSET, Struct

from .config import DetectionConfig
from .engine import apply
from .errors import DecodeError, EventError, OversizeError
from .fingerprint import result_facts
from .fleet import Breaker, FleetView, SpendCapSignal, ToolBreakerFold
from .spend import SpendFold
from .state import RunState
from .wire import Decision, Event, ToolResult, _encoder, _Event, decode_event

DEFAULT_MAX_EVENT_BYTES = 1 << 20  # wire-format.md: a reader's default limit per event
_encode = _encoder.encode  # wire.encode, without a Python call around it


class MissingKey(EventError):
    reason = "missing_key"


class KeyMismatch(EventError):
    reason = "key_mismatch"


class InternalError(EventError):
    """An event the core could not fold for a reason of its own (a bug): it is set aside
    like any bad event, never allowed to stop the reader."""

    reason = "internal_error"


class Folded(Struct, frozen=True, gc=False):
    """An event folded: its run's state before and after, and what it decided.

    (A Struct rather than a NamedTuple: one is made per event on every reader, and a
    Struct is built in C, and costs less: benchmarks.replay. Not tracked by the cycle collector: it
    holds events, states and bytes, none of which can refer back to it.)"""

    position: Any  # where the source read it (a line number, a Kafka message, an index)
    key: bytes | None
    event: Event
    before: RunState | None
    after: RunState | None  # None: the run ended, its state is to be dropped
    decisions: tuple[Decision, ...]
    encoded: list[bytes]  # each decision's JSON, in the same order (none: `fold(encode=False)`)


class SetAside(Struct, frozen=True, gc=False):
    """A message that could not be folded: a dead letter, with its reason."""

    position: Any
    key: bytes | None
    value: bytes | None
    error: EventError


_UNSEEN: Any = object()


def fold(
    source: Iterable[tuple[Any, bytes | None, bytes | Event | None]],
    config: DetectionConfig,
    *,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    keyed: bool = True,
    load: Callable[[str, Any], RunState | None] | None = None,
    config_for: Callable[[Event], DetectionConfig] | None = None,
    fleet: FleetView | None = None,
    breakers: ToolBreakerFold | None = None,
    opened: Callable[[Breaker], None] | None = None,
    fleet_for: Callable[[Event], FleetView | None] | None = None,
    encode: bool = True,
    spend: SpendFold | None = None,
    reached: Callable[[SpendCapSignal], None] | None = None,
) -> Iterator[Folded | SetAside]:
    """Fold messages over their runs' states: the one loop every reader runs.

    `source` yields `(position, key, value)` (a Kafka batch, a file's lines, a topic read
    for an audit; `value`: bytes or an event already decoded); a `Folded` or a `SetAside`
    (a dead letter) is yielded per message, in order.

    - Admission: bytes over `max_event_bytes` are refused unread; `keyed` (false for a
      file) requires each key to be its event's run_id. A run not seen yet is read with
      `load(run_id, position)`, or starts empty.
    - `config_for(ev)`, `fleet_for(ev)`: each event's config and fleet view (an audit's).
    - `breakers`, `spend`: the tool breaker's and spend caps' rules (sections 9 and 11) run
      over each applied event after it is judged; what they open or reach joins `fleet`,
      and `opened` or `reached` is told. `encode` false: no decision is encoded (an audit)."""
    if (breakers is not None or spend is not None) and fleet is None:
        fleet = FleetView()
    states: dict[str, RunState | None] = {}
    get = states.get
    for position, key, value in source:
        try:
            ev = value if isinstance(value, _Event) else _admit(key, value, keyed, max_event_bytes)
            run = ev.run_id
            before = get(run, _UNSEEN)
            if before is _UNSEEN:
                before = load(run, position) if load is not None else None
            cfg = config if config_for is None else config_for(ev)
            try:  # a decision that cannot be encoded fails its event, before its run's state moves on
                after, decisions = apply(before, ev, cfg, fleet if fleet_for is None else fleet_for(ev))
                encoded = []
                if decisions and encode:  # (a call's one decision: no map to make)
                    encoded = [_encode(decisions[0])] if len(decisions) == 1 else list(map(_encode, decisions))
                if (breakers is not None or spend is not None) and after is not before:  # applied, not a duplicate
                    _fleet_rules(ev, fleet, breakers, opened, spend, reached)  # type: ignore[arg-type]  # set above
            except EventError:
                raise
            except Exception as exc:
                raise InternalError(f"{type(exc).__name__}: {exc}") from None
        except EventError as exc:
            yield SetAside(position, key, value if not isinstance(value, _Event) else None, exc)
            continue
        if after is not None or load is not None:
            states[run] = after
        else:
            states.pop(run, None)  # nothing to shadow: forget the run (memory stays bounded)
        yield Folded(position, key, ev, before, after, decisions, encoded)


def _admit(key: bytes | None, value: bytes | None, keyed: bool, max_event_bytes: int) -> Event:
    """A message's event, admitted as wire-format.md ("Bad input") says, in one order: a
    value at all, its size, its decoding (with the shared limits), its key; an EventError
    names why not."""
    if value is None:
        raise DecodeError("the message has no value (a tombstone on the events topic)")
    if len(value) > max_event_bytes:
        raise OversizeError(f"{len(value)} bytes > limit {max_event_bytes}")
    try:
        ev = decode_event(value)
    except EventError:
        if not value.strip():  # checked only here: a copy of every message costs
            raise DecodeError("an empty message: no JSON value") from None
        raise
    except Exception as exc:  # decode_event names what it knows; anything else is ours
        raise InternalError(f"decoding failed: {type(exc).__name__}: {exc}") from None
    if keyed:
        # A Kafka message without a key landed on a partition chosen at random, so its
        # run could be split across workers.
        if key is None:
            raise MissingKey("the message has no key; events must be keyed by their run_id")
        if key != ev.run_id.encode():
            raise KeyMismatch(f"message key {key[:200]!r} is not the event's run_id {ev.run_id[:200]!r}")
    return ev


def _fleet_rules(
    ev: Event,
    fleet: FleetView,
    breakers: ToolBreakerFold | None,
    opened: Callable[[Breaker], None] | None,
    spend: SpendFold | None,
    reached: Callable[[SpendCapSignal], None] | None,
) -> None:
    """An applied event through the breaker's and the spend caps' rules, into `fleet`."""
    if breakers is not None and type(ev) is ToolResult:
        b = _failure(breakers, ev)
        if b is not None:
            fleet.put(b)
            if opened is not None:
                opened(b)
    if spend is not None:
        for signal in spend.observe(ev):
            fleet.put(signal)
            if reached is not None:
                reached(signal)


def failure_of(ev: ToolResult) -> tuple[str, str, int, str, str] | None:
    """An applied, non-duplicate result as a failure for the tool breaker, (tool, outcome,
    ts, run_id, gateway_id), or None: a failure has a ts, an outcome digest, and `error`
    present or `failed` true (semantics.md section 9)."""
    if ev.ts is None or (ev.error is UNSET and ev.failed is not True):
        return None
    tool, _sig, outcome, _unknown = result_facts(ev)
    if outcome is None:
        return None
    return tool, outcome, ev.ts, ev.run_id, ev.gateway_id


def _failure(breakers: ToolBreakerFold, ev: ToolResult) -> Breaker | None:
    """Feed an applied result to the breaker's rule if it is a failure."""
    f = failure_of(ev)
    return breakers.observe(*f) if f is not None else None


def offline_fleet(
    config: DetectionConfig, records: Iterable[Any] = ()
) -> tuple[FleetView | None, ToolBreakerFold | None]:
    """What an offline fold judges calls against: the given fleet records (stop orders;
    spend cap records are taken as lifts only, `FleetView.lift`) and, with the tool
    breaker on, its rule over the input (semantics.md section 9). (None, None) when
    there is nothing to judge by, so a fold without fleet costs nothing; with spend caps
    configured there is always a view, for the caps `offline_spend`'s rule reaches."""
    view = FleetView()
    for rec in records:
        if isinstance(rec, SpendCapSignal):
            view.lift(rec)
        else:
            view.put(rec)
    rule = ToolBreakerFold(config.tool_breaker) if config.tool_breaker is not None else None
    if rule is None and not view.orders and not view.breakers and not config.spend_caps:
        return None, None
    return view, rule


def offline_spend(config: DetectionConfig) -> SpendFold | None:
    """The spend caps' rule over an offline fold's input (semantics.md section 11), or
    None without caps."""
    return SpendFold(config.spend_caps) if config.spend_caps else None


def replay_iter(
    events: Iterable[Event], config: DetectionConfig, fleet_records: Iterable[Any] = ()
) -> Iterator[Decision | SetAside]:
    """The decisions of decoded events, in order, and the events that could not be
    applied (a stale duplicate), as they occur (`SetAside.position` is the index).
    `fleet_records`: stop orders (and breakers) to judge calls against, and spend cap
    lifts, as `--fleet`; breakers and spend caps are also reached from the events."""
    fleet, rule = offline_fleet(config, fleet_records)
    source = ((i, None, ev) for i, ev in enumerate(events))
    for out in fold(source, config, keyed=False, fleet=fleet, breakers=rule, spend=offline_spend(config)):
        if isinstance(out, Folded):
            yield from out.decisions
        else:
            yield out


def replay(events: Iterable[Event], config: DetectionConfig, fleet_records: Iterable[Any] = ()) -> list[Decision]:
    """Every decision the events yield, in order (rejected events yield none)."""
    return [d for d in replay_iter(events, config, fleet_records) if isinstance(d, Decision)]
