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
worth of them: 1.3 KB each as decoded decisions). Its run id is one string per run,
its key the tuple the dict keeps, its two times one field, and the hash is dropped once
compared: about 290 bytes per decision held, dict entries and order included (1M
events, 495,150 decisions all held at once; 499 bytes before those four changes).
"""

from __future__ import annotations

from collections import Counter, deque

import msgspec

from detectors.wire import Decision, decode_decision, encode

from .options import ALL_RUNS, Scope

Key = tuple[str, int]  # (run_id, seq): an event_id


class Msg(msgspec.Struct, gc=False):
    """A consumed record, as the audit reads it: what the audit's reader makes of each
    record instead of aiokafka's ConsumerRecord (read.py), for an audit reads every
    record of two topics. A struct of five fields is made in C; a ConsumerRecord of
    eleven, with the steps that fill it, in Python: reading 1M events and 495,150
    decisions took 1.3-1.4 s of CPU as these, 2.2 s as ConsumerRecords."""

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
    whole: int  # `whole(d)` of the decision read: what the comparison reads (then 0)
    # The message time it was recorded at while it waits; once its event is folded,
    # the message time of that (one field: a settled decision no longer expires by it).
    time: int
    conflict: bool = False
    status: str | None = None  # what it was counted as, once its event was folded


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
        # `time` now the message time it was folded at), or that time alone.
        self.done: dict[Key, Recorded | int] = {}
        # Both in the order they came, for expiry (a dict's oldest entry is slow to find
        # once many before it were deleted): the recorded decisions themselves (a
        # reference each, no pair to build), and for an event folded with nothing
        # recorded, its (time, id).
        self.pending_order: deque[Recorded] = deque()
        self.done_order: deque[Recorded | tuple[int, Key]] = deque()
        # Run ids as one string per run, not one per decision read: a run's decisions
        # wait together (a grace period's worth), and each would hold its own copy.
        self.run_ids: dict[str, str] = {}
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
                eid = (self.run_ids.setdefault(d.run_id, d.run_id), d.seq)  # the key the dict keeps
                self.pending[eid] = rec = Recorded(eid, self.verdicts.of(d), whole(d), m.timestamp)
                self.pending_order.append(rec)
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

    def settle(self, rec: Recorded | None, run_id: str, seq: int, ms: int, decided: bool) -> None:
        """The event (run_id, seq) was folded at message time `ms` (`decided`: it yielded
        a decision), and `rec` is what `lookup` found recorded for it: that leaves the
        join, and the id is remembered."""
        if rec is not None:
            del self.pending[rec.eid]
            rec.time = ms
            self.done[rec.eid] = rec  # (its own key: the event's is not kept alive)
            self.done_order.append(rec)
        elif decided:
            eid = (run_id, seq)
            self.done[eid] = ms
            self.done_order.append((ms, eid))

    def expire(self, horizon_ms: int) -> list[Recorded]:
        """Events are folded up to `horizon_ms` of message time in every partition: the
        decisions recorded more than the grace period before that have no event coming
        (returned, unexpected)."""
        cutoff = horizon_ms - self.grace_ms
        gone: list[Recorded] = []
        order, pending = self.pending_order, self.pending
        while order:
            rec = order[0]
            if pending.get(rec.eid) is not rec:  # matched since (its time is now its event's)
                order.popleft()
                continue
            if rec.time >= cutoff:
                break
            order.popleft()
            del pending[rec.eid]
            gone.append(rec)
        order2, done = self.done_order, self.done
        cutoff -= self.grace_ms
        while order2:
            first = order2[0]
            if isinstance(first, Recorded):
                if first.time >= cutoff:
                    break
                if done.get(first.eid) is first:
                    del done[first.eid]
            else:  # (time, id): an event folded with nothing recorded
                t, eid = first
                if t >= cutoff:
                    break
                seen = done.get(eid)
                if type(seen) is int and seen == t:
                    del done[eid]
            order2.popleft()
        self._forget_runs()
        return gone

    def _forget_runs(self) -> None:
        """Keep the run ids of the decisions held, and not many more: started afresh
        when the table holds twice as many ids as decisions are held (a run id still in
        use stays alive in its decisions)."""
        held = len(self.pending) + len(self.done)
        if len(self.run_ids) > 2 * held + 1024:
            self.run_ids = {}

    def finish(self) -> list[Recorded]:
        """Every stream read: what still waits is unexpected (returned)."""
        left = list(self.pending.values())
        self.pending.clear()
        self.pending_order.clear()
        self.run_ids = {}
        return left
