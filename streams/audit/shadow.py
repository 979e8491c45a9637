"""Budgets and runs not enforced, as an audit sees them (semantics.md sections 8 and 10).

Budgets: the replayed decisions of the `run_budget` rule, by what they do (or would do,
when not enforced): warnings at the 80 and 95 percent marks; aborts of a run whose
budget is spent, on a call or on the `usage` event that spent it (`tool_name` null);
and the calls answered abort after that.

Shadow and held-out runs: their decisions are published as `allow` with `enforced:
false`, and say in `shadow_action` what enforcement would have done. The audit counts
what they would have been told (by shadow action and detector), and follows each such
run from its first decision that would have blocked a call or aborted the run (a usage
event's abort included) to its end: the tool calls it made after that point, the
tokens its usage events reported after it, and whether it ended by itself (a
`run_end`). Those are the evidence an operator needs before turning `enforce` on: how
many runs would have been stopped, how many stopped by themselves anyway, and what the
others spent meanwhile (median and 90th percentile, by nearest rank).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from typing import Any

from detectors import DetectionConfig
from detectors.policy import RUN_BUDGET
from detectors.wire import Decision, Event, RunEnd, ToolCall, Usage

from .tally import ACTIONS

WOULD_STOP = ("block", "abort")
BUDGET_COUNTS = ("warnings", "aborts", "aborts_on_usage", "calls_after_abort", "not_enforced")


def nearest_rank(values: list[int], percent: int) -> int | None:
    """The smallest value with at least `percent` percent of `values` at or below it
    (None for no values)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(percent * len(ordered) / 100) - 1)]


def spread(values: list[int]) -> dict[str, int | None]:
    return {"median": nearest_rank(values, 50), "p90": nearest_rank(values, 90)}


class ShadowCounts:
    """What the part counted: small, picklable, and shards' counts add up (shards own
    disjoint runs)."""

    def __init__(self) -> None:
        self.budget: Counter[str] = Counter()
        self.budget_keys: Counter[str] = Counter()  # by warning_key: budget:tokens:80, budget:cost, ...
        self.decisions = 0  # not enforced
        self.runs: set[str] = set()  # with a decision not enforced
        self.held_out: set[str] = set()  # those whose agent enforces: held out, not in shadow mode
        self.by_action: Counter[str] = Counter()  # by shadow_action
        self.by_detector: Counter[str] = Counter()  # shadow_action other than allow
        self.after: list[tuple[int, int, bool]] = []  # per run stopped: calls, tokens after; ended by itself

    def merge(self, other: ShadowCounts) -> None:
        self.budget.update(other.budget)
        self.budget_keys.update(other.budget_keys)
        self.decisions += other.decisions
        self.runs |= other.runs
        self.held_out |= other.held_out
        self.by_action.update(other.by_action)
        self.by_detector.update(other.by_detector)
        self.after.extend(other.after)

    def summary(self) -> dict[str, Any]:
        """The `budgets` and `shadow` parts of the `--json` summary."""
        after = self.after
        return {
            "budgets": {
                **{k: self.budget[k] for k in BUDGET_COUNTS},
                "by_key": dict(sorted(self.budget_keys.items())),
            },
            "shadow": {
                "decisions": self.decisions,
                "runs": len(self.runs),
                "held_out_runs": len(self.held_out),
                "by_shadow_action": {a: self.by_action[a] for a in ACTIONS},
                "by_detector": dict(sorted(self.by_detector.items())),
                "would_stop": {
                    "runs": len(after),
                    "ended_by_themselves": sum(1 for _, _, ended in after if ended),
                    "calls_after": spread([calls for calls, _, _ in after]),
                    "tokens_after": spread([tokens for _, tokens, _ in after]),
                },
            },
        }


class Shadow:
    """The counts, and the runs followed after the first decision that would have
    stopped them."""

    def __init__(self, configs: Callable[[str | None], DetectionConfig | None]) -> None:
        self.configs = configs  # a decision's config by its hash: shadow mode or held out
        self.counts = ShadowCounts()
        self.watching: dict[str, list[int]] = {}  # run_id -> [calls, tokens] since its would-be stop

    def decision(self, ev: Event, d: Decision) -> None:
        """A replayed decision, counted in the audit, that is not enforced or is the
        budget's."""
        c = self.counts
        action = d.action if d.enforced else (d.shadow_action or d.action)
        if d.detector == RUN_BUDGET:
            self._budget(d, action)
        if d.enforced:
            return
        c.decisions += 1
        c.by_action[action] += 1
        if action != "allow" and d.detector:
            c.by_detector[d.detector] += 1
        run_id = ev.run_id
        if run_id not in c.runs:
            c.runs.add(run_id)
            cfg = self.configs(d.config_hash)
            if cfg is not None and cfg.for_agent(d.agent_id).enforce:
                c.held_out.add(run_id)
        if action in WOULD_STOP and run_id not in self.watching:
            self.watching[run_id] = [0, 0]

    def _budget(self, d: Decision, action: str) -> None:
        b = self.counts.budget
        if action == "warn":
            b["warnings"] += 1
        elif action == "abort" and d.warning_key is None:
            b["calls_after_abort"] += 1  # a call after the run's budget was spent
        elif action == "abort":
            b["aborts"] += 1
            if d.tool_name is None:
                b["aborts_on_usage"] += 1
        if not d.enforced:
            b["not_enforced"] += 1
        if d.warning_key:
            self.counts.budget_keys[d.warning_key] += 1

    def event(self, ev: Event) -> None:
        """An event in the range of a watched run, after its would-be stop."""
        t = type(ev)
        if t is ToolCall:
            self.watching[ev.run_id][0] += 1
        elif t is Usage:
            assert isinstance(ev, Usage)
            self.watching[ev.run_id][1] += ev.input_tokens + ev.output_tokens
        elif t is RunEnd:
            self._close(ev.run_id, True)

    def _close(self, run_id: str, ended: bool) -> None:
        calls, tokens = self.watching.pop(run_id)
        self.counts.after.append((calls, tokens, ended))

    def finish(self) -> None:
        """Every stream read: the runs still watched did not end (in the range)."""
        for run_id in list(self.watching):
            self._close(run_id, False)
