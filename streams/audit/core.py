"""The audit's logic, without Kafka: replay events through the one fold, and join each
replayed decision with the one recorded on the decisions topic by `event_id`.

The reader (read.py) feeds `Audit` two streams: recorded decisions (`recorded`) and
events in chunks (`events`). It keeps the decisions a grace period ahead of the events
in message time, so that when an event is folded, the decision recorded for it is
already known: the event is replayed under the config that decision names (its
`config_hash`), and compared with it at once. Memory holds the open runs' states, the
decisions recorded within the grace period and not matched yet, and counters; never
the events read.

What counts (the `--json` summary, see `summary()`):
- matched / mismatched: recorded and replayed, equal or not;
- missing: replayed, none recorded (a gateway never got its answer);
- unexpected: recorded, nothing replayed for it;
- conflicting: one event_id recorded twice with different verdicts;
- partial_runs: runs whose start the look-back did not reach (their decisions are not
  compared: their state would differ from the worker's).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from operator import attrgetter
from typing import Any, NamedTuple

import msgspec

from detectors import DetectionConfig, Folded, RunState, SetAside, fold
from detectors.wire import CompactionRetry, Decision, Event, RunEnd, ToolCall, ToolResult, Usage, decode_decision

ACTIONS = ("allow", "warn", "block", "abort")


class Msg(NamedTuple):
    """A consumed record, as the audit reads it."""

    partition: int
    offset: int
    timestamp: int  # ms since the epoch (the record's timestamp)
    key: bytes | None
    value: bytes | None


def agent_hashes(config: DetectionConfig) -> dict[str, str]:
    """Each agent's resolved config hash ('(default)' for events without agent_id,
    '(global)' for agents not listed): the hashes decisions carry."""
    out = {"(default)": config.for_agent(None).config_hash, "(global)": config.global_config.config_hash}
    for name, resolved in config.agents().items():
        out[name] = resolved.config_hash
    return out


class ConfigBook:
    """The configs decisions may have been made under, by the resolved hash they carry."""

    def __init__(self, current: DetectionConfig) -> None:
        self.current = current
        self.by_hash: dict[str, DetectionConfig] = {}
        self.listed: list[dict[str, Any]] = []
        self.add(current, "current", None)

    def add(self, config: DetectionConfig, source: str, text: str | None) -> None:
        hashes = agent_hashes(config)
        for h in hashes.values():
            self.by_hash.setdefault(h, config)
        self.listed.append({"config_hash": hashes["(default)"], "source": source, "text": text or "", "agents": hashes})

    def get(self, config_hash: str | None) -> DetectionConfig | None:
        return self.by_hash.get(config_hash) if config_hash else None


def _verdict(d: Decision | None) -> dict[str, Any] | None:
    if d is None:
        return None
    return {
        "action": d.action,
        "detector": d.detector,
        "count": d.count,
        "message": d.message,
        "config_hash": d.config_hash,
    }


class _Recorded(msgspec.Struct, gc=False):
    """A decision read from the decisions topic, waiting for its event (not tracked by
    the cycle collector: an audit holds a grace period's worth of them)."""

    decision: Decision
    time: int
    conflict: bool = False
    status: str | None = None  # what it was counted as, once its event was folded


def _same_verdict(a: Decision, b: Decision) -> bool:
    return (a.action, a.level, a.detector, a.count, a.warning_key) == (
        b.action,
        b.level,
        b.detector,
        b.count,
        b.warning_key,
    )


_KEY = attrgetter("key")
_VALUE = attrgetter("value")


def _minute(ms: int) -> str:
    return datetime.fromtimestamp(ms // 60000 * 60, UTC).strftime("%Y-%m-%dT%H:%MZ")


class _Run:
    """What the audit keeps of an open run."""

    __slots__ = ("first_ts", "partial", "config", "flags", "timeline", "truncated", "gateway", "agent", "in_range")

    def __init__(self, first_ts: int, partial: bool, gateway: str, agent: str | None) -> None:
        self.first_ts = first_ts
        self.partial = partial
        self.config: DetectionConfig | None = None
        self.flags: set[str] = set()
        self.timeline: deque[dict[str, Any]] | None = None
        self.truncated = 0
        self.gateway = gateway
        self.agent = agent
        self.in_range = False


class Audit:
    def __init__(
        self,
        configs: ConfigBook,
        *,
        from_ms: int | None,
        to_ms: int | None,
        scan_start_ms: int | None,
        grace_ms: int,
        complete: Callable[[int], bool] = lambda partition: False,
        what_if: DetectionConfig | None = None,
        runs: Iterable[str] = (),
        gateways: Iterable[str] = (),
        max_event_bytes: int = 1 << 20,
        diff: Callable[[dict[str, Any]], None] | None = None,
        timelines: bool = False,
        max_report_runs: int = 300,
        timeline_len: int = 200,
        owns: Callable[[str], bool] | None = None,
        count_unreadable: bool = True,
    ) -> None:
        """`owns`: this audit is one shard of several (`--jobs`), folding some of the
        events topic's partitions; it keeps only the recorded decisions of runs whose
        run_id it owns (those Kafka's default partitioner puts on its partitions), and
        counts unreadable decisions only when it is the first shard (`count_unreadable`)."""
        self.configs = configs
        self.from_ms = from_ms
        self.to_ms = to_ms
        self.scan_start_ms = scan_start_ms
        self.grace_ms = grace_ms
        self.complete = complete  # partition -> read from its very first record
        self.what_if = what_if
        self.only_runs = set(runs)
        self.only_gateways = set(gateways)
        self.max_event_bytes = max_event_bytes
        self.diff = diff
        self.timelines = timelines
        self.max_report_runs = max_report_runs
        self.timeline_len = timeline_len
        self.owns = owns
        self.count_unreadable = count_unreadable
        self.misrouted = 0  # runs whose events lie on a partition their run_id does not hash to
        # State: the fold's, per run; the what-if fold's; recorded decisions waiting.
        self.states: dict[str, RunState] = {}
        self.what_if_states: dict[str, RunState] = {}
        self.open: dict[str, _Run] = {}
        self.pending: dict[str, _Recorded] = {}
        self.done: dict[str, tuple[_Recorded | None, int]] = {}  # folded event ids, for a late second record
        # Both in the order they came, for expiry (a dict's oldest entry is slow to find
        # once many before it were deleted).
        self.pending_order: deque[tuple[int, str]] = deque()
        self.done_order: deque[tuple[int, str]] = deque()
        # Counts.
        self.c: Counter[str] = Counter()
        self.events_in_range = 0  # apart from the Counter: counted for every event
        self.combos: dict[tuple[str | None, str, str], int] = {}  # (agent, tool, action) -> replayed decisions
        self._cur: tuple[Event, str] | None = None
        self.by_detector: Counter[str] = Counter()
        self.per_minute: dict[int, Counter[str]] = {}  # by minutes since the epoch
        self.what_if_counts: Counter[str] = Counter()
        self.what_if_by_detector: Counter[str] = Counter()
        self.run_ids: set[str] = set()
        self.ended: set[str] = set()  # runs whose run_end was read: a later event starts a new one
        self.partial_ids: set[str] = set()
        self.report_runs: list[dict[str, Any]] = []
        self.unknown_configs: Counter[str] = Counter()

    # -- recorded decisions -------------------------------------------------------------

    def in_range(self, ms: int) -> bool:
        return (self.from_ms is None or ms >= self.from_ms) and (self.to_ms is None or ms <= self.to_ms)

    def recorded(self, m: Msg) -> None:
        """A record of the decisions topic."""
        if m.value is None:
            return
        if self.only_gateways and (m.key or b"").decode("utf-8", "replace") not in self.only_gateways:
            return
        try:
            d = decode_decision(m.value)
        except Exception:
            if self.count_unreadable:
                self.c["unreadable_decisions"] += 1
            return
        if self.only_runs and d.run_id not in self.only_runs:
            return
        if self.owns is not None and not self.owns(d.run_id):
            return  # another shard's run
        eid = d.event_id
        first = self.pending.get(eid)
        if first is None:
            seen = self.done.get(eid)
            if seen is None:
                self.pending[eid] = _Recorded(d, m.timestamp)
                self.pending_order.append((m.timestamp, eid))
                return
            rec = seen[0]
            if rec is None:  # its event was folded, and nothing was recorded then: recorded late
                self.c["late"] += 1
                return
            first = rec
        if _same_verdict(first.decision, d):
            self.c["duplicates"] += 1  # the same decision again (a worker replayed its input)
            return
        if not first.conflict:
            first.conflict = True
            if eid in self.done:  # already counted as matched or mismatched: it is a conflict instead
                self._recount_as_conflict(first)

    def _recount_as_conflict(self, rec: _Recorded) -> None:
        self.c["conflicting"] += 1
        if rec.status is not None:
            self.c[rec.status] -= 1
        rec.status = "conflicting"
        self._diff("conflicting", rec.decision.event_id, rec.decision.run_id, rec.decision, None, None)

    def expire(self, horizon_ms: int) -> None:
        """Events are folded up to `horizon_ms` of message time in every partition: a
        decision recorded more than the grace period before that has no event coming."""
        cutoff = horizon_ms - self.grace_ms
        order, pending = self.pending_order, self.pending
        while order and order[0][0] < cutoff:
            t, eid = order.popleft()
            rec = pending.get(eid)
            if rec is not None and rec.time == t:  # still waiting (not matched since)
                del pending[eid]
                self._unexpected(rec)
        order, done = self.done_order, self.done
        cutoff -= self.grace_ms
        while order and order[0][0] < cutoff:
            t, eid = order.popleft()
            seen = done.get(eid)
            if seen is not None and seen[1] == t:
                del done[eid]

    def _unexpected(self, rec: _Recorded) -> None:
        if not self.in_range(rec.time):
            return
        self.c["decisions_recorded"] += 1
        self.c["unexpected"] += 1
        self._diff("unexpected", rec.decision.event_id, rec.decision.run_id, rec.decision, None, None)

    # -- events -------------------------------------------------------------------------

    def _config_for(self, ev: Event) -> DetectionConfig:
        eid = f"{ev.run_id}:{ev.seq}"
        rec = self.pending.get(eid)
        self._cur = (ev, eid)  # _settle, right after, needs the id again
        run = self.open.get(ev.run_id)
        if rec is not None:
            h = rec.decision.config_hash
            cfg = self.configs.get(h)
            if cfg is not None:
                if run is not None:
                    run.config = cfg
                return cfg
            self.unknown_configs[h] += 1
        if run is not None and run.config is not None:
            return run.config
        return self.configs.current

    def _load(self, run_id: str, position: Any) -> RunState | None:
        return self.states.get(run_id)

    def events(self, chunk: list[Msg]) -> None:
        """Fold a chunk of events, each partition's in offset order."""
        source = self._source(chunk)
        folded = fold(
            source,
            self.configs.current,
            max_event_bytes=self.max_event_bytes,
            load=self._load,
            config_for=self._config_for,
        )
        if self.what_if is None:
            settle = self._settle
            for f in folded:
                settle(f, None)
            return
        pairs = _Tee(folded)
        for g in fold(pairs, self.what_if, keyed=False, load=self._load_what_if):
            self._settle(pairs.last, g)

    def _load_what_if(self, run_id: str, position: Any) -> RunState | None:
        return self.what_if_states.get(run_id)

    def _source(self, chunk: list[Msg]) -> Iterator[tuple[Msg, bytes | None, bytes | None]]:
        """(message, key, value) of each event of the chunk, of the chosen runs only."""
        runs = self.only_runs
        if not runs:
            return zip(chunk, map(_KEY, chunk), map(_VALUE, chunk), strict=True)
        return self._chosen(chunk, runs)

    def _chosen(self, chunk: list[Msg], runs: set[str]) -> Iterator[tuple[Msg, bytes | None, bytes | None]]:
        for m in chunk:
            if m.key is None or m.key.decode("utf-8", "replace") not in runs:
                continue
            yield m, m.key, m.value

    def _settle(self, f: Folded | SetAside, g: Folded | SetAside | None) -> None:
        m: Msg = f.position
        if type(f) is SetAside:
            if self.in_range(m.timestamp):
                self.c["dead_letters"] += 1
            return
        ev = f.event
        if self.only_gateways and ev.gateway_id not in self.only_gateways:
            return  # its run's state is kept all the same (a run stays on one gateway)
        run_id = ev.run_id
        after = f.after
        if after is None:
            self.states.pop(run_id, None)
        else:
            self.states[run_id] = after
        if g is not None and type(g) is Folded:
            if g.after is None:
                self.what_if_states.pop(run_id, None)
            else:
                self.what_if_states[run_id] = g.after
        run = self.open.get(run_id)
        ts = ev.ts if ev.ts is not None else m.timestamp
        if run is None:
            # Its start: an event after the run's end, the first record of a partition
            # read from its very beginning, or one with a full idle timeout read before
            # it and nothing of the run in it (semantics.md section 7: it started there).
            cfg = self._config_for(ev)
            started = (
                run_id in self.ended
                or self.complete(m.partition)
                or (self.scan_start_ms is not None and m.timestamp - self.scan_start_ms > cfg.idle_timeout_ms)
            )
            run = self.open[run_id] = _Run(ts, not started, ev.gateway_id, ev.agent_id)
            if self.owns is not None and not self.owns(run_id):
                self.misrouted += 1  # its decisions went to another shard
            if self.timelines:
                run.timeline = deque(maxlen=self.timeline_len)
        mt = m.timestamp
        inside = (self.from_ms is None or mt >= self.from_ms) and (self.to_ms is None or mt <= self.to_ms)
        if inside:
            self.events_in_range += 1
            if not run.in_range:
                run.in_range = True
                self.run_ids.add(run_id)
                if run.partial:
                    self.partial_ids.add(run_id)
        cur = self._cur
        eid = cur[1] if cur is not None and cur[0] is ev else f"{run_id}:{ev.seq}"
        rec = self.pending.pop(eid, None)
        replayed = f.decisions[0] if f.decisions else None
        what_if = g.decisions[0] if g is not None and type(g) is Folded and g.decisions else None
        status = None
        if inside and not run.partial and (replayed is not None or rec is not None):
            status = self._compare(eid, run_id, rec, replayed, f.encoded[0] if f.encoded else None, what_if, run, ts)
        if replayed is not None or rec is not None:
            self.done[eid] = (rec, mt)
            self.done_order.append((mt, eid))
        if run.timeline is not None and inside:
            if len(run.timeline) == run.timeline.maxlen:
                run.truncated += 1
            run.timeline.append(
                {
                    "seq": ev.seq,
                    "ts": ev.ts,
                    "type": _TYPES[type(ev)],
                    "tool_name": getattr(ev, "tool_name", None),
                    "status": status,
                    "recorded": _verdict(rec.decision) if rec is not None else None,
                    "replayed": _verdict(replayed),
                    "what_if": _verdict(what_if) if self.what_if is not None else None,
                }
            )
        if after is None:
            self.ended.add(run_id)
            self._close(run_id, run)

    def _compare(
        self,
        eid: str,
        run_id: str,
        rec: _Recorded | None,
        replayed: Decision | None,
        encoded: bytes | None,
        what_if: Decision | None,
        run: _Run,
        ts: int,
    ) -> str | None:
        c = self.c
        if replayed is not None:
            action = replayed.action
            k = (replayed.agent_id, replayed.tool_name, action)  # by action, agent and tool at the end
            combos = self.combos
            combos[k] = combos.get(k, 0) + 1
            if action != "allow":
                if replayed.detector:
                    self.by_detector[replayed.detector] += 1
                self.per_minute.setdefault(ts // 60000, Counter())[action] += 1
                if action in ("block", "abort"):
                    run.flags.add(action)
        if rec is not None:
            c["decisions_recorded"] += 1
        if rec is None and replayed is None:
            return None
        if rec is None:
            status = "missing"
        elif rec.conflict:
            status = "conflicting"
        elif replayed is None:
            status = "unexpected"
        elif rec.decision == replayed:  # as decisions: the wire bytes may spell them otherwise
            status = "matched"
        else:
            status = "mismatched"
        c[status] += 1
        if rec is not None:
            rec.status = status
        if status != "matched":
            run.flags.add("mismatch")
            self._diff(status, eid, run_id, rec.decision if rec is not None else None, replayed, None)
        if self.what_if is not None:
            self._what_if(eid, run_id, rec.decision if rec is not None else replayed, what_if, run)
        return status

    def _what_if(self, eid: str, run_id: str, decided: Decision | None, what_if: Decision | None, run: _Run) -> None:
        before = decided.action if decided is not None else None
        after = what_if.action if what_if is not None else None
        if before == after:
            return
        changes = []
        if after == "warn":
            changes.append("newly_warned")
        if after == "block":
            changes.append("newly_blocked")
        if before == "warn":
            changes.append("no_longer_warned")
        if before == "block":
            changes.append("no_longer_blocked")
        if after == "abort":
            changes.append("aborts_gained")
        if before == "abort":
            changes.append("aborts_lost")
        if not changes:
            return
        run.flags.add("what_if")
        for k in changes:
            self.what_if_counts[k] += 1
        det = (what_if.detector if what_if is not None and what_if.detector else None) or (
            decided.detector if decided is not None and decided.detector else "none"
        )
        self.what_if_by_detector[det] += 1
        self._diff("what_if", eid, run_id, decided, None, what_if, changes)

    def _close(self, run_id: str, run: _Run) -> None:
        self.open.pop(run_id, None)
        if run.flags and run.timeline is not None and len(self.report_runs) < self.max_report_runs:
            self.report_runs.append(
                {
                    "run_id": run_id,
                    "gateway_id": run.gateway,
                    "agent_id": run.agent,
                    "partial": run.partial,
                    "flags": sorted(run.flags),
                    "truncated": run.truncated,
                    "timeline": list(run.timeline),
                }
            )

    def _diff(
        self,
        kind: str,
        eid: str,
        run_id: str,
        recorded: Decision | None,
        replayed: Decision | None,
        what_if: Decision | None,
        changes: list[str] | None = None,
    ) -> None:
        if self.diff is None:
            return
        line: dict[str, Any] = {
            "kind": kind,
            "event_id": eid,
            "run_id": run_id,
            "recorded": _verdict(recorded),
            "replayed": _verdict(replayed),
        }
        if kind == "what_if":
            line["what_if"] = _verdict(what_if)
            line["changes"] = changes
        self.diff(line)

    # -- shards -------------------------------------------------------------------------

    def tally(self) -> dict[str, Any]:
        """What `summary()` and `report()` need of a finished shard (no run state): small,
        and picklable, for the parent process to `absorb`."""
        return {
            "c": self.c,
            "events_in_range": self.events_in_range,
            "combos": self.combos,
            "by_detector": self.by_detector,
            "per_minute": self.per_minute,
            "what_if_counts": self.what_if_counts,
            "what_if_by_detector": self.what_if_by_detector,
            "run_ids": self.run_ids,
            "partial_ids": self.partial_ids,
            "report_runs": self.report_runs,
            "unknown_configs": self.unknown_configs,
            "misrouted": self.misrouted,
        }

    def absorb(self, t: dict[str, Any]) -> None:
        """Add a shard's tally to this audit's counts (shards own disjoint runs, so
        nothing is counted twice)."""
        for name in ("c", "by_detector", "what_if_counts", "what_if_by_detector", "unknown_configs"):
            getattr(self, name).update(t[name])
        self.events_in_range += t["events_in_range"]
        self.misrouted += t["misrouted"]
        combos = self.combos
        for k, n in t["combos"].items():
            combos[k] = combos.get(k, 0) + n
        for minute, counts in t["per_minute"].items():
            self.per_minute.setdefault(minute, Counter()).update(counts)
        self.run_ids |= t["run_ids"]
        self.partial_ids |= t["partial_ids"]
        room = self.max_report_runs - len(self.report_runs)
        self.report_runs.extend(t["report_runs"][: max(0, room)])

    # -- the end --------------------------------------------------------------------------

    def finish(self) -> None:
        """Every stream read to its end: what still waits is unexpected; open runs close."""
        for rec in self.pending.values():
            self._unexpected(rec)
        self.pending.clear()
        for run_id, run in list(self.open.items()):
            self._close(run_id, run)

    def summary(self, seconds: float) -> dict[str, Any]:
        c = self.c
        what_if = None
        if self.what_if is not None:
            what_if = {
                "config_hash": self.what_if.for_agent(None).config_hash,
                **{
                    k: self.what_if_counts[k]
                    for k in (
                        "newly_warned",
                        "newly_blocked",
                        "no_longer_warned",
                        "no_longer_blocked",
                        "aborts_gained",
                        "aborts_lost",
                    )
                },
                "by_detector": dict(sorted(self.what_if_by_detector.items())),
            }
        return {
            "events": self.events_in_range,
            "runs": len(self.run_ids),
            "partial_runs": len(self.partial_ids),
            "decisions_recorded": c["decisions_recorded"],
            "decisions_replayed": sum(self.combos.values()),
            "matched": c["matched"],
            "mismatched": c["mismatched"],
            "missing": c["missing"],
            "unexpected": c["unexpected"],
            "conflicting": c["conflicting"],
            "duplicates": c["duplicates"],
            "dead_letters": c["dead_letters"],
            "unknown_configs": dict(self.unknown_configs),
            "by_action": self._by(2),
            "by_detector": dict(sorted(self.by_detector.items())),
            "what_if": what_if,
            "seconds": round(seconds, 3),
            "events_per_s": round(self.events_in_range / seconds) if seconds > 0 else None,
        }

    def _by(self, field: int) -> dict[str, Any]:
        """Replayed decisions by action (field 2), or per agent (0) or tool (1) by action."""
        if field == 2:
            out = dict.fromkeys(ACTIONS, 0)
            for (_, _, action), n in self.combos.items():
                out[action] += n
            return out
        per: dict[str, dict[str, int]] = {}
        for k, n in self.combos.items():
            name = k[field] or ("(default)" if field == 0 else "(usage)")  # a usage event's decision has no tool
            per.setdefault(name, dict.fromkeys(ACTIONS, 0))[k[2]] += n
        return dict(sorted(per.items()))

    def clean(self) -> bool:
        c = self.c
        return not (c["mismatched"] or c["missing"] or c["unexpected"] or c["conflicting"])

    def report(self, seconds: float, range_: dict[str, Any]) -> dict[str, Any]:
        return {
            "summary": self.summary(seconds),
            "range": range_,
            "by_agent": self._by(0),
            "by_tool": self._by(1),
            "per_minute": [
                {"minute": _minute(k * 60000), "warn": v["warn"], "block": v["block"], "abort": v["abort"]}
                for k, v in sorted(self.per_minute.items())
            ],
            "runs": self.report_runs,
            "configs": self.configs.listed,
        }


_TYPES = {
    ToolCall: "tool_call",
    ToolResult: "tool_result",
    Usage: "usage",
    CompactionRetry: "compaction_retry",
    RunEnd: "run_end",
}


class _Tee:
    """Feeds the what-if fold the events the main fold folded, one by one, and keeps
    the main fold's result for the what-if result that follows it."""

    def __init__(self, folded: Iterator[Folded | SetAside]) -> None:
        self._folded = folded
        self.last: Folded | SetAside | None = None

    def __iter__(self) -> Iterator[tuple[Any, None, Any]]:
        for f in self._folded:
            self.last = f
            if type(f) is Folded:
                yield f.position, None, f.event
            else:
                yield f.position, None, b""  # an empty message: set aside in the what-if fold too
