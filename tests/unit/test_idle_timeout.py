"""The idle-run timeout (semantics.md section 7): event time, never the clock."""

from __future__ import annotations

import json

import pytest

from detectors import DetectionConfig, apply, decode_event, decode_state, encode_state, load_config, replay
from detectors.config import DEFAULT_IDLE_TIMEOUT_MS

HOUR = 3_600_000
CONFIG = {
    "tools": {"loopDetection": {"enabled": True, "warningThreshold": 2, "criticalThreshold": 3}},
    "loopwarden": {"runIdleTimeoutMs": HOUR},
}


def failing_reads(run: str, start_seq: int, ts: list[int | None]) -> list[dict]:
    out = []
    for i, t in enumerate(ts):
        seq = start_seq + 2 * i
        extra = {} if t is None else {"ts": t}
        out.append(
            {
                "type": "tool_call",
                "run_id": run,
                "seq": seq,
                "gateway_id": "g",
                "tool_name": "read",
                "params": {"path": "/x"},
                **extra,
            }
        )
        out.append(
            {
                "type": "tool_result",
                "run_id": run,
                "seq": seq + 1,
                "gateway_id": "g",
                "tool_name": "read",
                "params": {"path": "/x"},
                "error": "ENOENT",
                **({} if t is None else {"ts": t + 1}),
            }
        )
    return out


def actions(events: list[dict], config: dict = CONFIG) -> list[str]:
    return [d.action for d in replay([decode_event(json.dumps(e)) for e in events], DetectionConfig(config))]


def test_a_run_idle_longer_than_the_timeout_starts_over():
    t0 = 1_780_000_000_000
    before = failing_reads("r", 0, [t0, t0 + 1000, t0 + 2000, t0 + 3000])
    assert actions(before) == ["allow", "allow", "warn", "block"]
    # The last applied event is the result at t0 + 3001; one ms past the timeout starts over.
    after = failing_reads("r", 8, [t0 + 3001 + HOUR + 1])
    assert actions(before + after)[-1] == "allow"
    # Exactly the timeout is not more than it: the block stays.
    at = failing_reads("r", 8, [t0 + 3001 + HOUR])
    assert actions(before + at)[-1] == "block"


def test_events_without_ts_never_idle_out_and_keep_the_last_ts():
    t0 = 1_000
    events = failing_reads("r", 0, [t0, t0 + 1, t0 + 2, t0 + 3])
    events += failing_reads("r", 8, [None])  # no ts: judged on the run as it is
    assert actions(events)[-1] == "block"
    # The next event with a ts compares with the last ts the run applied (t0 + 4).
    assert actions(events + failing_reads("r", 10, [t0 + 4 + HOUR + 1]))[-1] == "allow"


def test_an_idle_run_forgets_its_seq_so_a_restarted_gateway_is_not_stale():
    t0 = 5_000_000
    events = failing_reads("r", 0, [t0, t0 + 1, t0 + 2, t0 + 3])
    restarted = failing_reads("r", 0, [t0 + 2 * HOUR])  # seq from 0 again, two hours later
    decisions = replay([decode_event(json.dumps(e)) for e in events + restarted], DetectionConfig(CONFIG))
    assert [d.action for d in decisions][-1] == "allow" and decisions[-1].seq == 0


def test_last_ts_survives_the_stored_state():
    ev = decode_event(json.dumps(failing_reads("r", 0, [42])[0]))
    state, _ = apply(None, ev, DetectionConfig(CONFIG))
    assert state is not None and decode_state(encode_state(state)).last_ts == 42


@pytest.mark.parametrize(
    "value, expected, warned",
    [
        (None, DEFAULT_IDLE_TIMEOUT_MS, False),
        (60_000, 60_000, False),
        (0, DEFAULT_IDLE_TIMEOUT_MS, True),
        ("1h", DEFAULT_IDLE_TIMEOUT_MS, True),
        (1.5, DEFAULT_IDLE_TIMEOUT_MS, True),
    ],
)
def test_the_timeout_config(value, expected, warned):
    doc = {} if value is None else {"loopwarden": {"runIdleTimeoutMs": value}}
    c = load_config(json.dumps(doc))
    assert c.idle_timeout_ms == expected
    assert any("runIdleTimeoutMs" in w for w in c.warnings) == warned


def test_the_timeout_is_part_of_the_config_hash():
    a = DetectionConfig({"loopwarden": {"runIdleTimeoutMs": HOUR}})
    b = DetectionConfig({})
    assert a.for_agent(None).config_hash != b.for_agent(None).config_hash
