"""cycle: a round of three or more calls repeated with the same outcomes (semantics.md
section 12, rule 5a)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detectors.rules.cycle import cycle_period
from detectors.rules.ping_pong import alternation
from detectors.state import HistoryEntry

from .scenario import SAME, call, config, decide, last, loop, result, verdict

OPEN = ("open", {"path": "a.py"})
SEARCH = ("search", {"q": "foo"})
GOTO = ("goto", {"line": 40})
FOURTH = ("grep", {"q": "bar"})


def rules(**cycles: Any) -> dict:
    doc = config(enabled=True)
    doc["loopwarden"] = {"rules": {"cycles": {"enabled": True, **cycles}}}
    return doc


ON = rules()


def rounds(n: int, *steps: tuple[str, dict], outcome: Any = SAME) -> list[dict]:
    """n laps of the steps, each call answered with the same outcome."""
    out: list[dict] = []
    for _ in range(n):
        for tool, params in steps:
            out += loop(tool, params, outcome, 1)
    return out


ABC = (OPEN, SEARCH, GOTO)

CASES = [
    ("two laps and a bit", rounds(2, *ABC) + [call(*OPEN)], ON, ("allow", "none", None, None)),
    ("three laps: the fourth is blocked", rounds(3, *ABC) + [call(*OPEN)], ON, ("block", "critical", "cycle", 10)),
    ("another call than the cycle's next", rounds(3, *ABC) + [call(*SEARCH)], ON, ("allow", "none", None, None)),
    ("a period of four", rounds(3, *ABC, FOURTH) + [call(*OPEN)], ON, ("block", "critical", "cycle", 13)),
    ("laps from the config", rounds(2, *ABC) + [call(*OPEN)], rules(laps=2), ("block", "critical", "cycle", 7)),
    (
        "periods above maxPeriod are not looked at",
        rounds(3, *ABC, FOURTH) + [call(*OPEN)],
        rules(maxPeriod=3),
        ("allow", "none", None, None),
    ),
    (
        "a period whose laps exceed the history never fires",
        rounds(3, *ABC) + [call(*OPEN)],
        config(enabled=True, historySize=8) | {"loopwarden": {"rules": {"cycles": {"enabled": True}}}},
        ("allow", "none", None, None),
    ),
    (
        "an outcome that changed in an earlier lap is progress",
        loop(*OPEN, {"content": [{"type": "text", "text": "first"}]}, 1)
        + rounds(1, SEARCH, GOTO)
        + rounds(2, *ABC)
        + [call(*OPEN)],
        ON,
        ("allow", "none", None, None),
    ),
    (
        "a record still waiting for its result is no lap",
        rounds(2, *ABC) + rounds(1, OPEN, SEARCH) + [call(*GOTO), call(*OPEN)],
        ON,
        ("allow", "none", None, None),
    ),
    (
        "a block whose calls are not all different is no cycle",
        rounds(3, OPEN, SEARCH, OPEN) + [call(*OPEN)],
        ON,
        ("allow", "none", None, None),
    ),
    ("off unless configured", rounds(3, *ABC) + [call(*OPEN)], config(enabled=True), ("allow", "none", None, None)),
]


@pytest.mark.parametrize("events, doc, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_cycle(events, doc, expected):
    assert verdict(last(events, doc)) == expected


def test_key_message_and_the_block_stays():
    ds = decide(rounds(3, *ABC) + [call(*OPEN), call(*OPEN)], ON)
    block = ds[-2]
    sigs = sorted({d.args_hash for d in ds[:3]})
    assert block.warning_key == "cycle:" + "|".join(sigs)
    assert block.paired_tool_name is None
    assert "cycle" in block.message and "open" in block.message and "(10 calls)" in block.message
    assert verdict(ds[-1]) == verdict(block)  # not recorded: the block stays in force


def test_a_result_of_the_blocked_call_does_not_change_the_cycle():
    events = rounds(3, *ABC) + [call(*OPEN), result(*OPEN, result=SAME), call(*SEARCH)]
    # The blocked call's result is recorded (as any result without a waiting call), so the
    # cycle goes on: search is now the call that repeats the block's oldest record.
    assert verdict(last(events, ON)) == ("block", "critical", "cycle", 10)


# --- ping-pong (rules 5 and 6) and cycle (5a) never fire on the same call --------------------

SIGS = ["a:1", "b:2", "c:3", "d:4"]
entries = st.builds(
    lambda i, o: HistoryEntry(SIGS[i].split(":")[0], SIGS[i], None, o),
    st.integers(0, len(SIGS) - 1),
    st.sampled_from([None, "x", "y"]),
)


@settings(max_examples=3000, deadline=None)
@given(st.lists(entries, max_size=30), st.integers(0, len(SIGS) - 1), st.integers(1, 4), st.integers(3, 8))
def test_ping_pong_and_a_cycle_never_both_fire(history, i, laps, max_period):
    history = tuple(history)
    sig = SIGS[i]
    count, _, _, _ = alternation(history, sig)
    p = cycle_period(history, sig, max_period, laps)
    assert not (count and p), (history, sig, count, p)
