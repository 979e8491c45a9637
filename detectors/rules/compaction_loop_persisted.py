"""compaction_loop_persisted: the post-compaction guard (semantics.md section 5).

A `compaction_retry` arms a window of `postCompactionGuard.windowSize` outcomes; when the
window holds that many identical outcomes the run is aborted, and every later call of the
run is answered with an abort too. Its switch is `enabled` itself (on unless false).
"""

from __future__ import annotations

from .base import Detector, GuardScan, Thresholds, Verdict


class CompactionLoopPersisted(Detector[GuardScan]):
    name = "compaction_loop_persisted"
    judges = "tool_result"

    def evaluate(self, scan: GuardScan, cfg: Thresholds) -> Verdict | None:
        if scan.same >= cfg.window:
            return Verdict("critical", self, scan.same, None)
        return None

    def message(self, action: str, tool: str, count: int | None, paired: str | None) -> str:
        if count is None:  # a call after the abort
            return (
                f"Run aborted: {tool} was called after the run was stopped for repeating an identical loop "
                "through compaction."
            )
        return (
            f"Run aborted: {tool} returned the same result {count} times in a row right after a "
            "context compaction; the loop survived compaction."
        )
