"""unknown_tool_repeat: a tool that does not exist, tried again and again (rule 1; no switch)."""

from __future__ import annotations

from .base import CallScan, Detector, Thresholds, Verdict


class UnknownToolRepeat(Detector[CallScan]):
    name = "unknown_tool_repeat"
    judges = "tool_call"
    streak_only = True  # unknownToolThreshold is at least 1

    def evaluate(self, scan: CallScan, cfg: Thresholds) -> Verdict | None:
        if scan.unknown_streak >= cfg.unknown_tool:
            return Verdict("critical", self, scan.unknown_streak, f"unknown-tool:{scan.tool}:{scan.missing}")
        return None

    def message(self, action: str, tool: str, count: int | None, paired: str | None) -> str:
        return f"Blocked: the tool {tool} is unavailable and was tried {count} times. Answer without it."
