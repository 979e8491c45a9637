"""The fleet topic: breakers, stop orders and spend caps reached (semantics.md sections 9
and 11, wire-format.md).

`<prefix>fleet` (one partition, compacted) holds fleet signals keyed by their id: a
breaker, written by the worker whose fleet stage opened it; a stop order, written by
`loopwarden stop` (a lift republishes the order with `until_ts` set, which replaces it);
a spend cap reached, written by the spend stage (`loopwarden stop --lift` republishes it
with `until_ts` now, which ends its pause: a view keeps the earliest `until_ts`).
Every worker reads the topic whole before it folds anything and then follows it
(`FleetFollower`), so each call is judged against what the worker has received; an
unreadable record is logged and skipped, never fatal.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from detectors.errors import DecodeError
from detectors.fleet import (
    Breaker,
    FleetRecord,
    FleetView,
    SpendCapSignal,
    StopOrder,
    decode_fleet_record,
    encode_fleet_record,
)
from detectors.policy import utc_text

from ..kafka import compacted
from ..kafka.errors import SettingsError
from ..kafka.settings import Settings

log = logging.getLogger("loopwarden.fleet")


@dataclass
class FleetLedger:
    """What the fleet topic held: the view calls are judged against, every record by id
    in the order taken (for `stop --list`), and the offset after the last record read.
    `on_record` is told of each new record (a worker counts them and writes alerts)."""

    view: FleetView = field(default_factory=FleetView)
    records: dict[str, FleetRecord] = field(default_factory=dict)
    next_offset: int = 0
    taken: int = 0  # records taken in (a lift counts, as a new record of its order)
    skipped: int = 0

    def add(self, key: bytes | None, value: bytes | None, headers: Iterable[tuple[str, bytes]], where: str) -> None:
        if value is None:  # a tombstone: compaction's way of forgetting a signal
            return
        try:
            rec = decode_fleet_record(value)
            if key is not None and key != rec.id.encode():
                raise DecodeError(f"the record's key {key[:100]!r} is not its id {rec.id[:100]!r}")
        except DecodeError as exc:
            self.skipped += 1
            log.warning("skipping an unreadable fleet record (key %r) at %s: %s", key, where, exc)
            return
        self.records.pop(rec.id, None)
        self.records[rec.id] = rec
        self.view.put(rec)
        self.taken += 1

    def orders(self) -> list[StopOrder]:
        return [r for r in self.records.values() if isinstance(r, StopOrder)]

    def breakers(self) -> list[Breaker]:
        return [r for r in self.records.values() if isinstance(r, Breaker)]

    def merged(self, rec: FleetRecord) -> FleetRecord:
        """A record as the view applies it (a spend cap's: `spend_cap`)."""
        return self.spend_cap(rec) if isinstance(rec, SpendCapSignal) else rec

    def spend_cap(self, rec: SpendCapSignal) -> SpendCapSignal:
        """A spend cap's record with the earliest `until_ts` any record of its id gave (a
        lift is never undone by the record published again)."""
        return self.view.spend.get((rec.cap, rec.key), {}).get(rec.id, rec)


async def read_fleet(settings: Settings, timeout: float = compacted.READ_TIMEOUT_S) -> FleetLedger:
    """Every record of the fleet topic up to its end offset now (empty if no topic)."""
    ledger = FleetLedger()
    await compacted.read_whole(settings, settings.fleet_topic, ledger, timeout)
    return ledger


class FleetFollower(compacted.Follower):
    """Follows the fleet topic from where `read_fleet` stopped, into the ledger's view."""

    def __init__(self, settings: Settings, ledger: FleetLedger) -> None:
        super().__init__(settings, settings.fleet_topic, ledger, "the fleet topic")
        self.ledger: FleetLedger = ledger

    async def start(self, **consumer_kwargs: object) -> None:
        # A stop order must reach every worker within a second: fetches wait 100 ms at most.
        await super().start(fetch_max_wait_ms=100, **consumer_kwargs)


async def publish_records(settings: Settings, records: Iterable[FleetRecord]) -> None:
    """Publish fleet records keyed by their id (the topics are created first if missing)."""
    from .topics import create_topics

    created = settings.fleet_topic in await create_topics(settings)
    out: list[tuple[bytes, bytes, list[tuple[str, bytes]]]] = [
        (r.id.encode(), encode_fleet_record(r), []) for r in records
    ]
    await compacted.publish(settings, settings.fleet_topic, out, quiet=created)


def new_order_id(now_ms: int) -> str:
    """A stop order's id: its time and a random part, so ids sort by when they were made."""
    return f"stop-{now_ms}-{secrets.token_hex(3)}"


def make_order(
    *,
    agent_id: str | None,
    gateway_id: str | None,
    run_id: str | None,
    from_ts: int,
    until_ts: int | None,
    reason: str,
    issued_by: str | None,
    order_id: str,
) -> StopOrder:
    """A stop order, checked as a worker will check it (exactly one target, a reason,
    an interval that is not empty): a SettingsError naming the problem otherwise."""
    targets = [n for n, v in (("--agent", agent_id), ("--gateway", gateway_id), ("--run", run_id)) if v is not None]
    if len(targets) != 1:
        named = " and ".join(targets) if targets else "none"
        raise SettingsError(f"a stop order names exactly one of --agent, --gateway, --run (given: {named})")
    if any(v is not None and not v.strip() for v in (agent_id, gateway_id, run_id)):
        raise SettingsError(f"{targets[0]}: an empty name matches nothing")
    if not reason.strip():
        raise SettingsError("--reason: say why (the reason is the message the stopped agent sees)")
    if until_ts is not None and until_ts <= from_ts:
        raise SettingsError("--for: the order must last longer than nothing")
    order = StopOrder(
        id=order_id,
        agent_id=agent_id,
        gateway_id=gateway_id,
        run_id=run_id,
        from_ts=from_ts,
        until_ts=until_ts,
        reason=reason,
        issued_by=issued_by,
    )
    try:  # the same check a worker applies to what it reads
        decode_fleet_record(encode_fleet_record(order))
    except DecodeError as exc:
        raise SettingsError(str(exc)) from None
    return order


def lifted(order: StopOrder, now_ms: int) -> StopOrder:
    """The order with `until_ts` set to now (or kept, if it ended before)."""
    import msgspec

    until = now_ms if order.until_ts is None or order.until_ts > now_ms else order.until_ts
    return msgspec.structs.replace(order, until_ts=max(until, order.from_ts))


def describe(rec: FleetRecord, now_ms: int) -> dict[str, object]:
    """A fleet record as `stop --list` prints it: its fields and its state now (a spend
    cap: pending, in force, lifted or ended, and whether it was lifted)."""
    import msgspec

    out: dict[str, object] = msgspec.to_builtins(rec)
    if isinstance(rec, StopOrder):
        state = "ended" if rec.until_ts is not None and rec.until_ts <= now_ms else "in force"
        out["state"] = "pending" if rec.from_ts > now_ms else state
    elif isinstance(rec, SpendCapSignal):
        lifted = rec.until_ts < rec.window_end
        out["lifted"] = lifted
        if now_ms < rec.from_ts:
            out["state"] = "pending"
        elif now_ms < rec.end():
            out["state"] = "in force"
        else:
            out["state"] = "lifted" if lifted and now_ms < rec.window_end else "ended"
    else:
        out["state"] = "open" if rec.from_ts <= now_ms < rec.until_ts else "closed"
    return out


def listing(ledger: FleetLedger, now_ms: int) -> list[dict[str, object]]:
    """`stop --list`: every record on the topic, in the order taken, as `describe` gives
    it (a spend cap as the view applies it)."""
    return [describe(ledger.merged(r), now_ms) for r in ledger.records.values()]


def list_line(row: dict[str, Any]) -> str:
    """One row of `stop --list` for people: kind, id, what it targets, its state, why."""
    if row["kind"] == "spend_cap":
        target = f"cap={row['cap']} key={row['key'] or '(none)'}"
        why = f"{row['used']} of {row['ceiling']} {row['unit']}, window ends {utc_text(int(row['window_end']))}"
    else:
        keys = ("agent_id", "gateway_id", "run_id", "tool_name")
        target = next((f"{k}={row[k]}" for k in keys if row.get(k)), "")
        why = str(row.get("reason") or "")
    return f"{row['kind']:9} {row['id']}  {target}  {row['state']}  {why}".rstrip()


async def publish_order(settings: Settings, order: StopOrder, now_ms: int, lift: bool = False) -> None:
    """Publish a stop order (or its lift), then its `stop_order` alert."""
    import json

    await publish_records(settings, [order])
    field, value = order.target()
    until = "until lifted" if order.until_ts is None else f"until {order.until_ts}"
    what = "lifted" if lift else f"stops {field} {value} from {order.from_ts} {until}"
    alert = {
        "kind": "stop_order",
        "ts": now_ms,
        "subject": order.id,
        "summary": f"stop order {order.id} {what}: {order.reason}",
        "lifted": lift,
        **describe(order, now_ms),
    }
    alert["kind"] = "stop_order"  # describe's "kind" is the record's
    await compacted.publish(settings, settings.alerts_topic, [(order.id.encode(), json.dumps(alert).encode(), [])])


def lift_spend_cap(signal: SpendCapSignal, now_ms: int) -> SpendCapSignal:
    """The lift of a reached spend cap: its record with `until_ts` now (semantics.md
    section 11, "Lifting"). A SettingsError when that would lift nothing: the window
    has ended, or the cap was lifted already (a view keeps the earliest lift)."""
    import msgspec

    if now_ms >= signal.window_end:
        raise SettingsError(
            f"spend cap {signal.id}: its window ended at {utc_text(signal.window_end)}, so nothing is paused "
            "any more: nothing to lift"
        )
    if signal.until_ts < signal.window_end:
        raise SettingsError(f"spend cap {signal.id} was lifted already, at {utc_text(signal.until_ts)}")
    return msgspec.structs.replace(signal, until_ts=now_ms)


def spend_lift_alert(lift: SpendCapSignal, now_ms: int, issued_by: str | None) -> dict[str, Any]:
    """The `spend_cap_lifted` alert of a lift (wire-format.md, "Fleet signals and alerts")."""
    by = f" by {issued_by}" if issued_by else ""
    return {
        "kind": "spend_cap_lifted",
        "ts": now_ms,
        "subject": lift.id,
        "summary": (
            f"spend cap {lift.cap} lifted for {lift.key or 'all'}{by}: its calls run again "
            f"({lift.used} of {lift.ceiling} {lift.unit} used in the window ending {utc_text(lift.window_end)})"
        ),
        "cap": lift.cap,
        "key": lift.key,
        "window_start": lift.window_start,
        "window_end": lift.window_end,
        "from_ts": lift.from_ts,
        "until_ts": lift.until_ts,
        "unit": lift.unit,
        "used": lift.used,
        "ceiling": lift.ceiling,
        "issued_by": issued_by,
    }


async def publish_spend_lift(settings: Settings, lift: SpendCapSignal, now_ms: int, issued_by: str | None) -> None:
    """Publish a spend cap's lift to the fleet topic, then its `spend_cap_lifted` alert."""
    import json

    await publish_records(settings, [lift])
    alert = spend_lift_alert(lift, now_ms, issued_by)
    await compacted.publish(settings, settings.alerts_topic, [(lift.id.encode(), json.dumps(alert).encode(), [])])


async def lift(settings: Settings, signal_id: str, now_ms: int, issued_by: str | None) -> FleetRecord:
    """`loopwarden stop --lift ID`: end the stop order or the reached spend cap of that id
    now, publish the lift and its alert; the record published. A LoopwardenError when the
    fleet topic holds neither by that id, or a spend cap's lift would lift nothing."""
    ledger = await read_fleet(settings)
    old = ledger.records.get(signal_id)
    if isinstance(old, StopOrder):
        order = lifted(old, now_ms)
        await publish_order(settings, order, now_ms, lift=True)
        return order
    if isinstance(old, SpendCapSignal):
        cap = lift_spend_cap(ledger.spend_cap(old), now_ms)
        await publish_spend_lift(settings, cap, now_ms, issued_by)
        return cap
    raise SettingsError(
        f"no stop order or spend cap reached {signal_id!r} on {settings.fleet_topic} "
        "(`loopwarden stop --list` lists them)"
    )
