"""global_circuit_breaker: one outcome of one call, past globalCircuitBreakerThreshold (rule 2; no switch)."""

from __future__ import annotations

from .base import CallScan, Detector, Thresholds, Verdict


class GlobalCircuitBreaker(Detector[CallScan]):
    name = "global_circuit_breaker"
    judges = "tool_call"
    repeats_only = True

    def evaluate(self, scan: CallScan, cfg: Thresholds) -> Verdict | None:
        if scan.no_progress >= cfg.global_breaker:
            return Verdict("critical", self, scan.no_progress, f"global:{scan.tool}:{scan.sig}:{scan.latest}")
        return None

    def message(self, action: str, tool: str, count: int | None, paired: str | None) -> str:
        return (
            f"Blocked: {tool} returned the same no-progress outcome {count} times; the global "
            "circuit breaker stops this loop."
        )
