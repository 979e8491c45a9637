"""A fleet spend cap's pause through the hooks, on a real broker: `loopwarden hooks serve`
as a process, a real worker whose config has the cap (`loopwarden.fleet.spendCaps`), and
each hook (the Python hook and the fast hook) as a process.

The cap's `spend_cap` record is published to the fleet topic as the spend stage publishes
it when the cap is reached (wire-format.md "Fleet signals and alerts"; its window covers
the calls' ts), and the worker applies it as any fleet signal. Per runtime: the session's
call before it runs; the call after it is paused, answered in the runtime's form (the
deny with the pause's message, and `continue: false` with it as `stopReason` where the
call hook can stop the turn: Claude Code, Gemini CLI); then the operator's lift (the same
record with an earlier `until_ts`, semantics.md section 11 "Lifting"), and the same
session's next call, a later turn, is judged again by the worker and runs: the sidecar
treated the session as neither ended nor aborted."""

from __future__ import annotations

import json
import time
import uuid

import msgspec
import pytest

from detectors.config import load_config
from detectors.fleet import SpendCapSignal, encode_fleet_record
from detectors.policy import spend_cap_message
from detectors.wire import ToolCall
from streams.hooks.runtimes import PAUSE, RUNTIMES, answer
from tests.integration.harness import produce, sidecar_stack, wait_until
from tests.integration.test_hooks import RESULT_EVENT, published, run_hook, session_events
from tests.unit.test_hooks_payloads import PAYLOADS

pytestmark = pytest.mark.integration

CAP = "monthly-calls"
WINDOW_MS = 30 * 86_400_000  # a window far wider than the test, so its calls fall in one
CONFIG = {
    "tools": {"loopDetection": {"enabled": True}},
    # never reached by these calls: the record below is what reaches it
    "loopwarden": {"fleet": {"spendCaps": [{"id": CAP, "per": "agent", "windowMs": WINDOW_MS, "toolCalls": 1000}]}},
}


@pytest.fixture(scope="module")
def stack(bootstrap, tmp_path_factory):
    yield from sidecar_stack(bootstrap, tmp_path_factory.mktemp("hooks-pause"), CONFIG, "gw-pause")


def publish_signal(bootstrap: str, s, w, rec: SpendCapSignal) -> None:
    """The record on the fleet topic (keyed by its id), and until the worker has taken it."""
    before = w.metric("loopwarden_fleet_records_read")
    produce(bootstrap, s.fleet_topic, [(rec.id.encode(), encode_fleet_record(rec))])
    wait_until(
        lambda: w.metric("loopwarden_fleet_records_read") > before,
        30,
        lambda: f"the worker to read {rec.id}\n{w.tail()}",
    )


@pytest.mark.parametrize("runtime", list(RUNTIMES))
def test_a_pause_stops_the_turn_and_the_sessions_next_call_after_the_lift_runs(bootstrap, stack, hook, runtime):
    s, w, side = stack
    rt, make = RUNTIMES[runtime], PAYLOADS[runtime]
    agent = f"pause-{runtime}-{uuid.uuid4().hex[:8]}"  # the cap's key: this test's agent alone
    session = f"session-{agent}"

    def call(i: int) -> str:
        extra = {"tool_use_id": f"call-{i}"} if runtime != "gemini-cli" else {}
        payload = make(rt.call_event, session, tool_input={"command": f"make step{i}"}, transcript_path=None, **extra)
        code, out, err = run_hook(hook, side, runtime, rt.call_event, payload, "--agent-id", agent)
        assert code == 0 and "Traceback" not in err, err
        return out

    def result(i: int) -> str:
        extra = {"tool_use_id": f"call-{i}"} if runtime != "gemini-cli" else {}
        ev = RESULT_EVENT[runtime]
        payload = make(ev, session, tool_input={"command": f"make step{i}"}, transcript_path=None, **extra)
        code, out, err = run_hook(hook, side, runtime, ev, payload, "--agent-id", agent)
        assert code == 0, err
        return out

    assert call(0) == "" and result(0) == ""  # before the cap: the call runs
    now = int(time.time() * 1000)
    start = now // WINDOW_MS * WINDOW_MS
    reached = SpendCapSignal(
        id=f"{CAP}:{agent}:{start}",
        cap=CAP,
        key=agent,
        window_start=start,
        window_end=start + WINDOW_MS,
        from_ts=now,
        until_ts=start + WINDOW_MS,
        unit="calls",
        used=1000,
        ceiling=1000,
    )
    publish_signal(bootstrap, s, w, reached)

    paused = call(1)
    decisions = wait_until(lambda: (ds := published(bootstrap, s.decisions_topic, session))[1:] and ds, 20, "decisions")
    d = decisions[1]
    assert (d["action"], d["level"], d["detector"]) == ("abort", "critical", "fleet_spend_cap")
    assert (d["fleet_signal"], d["count"], d["warning_key"]) == (reached.id, 1000, f"spend:{CAP}:calls")
    (cap,) = load_config(json.dumps(CONFIG)).spend_caps
    assert d["message"] == spend_cap_message(cap, reached)  # the cap, the key, used of the ceiling, the window's end
    # the runtime's form: the deny with the pause's message, and the turn stopped where the call hook can
    assert paused == answer(runtime, rt.call_event, PAUSE, d["message"])
    got, text = json.loads(paused), f"loopwarden: {d['message']}"
    if runtime == "gemini-cli":
        assert (got["decision"], got["reason"]) == ("deny", text)
    else:
        deny = got["hookSpecificOutput"]
        assert (deny["permissionDecision"], deny["permissionDecisionReason"]) == ("deny", text)
    if runtime == "codex":  # Codex refuses continue/stopReason on PreToolUse: the deny alone
        assert "continue" not in got and "stopReason" not in got
    else:
        assert (got["continue"], got["stopReason"]) == (False, text)

    # the operator's lift: the same record, ending now (after the paused call)
    publish_signal(bootstrap, s, w, msgspec.structs.replace(reached, until_ts=int(time.time() * 1000)))
    # the same session's next call (a later turn): judged again by the worker, and run
    assert call(2) == "" and result(2) == ""
    events = session_events(bootstrap, s.events_topic, session, 5)
    assert [type(e).__name__ for e in events] == ["ToolCall", "ToolResult", "ToolCall", "ToolCall", "ToolResult"]
    assert {e.agent_id for e in events} == {agent}
    calls = [e for e in events if isinstance(e, ToolCall)]
    decisions = wait_until(lambda: len(ds := published(bootstrap, s.decisions_topic, session)) >= 3 and ds, 20, "3")
    assert [(x["action"], x["detector"], x["fleet_signal"]) for x in decisions] == [
        ("allow", None, None),
        ("abort", "fleet_spend_cap", reached.id),
        ("allow", None, None),
    ]
    assert [x["event_id"] for x in decisions] == [f"{e.run_id}:{e.seq}" for e in calls]
    assert side.health()["answer_pause"] >= 1
