"""Invariants of the fold, as named predicates checked on generated event streams."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detectors import (
    DetectionConfig,
    StaleSeqError,
    apply,
    decode_event,
    decode_state,
    encode,
    encode_state,
    fingerprint,
    replay,
)
from detectors.state import ANSWER_CHUNK, MAX_WARNING_KEYS, REMEMBERED_DECISIONS, remembered, settled
from tests.events import SMALL_CONFIG, interleaved, lines, per_run, runs

CONFIG = DetectionConfig(SMALL_CONFIG)


def decide(raw_lines, config=CONFIG) -> list[bytes]:
    return [encode(d) for d in replay([decode_event(x) for x in raw_lines], config)]


@settings(max_examples=150, deadline=None)
@given(runs())
def test_replay_is_deterministic(per):
    stream = lines([e for evs in per.values() for e in evs])
    assert decide(stream) == decide(stream)


@settings(max_examples=150, deadline=None)
@given(runs(max_runs=1, max_steps=60), st.data())
def test_snapshot_and_resume_gives_the_same_decisions(per, data):
    events = [decode_event(x) for x in lines(next(iter(per.values())))]
    cut = data.draw(st.integers(0, len(events)))
    whole = [encode(d) for d in replay(events, CONFIG)]
    state, got = None, []
    for i, ev in enumerate(events):
        if i == cut and state is not None:
            state = decode_state(encode_state(state))  # what the Faust table stores
        state, ds = apply(state, ev, CONFIG)
        got.extend(encode(d) for d in ds)
    assert got == whole


@settings(max_examples=150, deadline=None)
@given(runs())
def test_privacy_mode_equals_raw_mode(per):
    raw = lines([e for evs in per.values() for e in evs])
    private = [encode(fingerprint(decode_event(x))) for x in raw]
    assert all(b'"params"' not in p and b'"result"' not in p and b'"error"' not in p for p in private)
    assert decide(private) == decide(raw)


@settings(max_examples=150, deadline=None)
@given(runs(max_runs=1, max_steps=50), st.data())
def test_duplicated_events_change_nothing(per, data):
    events = next(iter(per.values()))
    if any(e["type"] == "run_end" for e in events):
        events = events[: next(i for i, e in enumerate(events) if e["type"] == "run_end")]
    original = decide(lines(events))
    by_seq = {json.loads(d)["seq"]: d for d in original}
    # Re-deliver some already-applied events right after later ones.
    # A duplicate tool_call is answered again while its run still remembers the answer
    # (the last REMEMBERED_DECISIONS of its tool_call decisions), else it is stale.
    noisy, dups, answered = [], [], []
    for i, e in enumerate(events):
        noisy.append(e)
        if e["type"] == "tool_call" and e["seq"] in by_seq:
            answered.append(e["seq"])
        if i and data.draw(st.booleans()):
            j = data.draw(st.integers(0, i))
            noisy.append(events[j])
            if events[j]["type"] == "tool_call" and events[j]["seq"] in answered[-REMEMBERED_DECISIONS:]:
                dups.append(events[j])
    got = decide(lines(noisy))
    fresh, repeated = [], []
    seen: set[int] = set()
    for d in got:
        seq = json.loads(d)["seq"]
        (repeated if seq in seen else fresh).append(d)
        seen.add(seq)
    assert fresh == original
    assert all(d == by_seq[json.loads(d)["seq"]] for d in repeated)
    assert len(repeated) == len(dups)


@settings(max_examples=150, deadline=None)
@given(runs(max_runs=4, max_steps=30), st.data())
def test_interleaving_runs_keeps_per_run_decisions(per, data):
    mixed = data.draw(interleaved(per))
    together = per_run(decide(lines(mixed)))
    for run, evs in per.items():
        assert together.get(run, []) == decide(lines(evs))


def test_stale_tool_call_that_was_never_applied_is_rejected():
    def ev(seq, t="tool_call"):
        return decode_event(
            json.dumps({"type": t, "run_id": "r", "seq": seq, "gateway_id": "g", "tool_name": "read", "result": {}})
        )

    state, _ = apply(None, ev(0), CONFIG)
    state, _ = apply(state, ev(1, "tool_result"), CONFIG)
    try:
        apply(state, ev(1), CONFIG)
    except StaleSeqError as exc:
        assert "seq 1" in str(exc)
    else:
        raise AssertionError("a stale tool_call at a result's seq must be rejected")
    again, ds = apply(state, ev(0), CONFIG)
    assert again is state and ds[0].seq == 0


def test_state_is_bounded_by_the_config():
    # Each of 300 different calls made three times: the third is warned (generic repeat,
    # warningThreshold 2), under a key of its own, so the run remembers more keys than it
    # may. Then the first call again: its key was forgotten, so it is warned again.
    n_keys = MAX_WARNING_KEYS + 44
    events = [
        decode_event(
            json.dumps(
                {
                    "type": "tool_call",
                    "run_id": "r",
                    "seq": seq,
                    "gateway_id": "g",
                    "tool_name": "read",
                    "params": {"n": k},
                }
            )
        )
        for seq, k in enumerate([k for k in range(n_keys) for _ in range(3)] + [0, 0, 0])
    ]
    state, decisions = None, []
    for i, ev in enumerate(events):
        if i % 97 == 0 and state is not None:
            state = decode_state(encode_state(state))  # what the worker's table stores
        state, ds = apply(state, ev, CONFIG)
        decisions.extend(ds)
    warned = [d for d in decisions if d.action == "warn"]
    assert [(d.detector, d.seq) for d in warned] == [("generic_repeat", 3 * k + 2) for k in range(n_keys + 1)]
    assert len(state.warned) == MAX_WARNING_KEYS  # at the bound, not under it
    # the oldest keys went first: keys 1..44 are forgotten, 45.. and 0 (warned again) remain
    keys = {d.seq: d.warning_key for d in warned}
    assert set(state.warned) == {keys[3 * k + 2] for k in range(45, n_keys)} | {keys[3 * n_keys + 2]}
    assert len(state.history) == 8
    assert len(remembered(state)) == REMEMBERED_DECISIONS
    assert [encode(d) for d in decisions] == [encode(d) for d in replay(events, CONFIG)]


def _call(seq: int, params: dict):
    event = {"type": "tool_call", "run_id": "r", "seq": seq, "gateway_id": "g", "tool_name": "t", "params": params}
    return decode_event(json.dumps(event))


def test_a_duplicate_call_is_answered_while_among_the_last_remembered_and_stale_after():
    # Every call of a run is answered again while it is one of the run's last
    # REMEMBERED_DECISIONS calls, and is stale after, whatever the state went through
    # (the newest answers are kept apart until ANSWER_CHUNK of them: every phase of that
    # is crossed here, with and without a trip through the stored form).
    n = REMEMBERED_DECISIONS + 2 * ANSWER_CHUNK + 3
    events = [_call(i, {"i": i}) for i in range(n)]
    first = {d.seq: encode(d) for d in replay(events, CONFIG)}
    for stored in (False, True):
        state = None
        for i, ev in enumerate(events):
            state, _ = apply(state, ev, CONFIG)
            if stored:
                state = decode_state(encode_state(state))
            assert len(remembered(state)) == min(i + 1, REMEMBERED_DECISIONS)
            for j in range(i + 1):
                if i - j < REMEMBERED_DECISIONS:
                    again, ds = apply(state, events[j], CONFIG)
                    assert again is state and [encode(d) for d in ds] == [first[j]]
                else:
                    with pytest.raises(StaleSeqError):
                        apply(state, events[j], CONFIG)


def test_the_stored_form_keeps_no_recent_answers_and_reads_back_the_same():
    state = None
    for i in range(ANSWER_CHUNK + 5):
        state, _ = apply(state, _call(i, {}), CONFIG)
    assert state.recent_answers  # 5 answers kept apart
    back = decode_state(encode_state(state))
    assert back.recent_answers == () and back == settled(state) and remembered(back) == remembered(state)
    # A reader that knows no `recent_answers` (an older worker) reads every remembered answer.
    fields = msgspec.msgpack.decode(encode_state(state))
    assert fields["recent_answers"] == [] and len(fields["answers"]) == ANSWER_CHUNK + 5
