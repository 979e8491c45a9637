"""ping_pong: two calls alternating, A B A B… (rules 5 and 6; with `loopwarden.rules.progressAware`,
rule 6 warns only with rule 5's no-progress evidence, semantics.md section 12)."""

from __future__ import annotations

from ..state import HistoryEntry
from .base import CallScan, Detector, Thresholds, Verdict


def utf16(s: str) -> bytes:
    return s.encode("utf-16-be", "surrogatepass")  # JavaScript sorts by UTF-16 code units


def alternation(history: tuple[HistoryEntry, ...], sig: str) -> tuple[int, str | None, str | None, bool]:
    """(count, paired tool, paired signature, no-progress evidence) of the alternation the
    call `sig` would extend; count 0 when there is none."""
    n = len(history)
    if n < 2:
        return 0, None, None, False
    last = history[-1]
    a = last.args_hash
    b = None
    for i in range(n - 2, -1, -1):
        if history[i].args_hash != a:
            b = history[i].args_hash
            break
    if b is None or sig != b:
        return 0, None, None, False
    tail = 0
    for i in range(n - 1, -1, -1):
        if history[i].args_hash != (a if tail % 2 == 0 else b):
            break
        tail += 1
    if tail < 2:
        return 0, None, None, False
    return tail + 1, last.tool_name, a, no_progress(history[n - tail :], a)


def no_progress(tail: tuple[HistoryEntry, ...], a: str) -> bool:
    """Rule 5's evidence over the alternating tail: every record has an outcome, one per
    side (`a`'s signature, and the other's)."""
    ha = hb = None
    for r in tail:
        rh = r.result_hash
        if not rh:
            return False
        if r.args_hash == a:
            if ha is None:
                ha = rh
            elif ha != rh:
                return False
        elif hb is None:
            hb = rh
        elif hb != rh:
            return False
    return ha is not None and hb is not None


class PingPong(Detector[CallScan]):
    name = "ping_pong"
    switch = "pingPong"
    judges = "tool_call"
    repeats_only = True

    def evaluate(self, scan: CallScan, cfg: Thresholds) -> Verdict | None:
        count, paired, paired_sig, evidence = alternation(scan.history, scan.sig)
        if count < cfg.warning or paired_sig is None:
            return None
        key = "pingpong:" + "|".join(sorted((scan.sig, paired_sig), key=utf16))
        if count >= cfg.critical and evidence:
            return Verdict("critical", self, count, key, paired)
        if cfg.progress_aware and not evidence:  # section 12: an alternation that progresses
            return None
        return Verdict("warning", self, count, key, paired)

    def message(self, action: str, tool: str, count: int | None, paired: str | None) -> str:
        other = f" and {paired}" if paired else ""
        if action == "block":
            return f"Blocked: {tool}{other} have alternated for {count} calls with no progress."
        return f"Warning: {tool}{other} have alternated for {count} calls. Stop and report the task as failed."
