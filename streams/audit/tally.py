"""The tally: what an audit counts of the events and decisions in its range.

A replayed decision is counted by action, agent and tool, by detector and per minute;
each compared pair by what it came to:
- matched / mismatched: recorded and replayed, equal or not;
- missing: replayed, none recorded (a gateway never got its answer);
- unexpected: recorded, nothing replayed for it;
- conflicting: one event_id recorded twice with different verdicts.
A tally holds no run state: it is small, picklable, and the tallies of shards that own
disjoint runs add up (`merge`) to the tally of the whole.
"""

from __future__ import annotations

from collections import Counter
from operator import attrgetter
from typing import Any

from detectors.wire import Decision

ACTIONS = ("allow", "warn", "block", "abort")
_COMBO = attrgetter("agent_id", "tool_name", "action")  # a replayed decision's key in `combos`
PROBLEMS = ("mismatched", "missing", "unexpected", "conflicting")


class Tally:
    def __init__(self) -> None:
        self.c: Counter[str] = Counter()  # decisions_recorded, each status, dead_letters
        self.events = 0  # in range
        self.combos: dict[tuple[str | None, str | None, str], int] = {}  # (agent, tool, action) -> replayed
        self.by_detector: Counter[str] = Counter()  # replayed decisions not allowed
        self.per_minute: dict[int, Counter[str]] = {}  # by minutes since the epoch
        self.unknown_configs: Counter[str] = Counter()  # config hashes decisions named, not known here
        self.run_ids: set[str] = set()
        self.partial_ids: set[str] = set()  # runs whose start the look-back did not reach
        self.misrouted = 0  # runs whose events lie on a partition their run_id does not hash to

    def add(self, statuses: list[str], replayed: list[Decision]) -> None:
        """What the compared pairs of a chunk of events came to, each a status (the pairs
        of runs whose start was found, in the range), and the replayed decisions among
        them, counted by agent, tool and action (those not allowed are also counted one
        by one, `flagged`). In bulk: an audit counts a pair for every decision."""
        c = self.c
        c.update(statuses)
        c["decisions_recorded"] += len(statuses) - statuses.count("missing")
        combos = self.combos
        for k, n in Counter(map(_COMBO, replayed)).items():
            combos[k] = combos.get(k, 0) + n

    def flagged(self, d: Decision, ts: int) -> None:
        """A replayed decision not allowed, at `ts` (ms): by detector and per minute."""
        if d.detector:
            self.by_detector[d.detector] += 1
        self.per_minute.setdefault(ts // 60000, Counter())[d.action] += 1

    def unexpected(self) -> None:
        """A recorded decision in the range whose event never came."""
        self.c["decisions_recorded"] += 1
        self.c["unexpected"] += 1

    def recount_as_conflict(self, status: str | None) -> None:
        """A decision counted as `status` was recorded again with another verdict."""
        self.c["conflicting"] += 1
        if status is not None:
            self.c[status] -= 1

    def merge(self, other: Tally) -> None:
        for name in ("c", "by_detector", "unknown_configs"):
            getattr(self, name).update(getattr(other, name))
        self.events += other.events
        self.misrouted += other.misrouted
        combos = self.combos
        for k, n in other.combos.items():
            combos[k] = combos.get(k, 0) + n
        for minute, counts in other.per_minute.items():
            self.per_minute.setdefault(minute, Counter()).update(counts)
        self.run_ids |= other.run_ids
        self.partial_ids |= other.partial_ids

    def clean(self) -> bool:
        return not any(self.c[k] for k in PROBLEMS)

    def by(self, field: int) -> dict[str, Any]:
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
