"""known_poll_no_progress: a known polling call that keeps returning the same (rules 3 and 4)."""

from __future__ import annotations

from .base import CallScan, Detector, Thresholds, Verdict


class KnownPollNoProgress(Detector[CallScan]):
    name = "known_poll_no_progress"
    switch = "knownPollNoProgress"
    judges = "tool_call"
    repeats_only = True

    def evaluate(self, scan: CallScan, cfg: Thresholds) -> Verdict | None:
        if not scan.known_poll:
            return None
        n = scan.no_progress
        if n >= cfg.critical:
            return Verdict("critical", self, n, f"poll:{scan.tool}:{scan.sig}:{scan.latest}")
        if n >= cfg.warning:
            return Verdict("warning", self, n, f"poll:{scan.tool}:{scan.sig}:{scan.latest}")
        return None

    def message(self, action: str, tool: str, count: int | None, paired: str | None) -> str:
        if action == "block":
            return f"Blocked: {tool} was polled {count} times with identical arguments and no progress."
        return (
            f"Warning: {tool} was polled {count} times with identical arguments and no progress. "
            "Wait longer between checks, or report the task as stuck."
        )
