"""ping_pong: two calls alternating (semantics.md section 4, rules 5 and 6)."""

from __future__ import annotations

from typing import Any

import pytest

from .scenario import ON, OTHER, SAME, agent, call, config, decide, last, loop, result, verdict

A = ("read", {"path": "/a"})
B = ("write", {"path": "/b"})
THIRD = {"content": [{"type": "text", "text": "third"}]}
OFF_FOR_A = config([agent("a", detectors={"pingPong": False})], enabled=True)


def alternate(n: int, outcome_a: Any = SAME, outcome_b: Any = OTHER, *, agent: str | None = None) -> list[dict]:
    """n calls A, B, A, B…, each answered (outcome None: left without a result)."""
    out: list[dict] = []
    for i in range(n):
        tool, params = A if i % 2 == 0 else B
        outcome = outcome_a if i % 2 == 0 else outcome_b
        out.append(call(tool, params, agent=agent))
        if outcome is not None:
            out.append(result(tool, params, agent=agent, result=outcome))
    return out


def nth(k: int, *, agent: str | None = None) -> dict:
    """The k-th call of the alternation (1-based)."""
    tool, params = A if k % 2 == 1 else B
    return call(tool, params, agent=agent)


CASES = [
    ("one below warning", alternate(8) + [nth(9)], ON, ("allow", "none", None, None)),
    ("at warning", alternate(9) + [nth(10)], ON, ("warn", "warning", "ping_pong", 10)),
    ("one below critical", alternate(18) + [nth(19)], ON, ("allow", "warning", "ping_pong", 19)),
    ("at critical with no-progress evidence", alternate(19) + [nth(20)], ON, ("block", "critical", "ping_pong", 20)),
    (
        "at critical without results: only a warning",
        alternate(19, None, None) + [nth(20)],
        ON,
        ("warn", "warning", "ping_pong", 20),
    ),
    (
        "one side without a result: no evidence",
        alternate(19, SAME, None) + [nth(20)],
        ON,
        ("warn", "warning", "ping_pong", 20),
    ),
    (
        "one side progressing: no evidence",
        alternate(18) + [call(*A), result(*A, result=THIRD), nth(20)],
        ON,
        ("warn", "warning", "ping_pong", 20),
    ),
    (
        "a third call breaks the alternation",
        alternate(9) + loop("exec", {"command": "ls"}, SAME, 1) + [nth(9)],
        ON,
        ("allow", "none", None, None),
    ),
    ("repeating the newest call is no ping-pong", alternate(10) + [nth(10)], ON, ("allow", "none", None, None)),
    (
        "the history size bounds the count",
        alternate(40, None, None) + [nth(41)],
        ON,
        ("allow", "warning", "ping_pong", 31),
    ),
    (
        "thresholds from the config",
        alternate(4) + [nth(5)],
        config(enabled=True, warningThreshold=3, criticalThreshold=5),
        ("block", "critical", "ping_pong", 5),
    ),
    (
        "switched off for the agent",
        alternate(19, agent="a") + [nth(20, agent="a")],
        OFF_FOR_A,
        ("allow", "none", None, None),
    ),
    (
        "still on for another agent",
        alternate(19, agent="b") + [nth(20, agent="b")],
        OFF_FOR_A,
        ("block", "critical", "ping_pong", 20),
    ),
    (
        "rolling detectors are off while enabled is unset",
        alternate(19) + [nth(20)],
        config(),
        ("allow", "none", None, None),
    ),
]


@pytest.mark.parametrize("events, doc, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_ping_pong(events, doc, expected):
    assert verdict(last(events, doc)) == expected


def test_pair_key_and_messages():
    ds = decide(alternate(19) + [nth(20)], ON)
    warn, block = ds[9], ds[19]
    sig_a, sig_b = ds[0].args_hash, ds[1].args_hash
    assert (warn.tool_name, warn.paired_tool_name) == ("write", "read")
    assert (block.tool_name, block.paired_tool_name) == ("write", "read")
    assert warn.warning_key == block.warning_key == f"pingpong:{sig_a}|{sig_b}"
    assert warn.message == "Warning: write and read have alternated for 10 calls. Stop and report the task as failed."
    assert block.message == "Blocked: write and read have alternated for 20 calls with no progress."


def test_same_tool_with_two_arguments_and_key_sorted_by_utf16():
    # "\U0001f600" (a surrogate pair in UTF-16) sorts before "\uff61" by UTF-16 code units,
    # after it by code points: the key must follow UTF-16.
    pa, pb = {"q": "\uff61"}, {"q": "\U0001f600"}
    events = []
    for i in range(10):
        p = pa if i % 2 == 0 else pb
        events += [call("read", p), result("read", p, result=SAME)]
    events.append(call("read", pa))
    ds = decide(events, config(enabled=True, warningThreshold=3))
    d = ds[-1]
    assert (d.detector, d.tool_name, d.paired_tool_name) == ("ping_pong", "read", "read")
    sig_a, sig_b = ds[0].args_hash, ds[1].args_hash
    assert sig_a and sig_b
    assert d.warning_key == "pingpong:" + "|".join(sorted((sig_a, sig_b), key=lambda s: s.encode("utf-16-be")))
