"""unknown_tool_repeat: retries of a tool that does not exist (semantics.md section 4, rule 1)."""

from __future__ import annotations

import pytest

from .scenario import ON, SAME, agent, call, config, decide, last, loop, result, verdict

ALL_OFF = {"genericRepeat": False, "knownPollNoProgress": False, "pingPong": False}


def failing(
    n: int, message: str = "Unknown tool: browser", tool: str = "browser", start: int = 0, agent: str | None = None
) -> list[dict]:
    """n calls of a missing tool, each with other arguments (so no other detector counts them)."""
    out: list[dict] = []
    for i in range(start, start + n):
        out += [call(tool, {"n": i}, agent=agent), result(tool, {"n": i}, agent=agent, error=message)]
    return out


def private_failing(n: int) -> list[dict]:
    out: list[dict] = []
    for i in range(n):
        out += [
            call("browser", args_hash=f"browser:{i}"),
            result("browser", args_hash=f"browser:{i}", result_hash="error:x", unknown_tool_name="Browser"),
        ]
    return out


NEXT = call("browser", {"n": 99})

CASES = [
    ("one below the threshold", failing(9) + [NEXT], ON, ("allow", "none", None, None)),
    ("at the threshold", failing(10) + [NEXT], ON, ("block", "critical", "unknown_tool_repeat", 10)),
    (
        "results of blocked calls are still recorded",
        failing(12) + [NEXT],
        ON,
        ("block", "critical", "unknown_tool_repeat", 12),
    ),
    ("a block stays", failing(10) + [NEXT, NEXT], ON, ("block", "critical", "unknown_tool_repeat", 10)),
    (
        "the threshold from the config",
        failing(3) + [NEXT],
        config(enabled=True, unknownToolThreshold=3),
        ("block", "critical", "unknown_tool_repeat", 3),
    ),
    (
        "the other wording",
        failing(10, "Error: tool 'browser' is not available") + [NEXT],
        ON,
        ("block", "critical", "unknown_tool_repeat", 10),
    ),
    (
        "another tool breaks the streak",
        failing(9) + loop("read", {"path": "/a"}, SAME, 1) + failing(1, start=9) + [NEXT],
        ON,
        ("allow", "none", None, None),
    ),
    (
        "a success of the same tool breaks the streak",
        failing(9) + [call("browser", {"n": 9}), result("browser", {"n": 9}, result=SAME), NEXT],
        ON,
        ("allow", "none", None, None),
    ),
    (
        "a call still waiting breaks the streak",
        failing(9) + [call("browser", {"n": 9}), NEXT],
        ON,
        ("allow", "none", None, None),
    ),
    (
        "another missing name breaks the streak",
        failing(5, "Unknown tool: browsr") + failing(5, start=5) + [NEXT],
        ON,
        ("allow", "none", None, None),
    ),
    ("an error that names no missing tool", failing(10, "disk full") + [NEXT], ON, ("allow", "none", None, None)),
    (
        "on even with every detector switched off",
        failing(10, agent="a") + [call("browser", {"n": 99}, agent="a")],
        config([agent("a", detectors=ALL_OFF)], enabled=True),
        ("block", "critical", "unknown_tool_repeat", 10),
    ),
    (
        "per agent threshold",
        failing(4, agent="a") + [call("browser", {"n": 99}, agent="a")],
        config([agent("a", unknownToolThreshold=4)], enabled=True),
        ("block", "critical", "unknown_tool_repeat", 4),
    ),
    ("off while enabled is unset", failing(10) + [NEXT], config(), ("allow", "none", None, None)),
    (
        "off for an agent with enabled false",
        failing(10, agent="a") + [call("browser", {"n": 99}, agent="a")],
        config([agent("a", enabled=False)], enabled=True),
        ("allow", "none", None, None),
    ),
    (
        "privacy mode: the given name, lower-cased",
        private_failing(10) + [call("browser", args_hash="browser:x")],
        ON,
        ("block", "critical", "unknown_tool_repeat", 10),
    ),
]


@pytest.mark.parametrize("events, doc, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_unknown_tool_repeat(events, doc, expected):
    assert verdict(last(events, doc)) == expected


def test_it_comes_before_a_generic_repeat_of_the_same_call():
    same = loop("browser", {"n": 1}, "error:Unknown tool: browser", 10)
    d = last(same + [call("browser", {"n": 1})], ON)
    assert verdict(d) == ("block", "critical", "unknown_tool_repeat", 10)


def test_key_and_message():
    d = decide(failing(10) + [NEXT], ON)[-1]
    assert d.warning_key == "unknown-tool:browser:browser"
    assert d.paired_tool_name is None
    assert d.message == "Blocked: the tool browser is unavailable and was tried 10 times. Answer without it."
    p = last(private_failing(10) + [call("Browser", args_hash="browser:x")], ON)
    assert p.warning_key == "unknown-tool:browser:browser"
