"""The rolling detectors (semantics.md section 4): one verdict for one call."""

from __future__ import annotations

from typing import NamedTuple

from .config import Resolved
from .state import Record


def _utf16(s: str) -> bytes:
    return s.encode("utf-16-be", "surrogatepass")  # JavaScript sorts by UTF-16 code units


class Verdict(NamedTuple):
    level: str  # "warning" or "critical"
    detector: str
    count: int
    warning_key: str
    paired_tool_name: str | None = None


def _ping_pong(history: tuple[Record, ...], sig: str) -> tuple[int, str | None, str | None, bool]:
    """(count, paired tool, paired signature, no-progress evidence) of an alternation."""
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
    ha = hb = None
    evidence = True
    for i in range(n - tail, n):
        r = history[i]
        rh = r.result_hash
        if not rh:
            evidence = False
            break
        if r.args_hash == a:
            if ha is None:
                ha = rh
            elif ha != rh:
                evidence = False
                break
        else:
            if hb is None:
                hb = rh
            elif hb != rh:
                evidence = False
                break
    if ha is None or hb is None:
        evidence = False
    return tail + 1, last.tool_name, a, evidence


def judge(history: tuple[Record, ...], tool: str, sig: str, known_poll: bool, cfg: Resolved) -> Verdict | None:
    """The first rule that fires for a call about to run, or None (allow)."""
    # Unknown-tool streak: contiguous newest-first records of this tool naming one missing tool.
    streak = 0
    missing = None
    for r in reversed(history):
        u = r.unknown_tool_name
        if r.tool_name != tool or not u or (missing is not None and u != missing):
            break
        missing = u
        streak += 1
    if streak >= cfg.unknown_tool:
        return Verdict("critical", "unknown_tool_repeat", streak, f"unknown-tool:{tool}:{missing}")

    # No-progress streak and repeat count over the records of this exact call.
    repeats = 0
    no_progress = 0
    latest = None
    counting = True
    for r in reversed(history):
        if r.args_hash != sig or r.tool_name != tool:
            continue
        repeats += 1
        if counting:
            rh = r.result_hash
            if not rh:
                continue
            if latest is None:
                latest = rh
                no_progress = 1
            elif rh == latest:
                no_progress += 1
            else:
                counting = False

    if no_progress >= cfg.global_breaker:
        return Verdict("critical", "global_circuit_breaker", no_progress, f"global:{tool}:{sig}:{latest}")
    if known_poll and cfg.known_poll:
        if no_progress >= cfg.critical:
            return Verdict("critical", "known_poll_no_progress", no_progress, f"poll:{tool}:{sig}:{latest}")
        if no_progress >= cfg.warning:
            return Verdict("warning", "known_poll_no_progress", no_progress, f"poll:{tool}:{sig}:{latest}")
    if cfg.ping_pong:
        count, paired, paired_sig, evidence = _ping_pong(history, sig)
        if count >= cfg.warning:
            key = "pingpong:" + "|".join(sorted((sig, paired_sig), key=_utf16))  # type: ignore[arg-type]
            if count >= cfg.critical and evidence:
                return Verdict("critical", "ping_pong", count, key, paired)
            return Verdict("warning", "ping_pong", count, key, paired)
    if not known_poll and cfg.generic_repeat:
        if no_progress >= cfg.critical:
            return Verdict("critical", "generic_repeat", no_progress, f"generic:{tool}:{sig}:{latest}")
        if repeats >= cfg.warning:
            return Verdict("warning", "generic_repeat", repeats, f"generic:{tool}:{sig}")
    return None
