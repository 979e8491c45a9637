"""The join: decisions read from the decisions topic, waiting by `event_id` for the
event they answer (kept by run_id, then seq, the pair an `event_id` spells: an event's
decision is then found without formatting a string, twice per event read).

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
decision with the same verdict, message and config), the config that names, and a hash
of the whole decision (`whole`), which is all the comparison needs (an
audit holds a grace period's worth of them: 1.3 KB each as decoded decisions). Its run
id is one string per run, its two times one field, and the hash is dropped once
compared. Held in a dict per run, a decision costs its `Recorded`, its seq and its
entries: 175 bytes of resident memory each, order included, with 495,150 decisions of
10,266 runs held at once (229 bytes in one dict keyed by (run_id, seq) pairs)."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable
from typing import Any

import msgspec

from detectors.wire import Decision, decode_decision, encode

from ..kafka.compat import Msg
from .options import ALL_RUNS, Scope

Key = tuple[str, int]  # (run_id, seq): an event_id


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


_BELOW = 1 << 60  # integers whose hashes are themselves (below 2**61 - 1)
_NONE_HASH = hash(None)


def whole(d: Decision) -> int:
    """A fingerprint of the whole decision: equal decisions have equal ones, unequal ones
    differ but by a 64-bit chance, so a recorded decision is compared with its replayed
    one without keeping it (within one process), and the replayed one is not encoded.

    It is the hash of the frozen struct, which combines its fields' hashes the way
    CPython's tuples do (msgspec's `Struct_hash`): each field a step that is one-to-one
    in that field's hash. So two decisions that differ in one field differ here whenever
    the field's hashes differ: for strings (and a string against None) but by SipHash's
    chance; for the integer fields always, while they are not negative, below 2**60, and
    not the hash of None (there an int's hash is the int itself). A decision with an
    integer outside that is fingerprinted by its canonical encoding instead.

    Equal decisions are equal field by field, however their bytes were written: an older
    worker's decision, without the fields added since, is read with their defaults, as
    the replay makes them. (A struct's hash costs far less than encoding it and hashing
    the bytes: benchmarks.audit; benchmarks/RESULTS.md.)"""
    seq, ts, count = d.seq, d.ts, d.count
    if (
        0 <= seq < _BELOW
        and (ts is None or (0 <= ts < _BELOW and ts != _NONE_HASH))
        and (count is None or (0 <= count < _BELOW and count != _NONE_HASH))
    ):
        return hash(d)
    return hash(encode(d))


class Recorded(msgspec.Struct, gc=False):
    """A decision read from the decisions topic, waiting for its event (not tracked by
    the cycle collector: an audit holds a grace period's worth of them)."""

    run_id: str  # its event's run_id (the one string the join keeps for the run)
    seq: int  # and seq
    decision: Verdict  # what the reports and the fleet's lag read
    whole: int  # `whole(d)` of the decision read: what the comparison reads (then 0)
    # The message time it was recorded at while it waits; once its event is folded,
    # the message time of that (one field: a settled decision no longer expires by it).
    time: int
    config: Any = None  # the config its verdict names, if the audit knows it (`Join.named`)
    conflict: bool = False
    status: str | None = None  # what it was counted as, once its event was folded

    @property
    def eid(self) -> Key:
        return (self.run_id, self.seq)


def same_verdict(a: Verdict | Decision, b: Verdict | Decision) -> bool:
    return (a.action, a.level, a.detector, a.count, a.warning_key) == (
        b.action,
        b.level,
        b.detector,
        b.count,
        b.warning_key,
    )


class Join:
    """Recorded decisions by event (run_id, seq), until their event is folded or they expire.

    Held by run, then by seq: an audit holds a grace period's worth of decisions, and
    looks one up for every event it folds. In one dict keyed by (run_id, seq), each
    lookup, insertion and deletion lands at a random place in a table of that size, out
    of the processor's caches (benchmarks.audit); a run's own dict is small, and in the
    caches while its events are read."""

    def __init__(self, grace_ms: int, scope: Scope = ALL_RUNS, named: Callable[[str], Any] | None = None) -> None:
        """`named(config_hash)`: the config a decision's hash names (None: unknown),
        looked up once per distinct verdict and kept with each decision."""
        self.grace_ms = grace_ms
        self.scope = scope
        self.named = named
        self.pending: dict[str, dict[int, Recorded]] = {}
        # Folded events, for a late second record: the recorded decision taken (its
        # `time` now the message time it was folded at), or that time alone.
        self.done: dict[str, dict[int, Recorded | int]] = {}
        # Both in the order they came, for expiry (a dict's oldest entry is slow to find
        # once many before it were deleted): the recorded decisions themselves (a
        # reference each, no pair to build), and for an event folded with nothing
        # recorded, its (time, run_id, seq).
        self.pending_order: deque[Recorded] = deque()
        self.done_order: deque[Recorded | tuple[int, str, int]] = deque()
        # Run ids as one string per run, not one per decision read: a run's decisions
        # wait together (a grace period's worth), and each would hold its own copy.
        self.run_ids: dict[str, str] = {}
        self.counts: Counter[str] = Counter()  # duplicates, late, unreadable_decisions
        self.verdicts = Verdicts()
        self._configs: dict[Verdict, Any] = {}  # each verdict's config, by `named`

    def find(self, run_id: str, seq: int) -> Recorded | None:
        """The decision recorded for the event (run_id, seq), if it is here (it stays)."""
        p = self.pending.get(run_id)
        return p.get(seq) if p is not None else None

    def offer(self, m: Msg) -> Recorded | None:  # noqa: C901 (per recorded decision, in one function: benchmarks.audit)
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
        run_id, seq = d.run_id, d.seq
        if scope.runs and run_id not in scope.runs:
            return None
        if scope.owns is not None and not scope.owns(run_id):
            return None  # another shard's run
        p = self.pending.get(run_id)
        first = p.get(seq) if p is not None else None
        settled = first is None  # then `first` is the one its folded event took, if any
        if first is None:
            dr = self.done.get(run_id)
            seen = dr.get(seq) if dr is not None else None
            if seen is None:
                run_id = self.run_ids.setdefault(run_id, run_id)
                v = self.verdicts.of(d)
                configs = self._configs
                cfg = configs.get(v, configs)
                if cfg is configs:
                    if len(configs) >= self.verdicts.limit:
                        configs.clear()  # (bounded as the verdicts are)
                    cfg = configs[v] = self.named(v.config_hash) if self.named is not None else None
                rec = Recorded(run_id, seq, v, whole(d), m.timestamp, cfg)
                if p is None:
                    self.pending[run_id] = {seq: rec}
                else:
                    p[seq] = rec
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
        return first if settled else None  # already counted: a conflict instead

    def settle(self, rec: Recorded | None, run_id: str, seq: int, ms: int, decided: bool) -> None:
        """The event (run_id, seq) was folded at message time `ms` (`decided`: it yielded
        a decision), and `rec` is what `find` found recorded for it: that leaves the
        join, and the id is remembered."""
        if rec is not None:
            run_id = rec.run_id
            p = self.pending[run_id]
            del p[seq]
            if not p:
                del self.pending[run_id]
            rec.time = ms
            dr = self.done.get(run_id)
            if dr is None:
                self.done[run_id] = {seq: rec}
            else:
                dr[seq] = rec
            self.done_order.append(rec)
        elif decided:
            dr = self.done.get(run_id)
            if dr is None:
                self.done[run_id] = {seq: ms}
            else:
                dr[seq] = ms
            self.done_order.append((ms, run_id, seq))

    def expire(self, horizon_ms: int) -> list[Recorded]:
        """Events are folded up to `horizon_ms` of message time in every partition: the
        decisions recorded more than the grace period before that have no event coming
        (returned, unexpected)."""
        cutoff = horizon_ms - self.grace_ms
        gone: list[Recorded] = []
        order, pending = self.pending_order, self.pending
        while order:
            rec = order[0]
            p = pending.get(rec.run_id)
            if p is None or p.get(rec.seq) is not rec:  # matched since (its time is now its event's)
                order.popleft()
                continue
            if rec.time >= cutoff:
                break
            order.popleft()
            del p[rec.seq]
            if not p:
                del pending[rec.run_id]
            gone.append(rec)
        order2, done = self.done_order, self.done
        cutoff -= self.grace_ms
        while order2:
            first = order2[0]
            seen: Recorded | int
            if isinstance(first, Recorded):
                if first.time >= cutoff:
                    break
                run_id, seq, seen = first.run_id, first.seq, first
            else:  # (time, run_id, seq): an event folded with nothing recorded
                t, run_id, seq = first
                if t >= cutoff:
                    break
                seen = t
            dr = done.get(run_id)
            if dr is not None:
                got = dr.get(seq)
                if got is seen or (type(got) is int and got == seen):  # not since taken again
                    del dr[seq]
                    if not dr:
                        del done[run_id]
            order2.popleft()
        self._forget_runs()
        return gone

    def _forget_runs(self) -> None:
        """Keep the run ids of the decisions held, and not many more: started afresh
        when the table holds twice as many ids as runs have decisions held (a run id
        still in use stays alive in its decisions)."""
        held = len(self.pending) + len(self.done)
        if len(self.run_ids) > 2 * held + 1024:
            self.run_ids = {}

    def finish(self) -> list[Recorded]:
        """Every stream read: what still waits is unexpected (returned)."""
        left = [rec for p in self.pending.values() for rec in p.values()]
        self.pending.clear()
        self.pending_order.clear()
        self.run_ids = {}
        return left
