"""generic_repeat: any other call repeated with identical arguments (rules 7 and 8; with
`loopwarden.rules.progressAware`, rule 8 counts the no-progress streak, semantics.md section 12)."""

from __future__ import annotations

from .base import CallScan, Detector, Thresholds, Verdict


class GenericRepeat(Detector[CallScan]):
    name = "generic_repeat"
    switch = "genericRepeat"
    judges = "tool_call"
    repeats_only = True

    def evaluate(self, scan: CallScan, cfg: Thresholds) -> Verdict | None:
        if scan.known_poll:
            return None
        if scan.no_progress >= cfg.critical:
            return Verdict("critical", self, scan.no_progress, f"generic:{scan.tool}:{scan.sig}:{scan.latest}")
        # Section 12's progress-aware warning counts identical outcomes, not identical calls.
        n = scan.no_progress if cfg.progress_aware else scan.repeats
        if n >= cfg.warning:
            return Verdict("warning", self, n, f"generic:{scan.tool}:{scan.sig}")
        return None

    def message(self, action: str, tool: str, count: int | None, paired: str | None) -> str:
        if action == "block":
            return f"Blocked: {tool} was called {count} times with identical arguments and identical outcomes."
        return (
            f"Warning: {tool} was called {count} times with identical arguments. If this is not "
            "making progress, stop retrying and report the task as failed."
        )
