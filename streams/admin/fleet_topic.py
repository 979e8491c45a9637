"""The fleet topic: breakers and stop orders (semantics.md section 9, wire-format.md).

`<prefix>fleet` (one partition, compacted) holds fleet signals keyed by their id: a
breaker, written by the worker whose fleet stage opened it, or a stop order, written by
`loopwarden stop` (a lift republishes the order with `until_ts` set, which replaces it).
Every worker reads the topic whole before it folds anything and then follows it
(`FleetFollower`), so each call is judged against what the worker has received; an
unreadable record is logged and skipped, never fatal.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field

from detectors.errors import DecodeError
from detectors.fleet import Breaker, FleetRecord, FleetView, StopOrder, decode_fleet_record, encode_fleet_record

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
    """A fleet record as `stop --list` prints it: its fields and its state now."""
    import msgspec

    out: dict[str, object] = msgspec.to_builtins(rec)
    if isinstance(rec, StopOrder):
        state = "ended" if rec.until_ts is not None and rec.until_ts <= now_ms else "in force"
        out["state"] = "pending" if rec.from_ts > now_ms else state
    else:
        out["state"] = "open" if rec.from_ts <= now_ms < rec.until_ts else "closed"
    return out


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
