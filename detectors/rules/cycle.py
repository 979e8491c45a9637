"""cycle: a round of three or more different calls, repeated with the same outcomes
(semantics.md section 12, rule 5a; on with `loopwarden.rules.cycles.enabled`).

Rule 5a comes between ping-pong's block (rule 5) and its warning (rule 6), yet the
registry lists this detector after ping-pong's, whose one `evaluate` gives both. The
two can never fire on the same call: a cycle of period p >= 3 has p pairwise different
signatures as its newest records, so ping-pong's alternating tail is 2 long (the newest
two) and it fires only for a call repeating the second newest record, while a cycle
fires only for one repeating the p-th newest (tests/unit/rules/test_cycle.py checks
this on random histories).
"""

from __future__ import annotations

from ..state import HistoryEntry
from .base import CallScan, Detector, Thresholds, Verdict
from .ping_pong import utf16


def cycle_period(history: tuple[HistoryEntry, ...], sig: str, max_period: int, laps: int) -> int:
    """The first period p, from 3 to `max_period`, whose cycle the call `sig` would go
    round once more, or 0. Each period looks at the newest `p * laps` records only, and
    first at the one record the call must repeat, so most calls cost a comparison a
    period."""
    n = len(history)
    for p in range(3, max_period + 1):
        span = p * laps
        if span > n:  # and every longer period too
            return 0
        if history[n - p].args_hash != sig:
            continue
        block = history[n - p :]
        if any(r.result_hash is None for r in block):
            continue
        if len({r.args_hash for r in block}) != p:
            continue
        for i in range(n - span, n - p):  # every earlier lap, record by record
            a = history[i]
            b = history[i + p]
            if a.args_hash != b.args_hash or a.result_hash != b.result_hash or a.tool_name != b.tool_name:
                break
        else:
            return p
    return 0


class Cycle(Detector[CallScan]):
    name = "cycle"
    judges = "tool_call"
    rule = "cycles"
    repeats_only = True  # the call repeats a record of the history

    def evaluate(self, scan: CallScan, cfg: Thresholds) -> Verdict | None:
        p = cycle_period(scan.history, scan.sig, cfg.max_period, cfg.laps)
        if not p:
            return None
        sigs = sorted((r.args_hash for r in scan.history[-p:]), key=utf16)
        return Verdict("critical", self, p * cfg.laps + 1, "cycle:" + "|".join(sigs))

    def message(self, action: str, tool: str, count: int | None, paired: str | None) -> str:
        return (
            f"Blocked: calling {tool} now would start another round of a cycle of calls that kept getting "
            f"the same outputs ({count} calls). Repeating the cycle will not make progress: change the approach."
        )
