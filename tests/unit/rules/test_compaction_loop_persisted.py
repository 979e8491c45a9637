"""compaction_loop_persisted: the post-compaction guard (semantics.md section 5)."""

from __future__ import annotations

import pytest

from .scenario import LOOP_ECHO, ON, OTHER, SAME, agent, call, compaction, config, decide, loop, result

READ = {"path": "/a"}
UNSET = config()  # enabled unset: the guard is on, the rolling detectors off


def first_abort(events: list[dict], doc: dict) -> tuple[int, int | None] | None:
    """(seq of the event aborted on, count) of the first abort, or None."""
    for d in decide(events, doc):
        if d.action == "abort":
            assert (d.level, d.detector) == ("critical", "compaction_loop_persisted")
            return d.seq, d.count
    return None


CASES = [
    ("one below the window", [compaction()] + loop("read", READ, SAME, 2) + [call("read", READ)], UNSET, None),
    ("at the window: the third result aborts", [compaction()] + loop("read", READ, SAME, 3), UNSET, (6, 3)),
    ("no compaction, no guard", loop("read", READ, SAME, 10), UNSET, None),
    (
        "changing results never abort",
        [compaction()] + loop("read", READ, SAME, 2) + loop("read", READ, OTHER, 1) + loop("read", READ, SAME, 5),
        UNSET,
        None,
    ),
    (
        "the window closes after its attempts",
        [compaction()] + loop("read", READ, OTHER, 1) + loop("read", READ, SAME, 5),
        UNSET,
        None,
    ),
    (
        "a result without an outcome uses no attempt",
        [compaction()] + loop("read", READ, SAME, 1) + loop("read", READ, LOOP_ECHO, 1) + loop("read", READ, SAME, 2),
        UNSET,
        (8, 3),
    ),
    (
        "each compaction arms a fresh window",
        [compaction()] + loop("read", READ, SAME, 2) + [compaction()] + loop("read", READ, SAME, 2),
        UNSET,
        None,
    ),
    (
        "the fresh window fills",
        [compaction()] + loop("read", READ, SAME, 2) + [compaction()] + loop("read", READ, SAME, 3),
        UNSET,
        (11, 3),
    ),
    (
        "the window size from the config",
        [compaction()] + loop("read", READ, SAME, 5),
        config(postCompactionGuard={"windowSize": 5}),
        (10, 5),
    ),
    (
        "one below a configured window",
        [compaction()] + loop("read", READ, SAME, 4),
        config(postCompactionGuard={"windowSize": 5}),
        None,
    ),
    (
        "a window of one",
        [compaction()] + loop("read", READ, SAME, 1),
        config(postCompactionGuard={"windowSize": 1}),
        (2, 1),
    ),
    ("on with the rolling detectors", [compaction()] + loop("read", READ, SAME, 3), ON, (6, 3)),
    ("off with enabled false", [compaction()] + loop("read", READ, SAME, 3), config(enabled=False), None),
    (
        "off for an agent with enabled false",
        [compaction(agent="a")] + loop("read", READ, SAME, 3, agent="a"),
        config([agent("a", enabled=False)]),
        None,
    ),
    (
        "on for another agent",
        [compaction(agent="b")] + loop("read", READ, SAME, 3, agent="b"),
        config([agent("a", enabled=False)]),
        (6, 3),
    ),
    (
        "a per-agent window",
        [compaction(agent="a")] + loop("read", READ, SAME, 2, agent="a"),
        config([agent("a", postCompactionGuard={"windowSize": 2})]),
        (4, 2),
    ),
]


@pytest.mark.parametrize("events, doc, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_compaction_loop_persisted(events, doc, expected):
    assert first_abort(events, doc) == expected


def test_the_abort_and_what_follows():
    events = (
        [compaction()]
        + loop("read", READ, SAME, 3)
        + [call("read", {"path": "/z"}), result("read", {"path": "/z"}, result=OTHER), call("exec", {"command": "ls"})]
    )
    ds = decide(events, UNSET)
    assert [d.action for d in ds] == ["allow", "allow", "allow", "abort", "abort", "abort"]
    hit, after = ds[3], ds[4:]
    assert (hit.seq, hit.tool_call_id, hit.count, hit.warning_key, hit.paired_tool_name) == (6, "r-c5", 3, None, None)
    assert hit.message == (
        "Run aborted: read returned the same result 3 times in a row right after a "
        "context compaction; the loop survived compaction."
    )
    assert [(d.seq, d.tool_name, d.level, d.detector, d.count, d.warning_key, d.paired_tool_name) for d in after] == [
        (7, "read", "critical", "compaction_loop_persisted", None, None, None),
        (9, "exec", "critical", "compaction_loop_persisted", None, None, None),
    ]
    assert after[1].message == (
        "Run aborted: exec was called after the run was stopped for repeating an identical loop through compaction."
    )


def test_a_run_end_clears_the_abort():
    aborted = [compaction()] + loop("read", READ, SAME, 3) + [call("read", READ)]
    assert decide(aborted, UNSET)[-1].action == "abort"
    assert decide(aborted + [{"type": "run_end"}, call("read", READ)], UNSET)[-1].action == "allow"
