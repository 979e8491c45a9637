"""Progress-aware warnings (semantics.md section 12): with `loopwarden.rules.progressAware`,
the generic warning counts identical outcomes and ping-pong warns only without progress."""

from __future__ import annotations

import pytest

from .scenario import OTHER, SAME, call, config, decide, last, loop, result, verdict

SCROLL = ("scroll_down", {})


def aware(**loop_detection: object) -> dict:
    doc = config(enabled=True, **loop_detection)
    doc["loopwarden"] = {"rules": {"progressAware": True}}
    return doc


def pages(n: int) -> list[dict]:
    """n calls of one paging call, every output different."""
    out: list[dict] = []
    for i in range(n):
        page = {"content": [{"type": "text", "text": f"lines {i * 100}-{i * 100 + 99}"}]}
        out += [call(*SCROLL), result(*SCROLL, result=page)]
    return out


def alternate(n: int, progress: bool) -> list[dict]:
    out: list[dict] = []
    for i in range(n):
        tool, params = ("read", {"path": "/a"}) if i % 2 == 0 else ("write", {"path": "/b"})
        text = f"{tool} {i}" if progress else tool
        out += [call(tool, params), result(tool, params, result={"content": [{"type": "text", "text": text}]})]
    return out


CASES = [
    ("paging is progress: never warned", pages(25) + [call(*SCROLL)], aware(), ("allow", "none", None, None)),
    (
        "OpenClaw's rule warns it",
        pages(10) + [call(*SCROLL)],
        config(enabled=True),
        ("warn", "warning", "generic_repeat", 10),
    ),
    (
        "the same output ten times is warned, with the streak as count",
        pages(5) + loop(*SCROLL, SAME, 10) + [call(*SCROLL)],
        aware(),
        ("warn", "warning", "generic_repeat", 10),
    ),
    (
        "calls still waiting for a result are no evidence",
        [call(*SCROLL)] * 12,
        aware(),
        ("allow", "none", None, None),
    ),
    (
        "the critical rule is unchanged",
        loop(*SCROLL, SAME, 20) + [call(*SCROLL)],
        aware(),
        ("block", "critical", "generic_repeat", 20),
    ),
    (
        "a ping-pong that progresses is not warned",
        alternate(9, progress=True) + [call("write", {"path": "/b"})],
        aware(),
        ("allow", "none", None, None),
    ),
    (
        "a ping-pong without progress is",
        alternate(9, progress=False) + [call("write", {"path": "/b"})],
        aware(),
        ("warn", "warning", "ping_pong", 10),
    ),
    (
        "OpenClaw's ping-pong warns either",
        alternate(9, progress=True) + [call("write", {"path": "/b"})],
        config(enabled=True),
        ("warn", "warning", "ping_pong", 10),
    ),
]


@pytest.mark.parametrize("events, doc, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_progress_aware(events, doc, expected):
    assert verdict(last(events, doc)) == expected


def test_a_warning_not_given_leaves_its_key_untouched():
    # A progressing alternation (OpenClaw's rule warns it at count 10, bucket 1), a call
    # that breaks it, then the same pair without progress (count 5, bucket 0).
    events = alternate(12, progress=True) + loop("exec", {"command": "ls"}, SAME, 1)
    events += alternate(4, progress=False) + [call("read", {"path": "/a"})]
    openclaw = decide(events, config(enabled=True, warningThreshold=5, criticalThreshold=40))
    loopwarden = decide(events, aware(warningThreshold=5, criticalThreshold=40))
    assert verdict(openclaw[9]) == ("warn", "warning", "ping_pong", 10)
    assert verdict(openclaw[-1]) == ("allow", "warning", "ping_pong", 5)  # suppressed: bucket 1 was shown
    assert [d.action for d in loopwarden[:-1]] == ["allow"] * (len(loopwarden) - 1)
    assert verdict(loopwarden[-1]) == ("warn", "warning", "ping_pong", 5)  # its key was never touched


def test_generic_warning_memory_is_section_4s():
    events = loop("read", {"path": "/a"}, SAME, 10) + [call("read", {"path": "/a"})]
    events += [result("read", {"path": "/a"}, result=SAME), call("read", {"path": "/a"})]
    ds = decide(events, aware())
    assert [verdict(d) for d in ds[-2:]] == [
        ("warn", "warning", "generic_repeat", 10),
        ("allow", "warning", "generic_repeat", 11),  # suppressed: the same bucket
    ]
    assert ds[-1].warning_key == ds[-2].warning_key == f"generic:read:{ds[-1].args_hash}"
    assert OTHER != SAME
