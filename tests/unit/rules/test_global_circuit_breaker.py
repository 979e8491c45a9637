"""global_circuit_breaker: one outcome, again and again, whatever the switches (section 4, rule 2)."""

from __future__ import annotations

import pytest

from .scenario import ON, OTHER, SAME, agent, call, config, decide, last, loop, outcome_hash, result, verdict

READ = {"path": "/a"}
POLL = {"sessionId": "s1"}
ALL_OFF = {"genericRepeat": False, "knownPollNoProgress": False, "pingPong": False}
SWITCHES_OFF = config(enabled=True, detectors=ALL_OFF)


def results_only(n: int, outcome: dict = SAME) -> list[dict]:
    """Results with no call before them: each appends a record of its own."""
    return [result("read", READ, tool_call_id=None, result=outcome) for _ in range(n)]


CASES = [
    (
        "one below the threshold",
        loop("read", READ, SAME, 29) + [call("read", READ)],
        SWITCHES_OFF,
        ("allow", "none", None, None),
    ),
    (
        "at the threshold",
        loop("read", READ, SAME, 30) + [call("read", READ)],
        SWITCHES_OFF,
        ("block", "critical", "global_circuit_breaker", 30),
    ),
    (
        "a block stays",
        loop("read", READ, SAME, 30) + [call("read", READ)] * 2,
        SWITCHES_OFF,
        ("block", "critical", "global_circuit_breaker", 30),
    ),
    (
        "progress resets the count",
        loop("read", READ, SAME, 29) + loop("read", READ, OTHER, 1) + [call("read", READ)],
        SWITCHES_OFF,
        ("allow", "none", None, None),
    ),
    (
        "it comes before a generic critical",
        results_only(30) + [call("read", READ)],
        ON,
        ("block", "critical", "global_circuit_breaker", 30),
    ),
    (
        "a known poll with its detector off",
        loop("command_status", POLL, SAME, 30) + [call("command_status", POLL)],
        config(enabled=True, detectors={"knownPollNoProgress": False}),
        ("block", "critical", "global_circuit_breaker", 30),
    ),
    (
        "the threshold from the config",
        loop("read", READ, SAME, 25) + [call("read", READ)],
        config(enabled=True, historySize=40, globalCircuitBreakerThreshold=25, detectors=ALL_OFF),
        ("block", "critical", "global_circuit_breaker", 25),
    ),
    (
        "a threshold clamped above critical",
        loop("read", READ, SAME, 5) + [call("read", READ)],
        config(
            enabled=True, warningThreshold=3, criticalThreshold=4, globalCircuitBreakerThreshold=2, detectors=ALL_OFF
        ),
        ("block", "critical", "global_circuit_breaker", 5),
    ),
    (
        "beyond the history size it cannot fire",
        loop("read", READ, SAME, 40) + [call("read", READ)],
        config(enabled=True, historySize=20, detectors=ALL_OFF),
        ("allow", "none", None, None),
    ),
    (
        "on for an agent whose switches are all off",
        loop("read", READ, SAME, 30, agent="a") + [call("read", READ, agent="a")],
        config([agent("a", detectors=ALL_OFF)], enabled=True),
        ("block", "critical", "global_circuit_breaker", 30),
    ),
    (
        "off while enabled is unset",
        loop("read", READ, SAME, 30) + [call("read", READ)],
        config(detectors=ALL_OFF),
        ("allow", "none", None, None),
    ),
]


@pytest.mark.parametrize("events, doc, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_global_circuit_breaker(events, doc, expected):
    assert verdict(last(events, doc)) == expected


def test_key_and_message():
    d = decide(loop("read", READ, SAME, 30) + [call("read", READ)], SWITCHES_OFF)[-1]
    assert d.warning_key == f"global:read:{d.args_hash}:{outcome_hash('read', READ, SAME)}"
    assert d.message == (
        "Blocked: read returned the same no-progress outcome 30 times; the global circuit breaker stops this loop."
    )
