"""A run's history keys (`RunState.history_keys`): a filter that lets the engine skip the
repeat scan for a call new to the history. It must never change a decision: not when
two signatures share a key, not for a state written before the keys were kept."""

from __future__ import annotations

import msgspec

from detectors import DetectionConfig, apply, decode_event, decode_state, encode_state
from detectors.fingerprint import call_key
from detectors.rules import CallScan
from detectors.state import EMPTY, KEY_CHARS, RunState, history_key, keys_of
from detectors.wire import ToolCall
from streams.tools.trace import CONFIG, generate

WARN_AT_3 = DetectionConfig(
    {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 3, "criticalThreshold": 6}}}
)


def _calls(run: str, hashes: list[str]) -> list:
    """Privacy-form calls (the gateway computed args_hash), each followed by its result."""
    out = []
    for i, h in enumerate(hashes):
        out.append(
            decode_event(
                msgspec.json.encode(
                    {
                        "type": "tool_call",
                        "run_id": run,
                        "seq": 2 * i,
                        "gateway_id": "g",
                        "tool_name": "read",
                        "args_hash": h,
                    }
                )
            )
        )
        out.append(
            decode_event(
                msgspec.json.encode(
                    {
                        "type": "tool_result",
                        "run_id": run,
                        "seq": 2 * i + 1,
                        "gateway_id": "g",
                        "tool_name": "read",
                        "args_hash": h,
                        "result_hash": f"out-{i}",  # progress each time: only the repeat count grows
                    }
                )
            )
        )
    return out


def _scan_fields(scan: CallScan) -> tuple:
    return (scan.seen, scan.repeats, scan.no_progress, scan.latest, scan.unknown_streak, scan.missing)


def _check_every_call(events: list, config: DetectionConfig) -> list[str]:
    """Apply the events; before each call, the scan the engine makes (skipping the
    repeat scan when the call's key is not in the history keys) must equal a full scan,
    and the keys must be those of the history. Returns the calls' actions."""
    states: dict[str, RunState | None] = {}
    actions = []
    for ev in events:
        state = states.get(ev.run_id) or EMPTY
        if isinstance(ev, ToolCall):
            tool, sig = call_key(ev)
            keys = keys_of(state)
            assert keys == "".join(history_key(r.args_hash) for r in state.history)
            fast = CallScan(state.history, tool, sig, False, history_key(sig) not in keys)
            assert _scan_fields(fast) == _scan_fields(CallScan(state.history, tool, sig, False))
        new, decisions = apply(states.get(ev.run_id), ev, config)
        actions += [d.action for d in decisions]
        states[ev.run_id] = new
        if new is not None:
            assert len(new.history_keys) == KEY_CHARS * len(new.history)
    return actions


def test_the_filter_never_changes_a_scan_through_a_long_trace():
    _check_every_call([decode_event(line) for line in generate(30_000)], DetectionConfig(CONFIG))


def test_signatures_sharing_a_key_are_still_counted_apart():
    a, b = "read:" + "a" * 60 + "beef", "read:" + "b" * 60 + "beef"
    assert history_key(a) == history_key(b)
    actions = _check_every_call(_calls("r", [a, b, a, b, a, a, a]), WARN_AT_3)
    # What the engine decided before the keys existed (05de7df): a ping-pong warning at
    # the third call, and a repeat warning when a comes a fifth time.
    assert actions == ["allow", "allow", "warn", "allow", "allow", "warn", "allow"]


def test_a_short_args_hash_is_keyed_too():
    assert history_key("x") == "\0\0\0x"
    actions = _check_every_call(_calls("r", ["x"] * 5), WARN_AT_3)
    assert actions == ["allow", "allow", "allow", "warn", "allow"]  # as at 05de7df


def test_a_state_written_without_keys_decides_the_same():
    """A changelog record from before the keys were kept decodes with none: the engine
    rebuilds them, and every later decision is the one a state with keys gives."""
    config = DetectionConfig(CONFIG)
    events = [decode_event(line) for line in generate(6_000)]
    with_keys: dict[str, RunState | None] = {}
    without: dict[str, RunState | None] = {}
    for ev in events:
        s1, d1 = apply(with_keys.get(ev.run_id), ev, config)
        old = without.get(ev.run_id)
        if old is not None:  # as an older worker wrote it: no history_keys field at all
            fields = msgspec.msgpack.decode(encode_state(old))
            del fields["history_keys"]
            old = decode_state(msgspec.msgpack.encode(fields))
            assert old.history_keys == "" and keys_of(old) == keys_of(with_keys[ev.run_id] or EMPTY)
        s2, d2 = apply(old, ev, config)
        assert d1 == d2
        with_keys[ev.run_id], without[ev.run_id] = s1, s2
