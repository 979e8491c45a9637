"""generic_repeat: the same call again and again (semantics.md section 4, rules 7 and 8)."""

from __future__ import annotations

import pytest

from .scenario import ON, OTHER, SAME, agent, call, config, decide, last, loop, outcome_hash, verdict

READ = {"path": "/a"}
OFF_FOR_A = config([agent("a", detectors={"genericRepeat": False})], enabled=True)

CASES = [
    # (id, events, config, (action, level, detector, count))
    ("one below warning", loop("read", READ, SAME, 9) + [call("read", READ)], ON, ("allow", "none", None, None)),
    ("at warning", loop("read", READ, SAME, 10) + [call("read", READ)], ON, ("warn", "warning", "generic_repeat", 10)),
    (
        "calls still waiting for results count",
        [call("read", READ)] * 10 + [call("read", READ)],
        ON,
        ("warn", "warning", "generic_repeat", 10),
    ),
    (
        "the same warning is not shown twice in one bucket",
        loop("read", READ, SAME, 11) + [call("read", READ)],
        ON,
        ("allow", "warning", "generic_repeat", 11),
    ),
    (
        "one below critical",
        loop("read", READ, SAME, 19) + [call("read", READ)],
        ON,
        ("allow", "warning", "generic_repeat", 19),
    ),
    (
        "at critical",
        loop("read", READ, SAME, 20) + [call("read", READ)],
        ON,
        ("block", "critical", "generic_repeat", 20),
    ),
    (
        "a block stays while the call repeats",
        loop("read", READ, SAME, 20) + [call("read", READ)] * 3,
        ON,
        ("block", "critical", "generic_repeat", 20),
    ),
    (
        "progress resets the no-progress count: a new bucket warns instead of blocking",
        loop("read", READ, SAME, 19) + loop("read", READ, OTHER, 1) + [call("read", READ)],
        ON,
        ("warn", "warning", "generic_repeat", 20),
    ),
    (
        "other arguments are another call",
        loop("read", READ, SAME, 20) + [call("read", {"path": "/b"})],
        ON,
        ("allow", "none", None, None),
    ),
    (
        "1 and 1.0 are the same argument",
        loop("read", {"n": 1}, SAME, 10) + [call("read", {"n": 1.0})],
        ON,
        ("warn", "warning", "generic_repeat", 10),
    ),
    (
        "aliases are the same tool",
        loop("bash", {"command": "ls"}, SAME, 10) + [call("exec", {"command": "ls"})],
        ON,
        ("warn", "warning", "generic_repeat", 10),
    ),
    (
        "the history size bounds the count",
        loop("read", READ, SAME, 15) + [call("read", READ)],
        config(enabled=True, historySize=9),
        ("allow", "none", None, None),
    ),
    (
        "thresholds from the config",
        loop("read", READ, SAME, 3) + [call("read", READ)],
        config(enabled=True, warningThreshold=3, criticalThreshold=5),
        ("warn", "warning", "generic_repeat", 3),
    ),
    (
        "a lower warning threshold warns again when the bucket grows",
        loop("read", READ, SAME, 10) + [call("read", READ)],
        config(enabled=True, warningThreshold=4),
        ("warn", "warning", "generic_repeat", 10),
    ),
    (
        "switched off for the agent",
        loop("read", READ, SAME, 20, agent="a") + [call("read", READ, agent="a")],
        OFF_FOR_A,
        ("allow", "none", None, None),
    ),
    (
        "still on for another agent",
        loop("read", READ, SAME, 20, agent="b") + [call("read", READ, agent="b")],
        OFF_FOR_A,
        ("block", "critical", "generic_repeat", 20),
    ),
    (
        "rolling detectors are off while enabled is unset",
        loop("read", READ, SAME, 20) + [call("read", READ)],
        config(),
        ("allow", "none", None, None),
    ),
    (
        "a known poll is never a generic repeat",
        [call("command_status", {"id": 1})] * 11,
        ON,
        ("allow", "none", None, None),
    ),
]


@pytest.mark.parametrize("events, doc, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_generic_repeat(events, doc, expected):
    assert verdict(last(events, doc)) == expected


def test_keys_and_messages():
    ds = decide(loop("read", READ, SAME, 20) + [call("read", READ)], ON)
    warn, block = ds[10], ds[20]  # one decision per call: the 11th and the 21st
    sig = warn.args_hash
    assert warn.warning_key == f"generic:read:{sig}"
    assert warn.message == (
        "Warning: read was called 10 times with identical arguments. If this is not "
        "making progress, stop retrying and report the task as failed."
    )
    assert block.warning_key == f"generic:read:{sig}:{outcome_hash('read', READ, SAME)}"
    assert block.message == "Blocked: read was called 20 times with identical arguments and identical outcomes."
    assert warn.paired_tool_name is None and block.paired_tool_name is None
