"""The join: decisions read from the decisions topic, waiting by `event_id` for the
event they answer (kept by `(run_id, seq)`, the pair an `event_id` spells: an event's
key is then made without formatting a string, twice per event read).

The reader keeps the decisions a grace period ahead of the events in message time, so
that when an event is folded, the decision recorded for it is already here: it names
the config the event is replayed under, and is compared with the replayed one. A
decision whose event has not come within the grace period after it never will
(`expire`): it is unexpected. The ids of events already folded are kept for one more
grace period, so that a second record of the same event is told apart: the same
verdict again (a duplicate), another one (a conflict), or one recorded only after its
event was folded (late).

Every recorded decision the audit holds is here (`pending`), and nowhere else, and not
as the decoded decision: as a `Recorded`, its verdict (one object shared by every
decision with the same verdict, message and config) and a hash of the whole decision's
canonical encoding, which is all the comparison needs (an audit holds a grace period's
worth of them: 1.3 KB each as decoded decisions, about 0.2 KB so).
"""

from __future__ import annotations

from collections import Counter, deque
from typing import NamedTuple

import msgspec

from detectors.wire import Decision, decode_decision, encode

from .options import ALL_RUNS, Scope

Key = tuple[str, int]  # (run_id, seq): an event_id


class Msg(NamedTuple):
    """A consumed record, as the audit reads it."""

    partition: int
    offset: int
    timestamp: int  # ms since the epoch (the record's timestamp)
    key: bytes | None
    value: bytes | None


class Verdict(msgspec.Struct, frozen=True, gc=False):
    """What the audit reads of a recorded decision besides its identity: its verdict (as
    compared for duplicates), the message and config the reports show, and the fleet
    signal it was judged with. Frozen, so equal ones are shared (`Verdicts`)."""

    action: str
    level: str
    detector: str | None
    count: int | None
    warning_key: str | None
    message: str | None
    config_hash: str
    fleet_signal: str | None


class Verdicts:
    """One `Verdict` object per distinct verdict: most recorded decisions share a few (an
    allow under each config), so a pending decision costs a reference, not its strings.
    Started afresh past `limit` distinct ones (the objects in use stay alive)."""

    def __init__(self, limit: int = 100_000) -> None:
        self.limit = limit
        self._seen: dict[Verdict, Verdict] = {}

    def of(self, d: Decision) -> Verdict:
        v = Verdict(d.action, d.level, d.detector, d.count, d.warning_key, d.message, d.config_hash, d.fleet_signal)
        seen = self._seen
        got = seen.get(v)
        if got is None:
            if len(seen) >= self.limit:
                seen.clear()
            seen[v] = got = v
        return got


def whole(d: Decision) -> int:
    """A hash of the decision's canonical encoding: equal decisions have equal ones, so a
    recorded decision is compared with its replayed one without keeping it (within one
    process; a 64-bit hash, so two unequal decisions collide once in 2**64)."""
    return hash(encode(d))


class Recorded(msgspec.Struct, gc=False):
    """A decision read from the decisions topic, waiting for its event (not tracked by
    the cycle collector: an audit holds a grace period's worth of them)."""

    eid: Key  # its event's (run_id, seq)
    decision: Verdict  # what the reports and the fleet's lag read
    whole: int  # `whole(d)` of the decision read: what the comparison reads
    time: int
    conflict: bool = False
    status: str | None = None  # what it was counted as, once its event was folded
    settled: int = 0  # the message time its event was folded at


def same_verdict(a: Verdict | Decision, b: Verdict | Decision) -> bool:
    return (a.action, a.level, a.detector, a.count, a.warning_key) == (
        b.action,
        b.level,
        b.detector,
        b.count,
        b.warning_key,
    )


class Join:
    """Recorded decisions by event (run_id, seq), until their event is folded or they expire."""

    def __init__(self, grace_ms: int, scope: Scope = ALL_RUNS) -> None:
        self.grace_ms = grace_ms
        self.scope = scope
        self.pending: dict[Key, Recorded] = {}
        # Folded events, for a late second record: the recorded decision taken (its
        # `settled` the message time it was folded at), or that time alone.
        self.done: dict[Key, Recorded | int] = {}
        # Both in the order they came, for expiry (a dict's oldest entry is slow to find
        # once many before it were deleted).
        self.pending_order: deque[tuple[int, Key]] = deque()
        self.done_order: deque[tuple[int, Key]] = deque()
        self.counts: Counter[str] = Counter()  # duplicates, late, unreadable_decisions
        self.verdicts = Verdicts()
        # The decision recorded for an event's (run_id, seq), if it is here (it stays
        # here): the dict's own lookup, asked once per event read.
        self.lookup = self.pending.get

    def offer(self, m: Msg) -> Recorded | None:
        """A record of the decisions topic. Returns the recorded decision it turns into
        a conflict after it was counted as matched or mismatched (to be counted again),
        else None."""
        if m.value is None:
            return None
        scope = self.scope
        if scope.gateways and (m.key or b"").decode("utf-8", "replace") not in scope.gateways:
            return None
        try:
            d = decode_decision(m.value)
        except Exception:
            if scope.first:
                self.counts["unreadable_decisions"] += 1
            return None
        if scope.runs and d.run_id not in scope.runs:
            return None
        if scope.owns is not None and not scope.owns(d.run_id):
            return None  # another shard's run
        eid = (d.run_id, d.seq)
        first = self.pending.get(eid)
        if first is None:
            seen = self.done.get(eid)
            if seen is None:
                self.pending[eid] = Recorded(eid, self.verdicts.of(d), whole(d), m.timestamp)
                self.pending_order.append((m.timestamp, eid))
                return None
            if not isinstance(seen, Recorded):  # its event was folded, nothing recorded then: late
                self.counts["late"] += 1
                return None
            first = seen
        if same_verdict(first.decision, d):
            self.counts["duplicates"] += 1  # the same decision again (a worker replayed its input)
            return None
        if first.conflict:
            return None
        first.conflict = True
        return first if eid in self.done else None  # already counted: a conflict instead

    def settle(self, eid: Key, ms: int, decided: bool) -> Recorded | None:
        """The event `eid` (run_id, seq) was folded at message time `ms` (`decided`: it yielded a
        decision): its recorded decision leaves the join, and the id is remembered."""
        rec = self.pending.pop(eid, None)
        if rec is not None:
            rec.settled = ms
            self.done[rec.eid] = rec  # (its own key: the event's is not kept alive)
            self.done_order.append((ms, rec.eid))
        elif decided:
            self.done[eid] = ms
            self.done_order.append((ms, eid))
        return rec

    def expire(self, horizon_ms: int) -> list[Recorded]:
        """Events are folded up to `horizon_ms` of message time in every partition: the
        decisions recorded more than the grace period before that have no event coming
        (returned, unexpected)."""
        cutoff = horizon_ms - self.grace_ms
        gone: list[Recorded] = []
        order, pending = self.pending_order, self.pending
        while order and order[0][0] < cutoff:
            t, eid = order.popleft()
            rec = pending.get(eid)
            if rec is not None and rec.time == t:  # still waiting (not matched since)
                del pending[eid]
                gone.append(rec)
        order2, done = self.done_order, self.done
        cutoff -= self.grace_ms
        while order2 and order2[0][0] < cutoff:
            t, eid = order2.popleft()
            seen = done.get(eid)
            if seen is not None and (seen.settled if isinstance(seen, Recorded) else seen) == t:
                del done[eid]
        return gone

    def finish(self) -> list[Recorded]:
        """Every stream read: what still waits is unexpected (returned)."""
        left = list(self.pending.values())
        self.pending.clear()
        self.pending_order.clear()
        return left
