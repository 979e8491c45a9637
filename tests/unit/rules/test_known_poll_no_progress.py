"""known_poll_no_progress: polling that returns the same thing (semantics.md section 4, rules 3 and 4)."""

from __future__ import annotations

import pytest

from .scenario import ON, OTHER, SAME, agent, call, config, decide, last, loop, outcome_hash, result, verdict

POLL = {"sessionId": "s1"}
PROC = {"action": "poll", "sessionId": "s1"}
OFF_FOR_A = config([agent("a", detectors={"knownPollNoProgress": False})], enabled=True)


def private_loop(n: int) -> list[dict]:
    """Privacy-mode polls: hashes and the known_poll flag instead of params and results."""
    out: list[dict] = []
    for _ in range(n):
        out.append(call("command_status", args_hash="command_status:h1", known_poll=True))
        out.append(result("command_status", args_hash="command_status:h1", result_hash="out1"))
    return out


CASES = [
    (
        "one below warning",
        loop("command_status", POLL, SAME, 9) + [call("command_status", POLL)],
        ON,
        ("allow", "none", None, None),
    ),
    (
        "at warning",
        loop("command_status", POLL, SAME, 10) + [call("command_status", POLL)],
        ON,
        ("warn", "warning", "known_poll_no_progress", 10),
    ),
    (
        "one below critical",
        loop("command_status", POLL, SAME, 19) + [call("command_status", POLL)],
        ON,
        ("allow", "warning", "known_poll_no_progress", 19),
    ),
    (
        "at critical",
        loop("command_status", POLL, SAME, 20) + [call("command_status", POLL)],
        ON,
        ("block", "critical", "known_poll_no_progress", 20),
    ),
    (
        "progress resets the count",
        loop("command_status", POLL, SAME, 19)
        + loop("command_status", POLL, OTHER, 1)
        + [call("command_status", POLL)],
        ON,
        ("allow", "none", None, None),
    ),
    ("polls without results are no evidence", [call("command_status", POLL)] * 16, ON, ("allow", "none", None, None)),
    (
        "a call still waiting is skipped, not a break",
        loop("command_status", POLL, SAME, 10) + [call("command_status", POLL)] * 3,
        ON,
        ("allow", "warning", "known_poll_no_progress", 10),
    ),
    (
        "process poll",
        loop("process", PROC, SAME, 10) + [call("process", PROC)],
        ON,
        ("warn", "warning", "known_poll_no_progress", 10),
    ),
    (
        "process log",
        loop("process", {"action": "log"}, SAME, 20) + [call("process", {"action": "log"})],
        ON,
        ("block", "critical", "known_poll_no_progress", 20),
    ),
    (
        "another process action is a generic repeat",
        loop("process", {"action": "kill"}, SAME, 10) + [call("process", {"action": "kill"})],
        ON,
        ("warn", "warning", "generic_repeat", 10),
    ),
    (
        "privacy mode: the known_poll flag",
        private_loop(10) + [call("command_status", args_hash="command_status:h1", known_poll=True)],
        ON,
        ("warn", "warning", "known_poll_no_progress", 10),
    ),
    (
        "thresholds from the config",
        loop("command_status", POLL, SAME, 4) + [call("command_status", POLL)],
        config(enabled=True, warningThreshold=2, criticalThreshold=4),
        ("block", "critical", "known_poll_no_progress", 4),
    ),
    (
        "switched off for the agent (and not a generic repeat either)",
        loop("command_status", POLL, SAME, 20, agent="a") + [call("command_status", POLL, agent="a")],
        OFF_FOR_A,
        ("allow", "none", None, None),
    ),
    (
        "still on for another agent",
        loop("command_status", POLL, SAME, 20, agent="b") + [call("command_status", POLL, agent="b")],
        OFF_FOR_A,
        ("block", "critical", "known_poll_no_progress", 20),
    ),
    (
        "rolling detectors are off while enabled is unset",
        loop("command_status", POLL, SAME, 20) + [call("command_status", POLL)],
        config(),
        ("allow", "none", None, None),
    ),
]


@pytest.mark.parametrize("events, doc, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_known_poll_no_progress(events, doc, expected):
    assert verdict(last(events, doc)) == expected


def test_keys_and_messages():
    ds = decide(loop("command_status", POLL, SAME, 20) + [call("command_status", POLL)], ON)
    warn, block = ds[10], ds[20]
    key = f"poll:command_status:{warn.args_hash}:{outcome_hash('command_status', POLL, SAME)}"
    assert warn.warning_key == key and block.warning_key == key
    assert warn.message == (
        "Warning: command_status was polled 10 times with identical arguments and no progress. "
        "Wait longer between checks, or report the task as stuck."
    )
    assert block.message == "Blocked: command_status was polled 20 times with identical arguments and no progress."


def test_privacy_mode_key_uses_the_given_hashes():
    d = last(private_loop(10) + [call("command_status", args_hash="command_status:h1", known_poll=True)], ON)
    assert d.warning_key == "poll:command_status:command_status:h1:out1"
