"""failure_repeat: the same call failing the same way, retried again (semantics.md
section 12, rule 2a; on with `loopwarden.rules.failureRepeat.enabled`)."""

from __future__ import annotations

from .base import CallScan, Detector, Thresholds, Verdict


def failure_run(scan: CallScan) -> int:
    """The failure run of the call: newest first, the history records of this exact call
    that have an outcome, name no missing tool, were failures and got the newest one's
    outcome; it ends at the first record that is not one (any other call in between)."""
    history = scan.history
    if not history:
        return 0
    newest = history[-1]
    if not newest.failed or newest.args_hash != scan.sig:  # most calls: over at once
        return 0
    tool, sig, outcome = scan.tool, scan.sig, newest.result_hash
    n = 0
    for r in reversed(history):
        if not r.failed or r.args_hash != sig or r.tool_name != tool or r.result_hash != outcome:
            break
        if r.unknown_tool_name:
            break
        n += 1
    return n


class FailureRepeat(Detector[CallScan]):
    name = "failure_repeat"
    judges = "tool_call"
    rule = "failureRepeat"
    repeats_only = True  # the newest record must be this very call

    def evaluate(self, scan: CallScan, cfg: Thresholds) -> Verdict | None:
        n = failure_run(scan)
        if n and n >= cfg.consecutive:
            newest = scan.history[-1]
            return Verdict("critical", self, n, f"failure:{scan.tool}:{scan.sig}:{newest.result_hash}")
        return None

    def message(self, action: str, tool: str, count: int | None, paired: str | None) -> str:
        return (
            f"Blocked: {tool} failed {count} times in a row with identical arguments and the same error. "
            "Retrying it unchanged will fail again: change the arguments or the approach."
        )
