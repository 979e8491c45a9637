"""failure_repeat: the same call failing the same way, retried (semantics.md section 12, rule 2a)."""

from __future__ import annotations

import json

import msgspec
import pytest

from detectors import fingerprint
from detectors.wire import decode_event

from .scenario import OTHER, SAME, agent, call, config, decide, last, loop, result, verdict

EDIT = {"path": "a.py", "old": "retrun", "new": "return"}
ERR = "error:old text not found"


def rules(**failure_repeat: object) -> dict:
    doc = config(enabled=True)
    doc["loopwarden"] = {"rules": {"failureRepeat": {"enabled": True, **failure_repeat}}}
    return doc


ON = rules()
FAILED = {"content": [{"type": "text", "text": "exit 1"}]}

CASES = [
    ("one below consecutive", loop("edit", EDIT, ERR, 2) + [call("edit", EDIT)], ON, ("allow", "none", None, None)),
    (
        "at consecutive",
        loop("edit", EDIT, ERR, 3) + [call("edit", EDIT)],
        ON,
        ("block", "critical", "failure_repeat", 3),
    ),
    (
        "the block stays while the call repeats (a blocked call is not recorded)",
        loop("edit", EDIT, ERR, 3) + [call("edit", EDIT)] * 4,
        ON,
        ("block", "critical", "failure_repeat", 3),
    ),
    (
        "consecutive from the config",
        loop("edit", EDIT, ERR, 5) + [call("edit", EDIT)],
        rules(consecutive=6),
        ("allow", "none", None, None),
    ),
    (
        "another call in between ends the failure run",
        loop("edit", EDIT, ERR, 2)
        + loop("read", {"path": "a.py"}, SAME, 1)
        + loop("edit", EDIT, ERR, 2)
        + [call("edit", EDIT)],
        ON,
        ("allow", "none", None, None),
    ),
    (
        "a different error ends it",
        loop("edit", EDIT, "error:permission denied", 1) + loop("edit", EDIT, ERR, 2) + [call("edit", EDIT)],
        ON,
        ("allow", "none", None, None),
    ),
    (
        "the same output without an error is not a failure",
        loop("edit", EDIT, FAILED, 3) + [call("edit", EDIT)],
        ON,
        ("allow", "none", None, None),
    ),
    (
        "a result marked failed is a failure",
        [e for _ in range(3) for e in (call("edit", EDIT), result("edit", EDIT, result=FAILED, failed=True))]
        + [call("edit", EDIT)],
        ON,
        ("block", "critical", "failure_repeat", 3),
    ),
    (
        "a call still waiting for its result ends the run",
        loop("edit", EDIT, ERR, 2) + [call("edit", EDIT), call("edit", EDIT)],
        ON,
        ("allow", "none", None, None),
    ),
    (
        "other arguments are another call",
        loop("edit", EDIT, ERR, 3) + [call("edit", {**EDIT, "old": "retrun x"})],
        ON,
        ("allow", "none", None, None),
    ),
    (
        "an unknown tool is unknown_tool_repeat's, not a failure repeat",
        loop("web_search", {"q": "x"}, "error:Unknown tool: web_search", 3) + [call("web_search", {"q": "x"})],
        ON,
        ("allow", "none", None, None),
    ),
    (
        "off unless configured",
        loop("edit", EDIT, ERR, 3) + [call("edit", EDIT)],
        config(enabled=True),
        ("allow", "none", None, None),
    ),
    (
        "off while enabled is unset",
        loop("edit", EDIT, ERR, 3) + [call("edit", EDIT)],
        {"loopwarden": {"rules": {"failureRepeat": {"enabled": True}}}},
        ("allow", "none", None, None),
    ),
    (
        "the global circuit breaker (rule 2) comes first",
        loop("edit", EDIT, ERR, 30) + [call("edit", EDIT)],  # the blocked calls' results are recorded
        rules(consecutive=3),
        ("block", "critical", "global_circuit_breaker", 30),
    ),
    (
        "on for one agent only",
        loop("edit", EDIT, ERR, 3, agent="b") + [call("edit", EDIT, agent="b")],
        {
            "tools": {"loopDetection": {"enabled": True}},
            "agents": {
                "list": [agent("a"), {"id": "b", "loopwarden": {"rules": {"failureRepeat": {"enabled": True}}}}]
            },
        },
        ("block", "critical", "failure_repeat", 3),
    ),
]


@pytest.mark.parametrize("events, doc, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_failure_repeat(events, doc, expected):
    assert verdict(last(events, doc)) == expected


def test_after_another_call_section_4_judges_the_call_again():
    events = loop("edit", EDIT, ERR, 3) + [call("edit", EDIT)] + loop("read", {"path": "a.py"}, OTHER, 1)
    events += [call("edit", EDIT)]
    doc = rules()
    doc["tools"]["loopDetection"].update(warningThreshold=3, criticalThreshold=6)
    ds = decide(events, doc)
    assert [verdict(d) for d in ds] == [
        ("allow", "none", None, None),
        ("allow", "none", None, None),
        ("allow", "none", None, None),
        ("block", "critical", "failure_repeat", 3),
        ("allow", "none", None, None),
        ("warn", "warning", "ping_pong", 3),  # no failure run now: section 4 judges it (edit, read, edit)
    ]


def test_key_and_message():
    ds = decide(loop("edit", EDIT, ERR, 3) + [call("edit", EDIT)], ON)
    block = ds[-1]
    ev = decode_event(
        b'{"type":"tool_result","run_id":"r","seq":1,"gateway_id":"g","tool_name":"edit",'
        b'"params":{"path":"a.py","old":"retrun","new":"return"},"error":"old text not found"}'
    )
    outcome = fingerprint(ev).result_hash
    assert outcome.startswith("error:")
    assert block.warning_key == f"failure:edit:{block.args_hash}:{outcome}"
    assert block.paired_tool_name is None
    assert block.message == (
        "Blocked: edit failed 3 times in a row with identical arguments and the same error. "
        "Retrying it unchanged will fail again: change the arguments or the approach."
    )


def test_privacy_mode_decides_the_same():
    events = loop("edit", EDIT, ERR, 3) + [call("edit", EDIT)]
    hashed = []
    for seq, ev in enumerate(events):
        full = {"run_id": "r", "seq": seq, "gateway_id": "gw", **ev}
        full.setdefault("tool_call_id", f"r-c{seq if ev['type'] == 'tool_call' else seq - 1}")
        hashed.append(json.loads(msgspec.json.encode(fingerprint(decode_event(json.dumps(full))))))
    assert all("error" not in e and "params" not in e for e in hashed)
    assert [verdict(d) for d in decide(hashed, ON)] == [verdict(d) for d in decide(events, ON)]
