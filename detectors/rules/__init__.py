"""The detectors, in the order they are tried: the first that fires decides a call.

This registry is the one list of them. The config switches
(`tools.loopDetection.detectors.*`, `SWITCHES`; `loopwarden.rules.*.enabled`, `RULES`)
and the `detector` values a decision can carry (`NAMES`) derive from it, and each
agent's config holds the detectors switched on for it, in this order
(`AgentConfig.call_detectors`). A new detector is a module beside these (a `Detector`
subclass) and one line here.
"""

from __future__ import annotations

from typing import Any

from .base import CallScan, Detector, GuardScan, Verdict
from .compaction_loop_persisted import CompactionLoopPersisted
from .cycle import Cycle
from .failure_repeat import FailureRepeat
from .generic_repeat import GenericRepeat
from .global_circuit_breaker import GlobalCircuitBreaker
from .known_poll_no_progress import KnownPollNoProgress
from .ping_pong import PingPong
from .unknown_tool_repeat import UnknownToolRepeat

COMPACTION_GUARD = CompactionLoopPersisted()

REGISTRY: tuple[Detector[Any], ...] = (
    UnknownToolRepeat(),
    GlobalCircuitBreaker(),
    FailureRepeat(),  # rule 2a (semantics.md section 12)
    KnownPollNoProgress(),
    PingPong(),
    Cycle(),  # rule 5a: after ping-pong's warning too, which never fires with it (cycle.py)
    GenericRepeat(),
    COMPACTION_GUARD,
)

NAMES: tuple[str, ...] = tuple(d.name for d in REGISTRY)
"""Every `detector` value a decision can carry."""
BY_NAME: dict[str, Detector[Any]] = {d.name: d for d in REGISTRY}
SWITCHES: tuple[str, ...] = tuple(sorted(d.switch for d in REGISTRY if d.switch is not None))
"""The keys of `tools.loopDetection.detectors`, sorted (the order config warnings name them in)."""
RULES: tuple[str, ...] = tuple(d.rule for d in REGISTRY if d.rule is not None)
"""The rule entries of `loopwarden.rules` that switch a detector on (semantics.md section 12)."""
CALL_DETECTORS: tuple[Detector[CallScan], ...] = tuple(d for d in REGISTRY if d.judges == "tool_call")
RESULT_DETECTORS: tuple[Detector[GuardScan], ...] = tuple(d for d in REGISTRY if d.judges == "tool_result")

assert len(BY_NAME) == len(REGISTRY), "two detectors share a name"
assert len(set(SWITCHES)) == len(SWITCHES), "two detectors share a switch"
assert len(set(RULES)) == len(RULES), "two detectors share a rule"

__all__ = [
    "BY_NAME",
    "CALL_DETECTORS",
    "COMPACTION_GUARD",
    "NAMES",
    "REGISTRY",
    "RESULT_DETECTORS",
    "RULES",
    "SWITCHES",
    "CallScan",
    "Detector",
    "GuardScan",
    "Verdict",
]
