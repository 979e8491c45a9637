"""The gateway client without a broker: how it numbers events (a restarted gateway
continues above what it sent before), events too large to send, and connection settings
it refuses. A fake producer stands in for Kafka and answers like a worker would (the
engine's `apply`); the real broker and worker are in tests/integration/test_client.py."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time

import msgspec
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import MessageSizeTooLargeError

from detectors.config import DetectionConfig, load_config
from detectors.engine import apply
from detectors.errors import DecodeError, LoopwardenError, StaleSeqError
from detectors.fleet import FleetView
from detectors.spend import SpendFold
from detectors.wire import MAX_SAFE_INTEGER, Decision, ToolCall, decode_event, encode
from streams.gateway import client as client_mod
from streams.gateway.client import MAX_REQUEST_SIZE, EventTooLarge, GatewayClient, as_executed, usage_amounts
from streams.kafka import settings as settings_mod
from streams.kafka.errors import BrokerError, SettingsError
from streams.tools.localkafka import free_port

CONFIG = load_config(
    json.dumps({"tools": {"loopDetection": {"enabled": True, "warningThreshold": 3, "criticalThreshold": 5}}})
)
MiB = 1 << 20


class FakeWorker:
    """Run states and the events it got, shared by the clients of one test (as a worker's
    are); it decides by `config`, against the stop orders and breakers of `fleet`."""

    def __init__(self, config: DetectionConfig = CONFIG, fleet: FleetView | None = None) -> None:
        self.config = config
        self.fleet = fleet
        self.states: dict = {}
        self.events: list = []
        self.decisions: list = []
        self.stale = 0


class FakeProducer:
    """Takes the client's events and answers each tool_call as a worker would, on the loop."""

    def __init__(self, client: GatewayClient, worker: FakeWorker) -> None:
        self.client = client
        self.worker = worker
        self.sent: list[tuple[str, bytes, bytes]] = []

    async def send(self, topic: str, key: bytes, value: bytes):
        self.sent.append((topic, key, value))
        ev = decode_event(value)
        self.worker.events.append(ev)
        try:
            state, decisions = apply(self.worker.states.get(ev.run_id), ev, self.worker.config, self.worker.fleet)
        except StaleSeqError:
            self.worker.stale += 1  # dead-lettered: no answer
            return
        if state is None:
            self.worker.states.pop(ev.run_id, None)
        else:
            self.worker.states[ev.run_id] = state
        loop = asyncio.get_running_loop()
        self.worker.decisions.extend(decisions)
        for d in decisions:
            loop.call_soon(self.client._deliver, encode(d))


def offline(gateway_id: str, worker: FakeWorker, **kw) -> GatewayClient:
    c = GatewayClient("127.0.0.1:1", gateway_id=gateway_id, timeout_s=kw.pop("timeout_s", 1.0), **kw)
    c._producer = FakeProducer(c, worker)  # type: ignore[assignment]
    return c


async def calls(c: GatewayClient, run: str, n: int, start: int = 0) -> list:
    out = []
    for i in range(start, start + n):
        d = await c.check(run, "exec", {"command": "make"}, tool_call_id=f"call-{i}")
        out.append(d)
        if d.action != "block":
            await c.result(
                run,
                "exec",
                {"command": "make"},
                tool_call_id=f"call-{i}",
                result={"details": {"status": "failed", "exitCode": 2}},
            )
    return out


def decision(run_id: str, gateway_id: str, action: str, **kw) -> Decision:
    """A decision as a worker would publish it for a call of `run_id`, seq 1."""
    fields = dict(tool_call_id=None, tool_name="exec", ts=None, level="none", detector=None, count=None, message=None)
    fields |= dict(warning_key=None, paired_tool_name=None, args_hash=None, config_hash="h")
    return Decision(
        run_id=run_id, seq=1, gateway_id=gateway_id, agent_id=None, event_id=f"{run_id}:1", action=action, **fields | kw
    )


# --- seq -------------------------------------------------------------------------------


def test_seq_is_the_clock_in_microseconds_and_strictly_increasing_across_runs(monkeypatch):
    now = [1_700_000_000_000_000]
    monkeypatch.setattr(client_mod, "_now_us", lambda: now[0])
    c = GatewayClient("127.0.0.1:1", gateway_id="gw")
    assert c._next_seq() == now[0]
    assert [c._next_seq() for _ in range(3)] == [now[0] + 1, now[0] + 2, now[0] + 3]  # faster than the clock
    now[0] += 1000
    assert c._next_seq() == now[0]  # back on the clock
    now[0] -= 10_000  # the clock steps back: still above what this client issued
    assert c._next_seq() == now[0] + 10_000 + 1


def test_the_real_clock_gives_seqs_within_the_wire_limit():
    c = GatewayClient("127.0.0.1:1", gateway_id="gw")
    a, b = c._next_seq(), c._next_seq()
    assert 1_600_000_000_000_000 < a < b <= MAX_SAFE_INTEGER


def test_a_clock_past_the_limit_is_refused_not_sent(monkeypatch):
    monkeypatch.setattr(client_mod, "_now_us", lambda: MAX_SAFE_INTEGER + 1)
    with pytest.raises(LoopwardenError, match="2\\^53"):
        GatewayClient("127.0.0.1:1", gateway_id="gw")._next_seq()


def test_a_restarted_gateway_continues_its_run_and_every_check_gets_its_own_decision():
    worker = FakeWorker()

    async def main():
        first = offline("gw-1", worker)
        before = await calls(first, "run-1", 3)
        second = offline("gw-1", worker)  # the gateway restarted: a new client, same ids
        after = await calls(second, "run-1", 4, start=3)
        return first, second, before, after

    first, second, before, after = asyncio.run(main())
    assert worker.stale == 0 and first.degraded == second.degraded == 0
    # The run went on where it was: 3 calls allowed, the 4th repeat warns, the 6th blocks.
    assert [d.action for d in before + after] == ["allow", "allow", "allow", "warn", "allow", "block", "block"]
    seqs = [ev.seq for ev in worker.events]
    assert seqs == sorted(set(seqs))  # strictly increasing over both clients
    calls_sent = [ev for ev in worker.events if isinstance(ev, ToolCall)]
    for d, ev in zip(before + after, calls_sent, strict=True):
        assert (d.seq, d.event_id, d.tool_call_id) == (ev.seq, f"run-1:{ev.seq}", ev.tool_call_id)


def test_a_run_id_used_again_after_end_run_is_answered_not_taken_for_a_duplicate(monkeypatch):
    # With one clock reading for everything, the counter alone keeps seqs (and event ids) apart.
    monkeypatch.setattr(client_mod, "_now_us", lambda: 1_700_000_000_000_000)
    worker = FakeWorker()

    async def main():
        c = offline("gw-1", worker)
        a = await c.check("run-x", "read", {"p": 1})
        await c.end_run("run-x")
        b = await c.check("run-x", "read", {"p": 1})
        return c, a, b

    c, a, b = asyncio.run(main())
    assert not a.degraded and not b.degraded and c.duplicates == 0
    assert a.event_id != b.event_id and b.seq > a.seq


def test_check_resolves_by_run_and_seq_and_forgets_what_it_waited_for():
    worker = FakeWorker()

    async def main():
        c = offline("gw-1", worker)
        ds = await asyncio.gather(*(c.check(f"run-{i % 3}", "read", {"p": i}, tool_call_id=str(i)) for i in range(9)))
        return c, ds

    c, ds = asyncio.run(main())
    assert [d.tool_call_id for d in ds] == [str(i) for i in range(9)]
    assert [d.run_id for d in ds] == [f"run-{i % 3}" for i in range(9)]
    assert not any(d.degraded for d in ds) and c._waiting == {}


class Silent(FakeProducer):
    """A worker that never answers."""

    async def send(self, topic, key, value):
        self.sent.append((topic, key, value))


def test_a_timeout_forgets_the_future_and_answers_by_the_policy():
    async def main():
        c = GatewayClient("127.0.0.1:1", gateway_id="gw", timeout_s=0.05, policy="fail-closed")
        c._producer = Silent(c, FakeWorker())  # type: ignore[assignment]
        return c, await c.check("r", "read", {"p": 1})

    c, d = asyncio.run(main())
    assert d.degraded and d.action == "block" and c._waiting == {} and c.degraded == 1
    assert d.event_id == f"r:{d.seq}" and d.seq == decode_event(c._producer.sent[0][2]).seq


# --- events too large -------------------------------------------------------------------


def test_params_too_large_raise_event_too_large_before_anything_is_sent():
    worker = FakeWorker()

    async def main():
        c = offline("gw-1", worker, privacy=False)
        with pytest.raises(EventTooLarge) as call:
            await c.check("run-big", "write_file", {"content": "x" * (2 * MiB)})
        with pytest.raises(EventTooLarge) as res:
            await c.result("run-big", "read_file", {"path": "a"}, result={"content": "y" * (3 * MiB)})
        return c, call.value, res.value

    c, call, res = asyncio.run(main())
    assert c._producer.sent == [] and c._waiting == {}
    for e, tool in ((call, "write_file"), (res, "read_file")):
        msg = str(e)
        assert isinstance(e, LoopwardenError)
        assert "'run-big'" in msg and f"'{tool}'" in msg and str(e.size) in msg and str(MiB) in msg, msg
        assert "privacy" in msg and "nothing was sent" in msg, msg
        assert e.size > 2 * MiB and e.limit == MiB and (e.run_id, e.tool_name) == ("run-big", tool)


def test_privacy_mode_sends_the_same_call_as_hashes():
    worker = FakeWorker()

    async def main():
        c = offline("gw-1", worker, privacy=True)
        return c, await c.check("run-big", "write_file", {"content": "x" * (2 * MiB)})

    c, d = asyncio.run(main())
    assert not d.degraded and len(c._producer.sent[0][2]) < 1000


def test_the_limit_is_what_one_produce_request_can_carry_and_aiokafka_agrees():
    """Under the worker's 1 MiB, the record headers and the key still have to fit in one
    request: the largest event the client lets through passes aiokafka's own check, one
    byte more is EventTooLarge naming max_request_size."""

    def tool_call(params_len: int) -> ToolCall:
        return ToolCall(run_id="run-edge", seq=1, gateway_id="gw", tool_name="t", params="x" * params_len)

    c = GatewayClient("127.0.0.1:1", gateway_id="gw", privacy=False)
    base = len(encode(tool_call(0)))
    lo, hi = 0, MiB  # the largest params length that passes
    while lo < hi:
        mid = (lo + hi + 1) // 2
        try:
            c._encode(tool_call(mid))
            lo = mid
        except EventTooLarge:
            hi = mid - 1
    key, value = c._encode(tool_call(lo))
    assert MiB - 200 < len(value) < MiB and len(value) == base + lo
    with pytest.raises(EventTooLarge, match=f"max_request_size {MAX_REQUEST_SIZE}") as over:
        c._encode(tool_call(lo + 1))
    assert over.value.limit == len(value)

    async def aiokafka_check():
        p = AIOKafkaProducer(bootstrap_servers="127.0.0.1:1", max_request_size=MAX_REQUEST_SIZE)
        p._serialize(key, value, [])  # what the producer checks in send()
        with pytest.raises(MessageSizeTooLargeError):
            p._serialize(key, encode(tool_call(lo + 1)), [])

    asyncio.run(aiokafka_check())


def test_the_worker_limit_applies_when_it_is_the_smaller():
    s = settings_mod.build({"bootstrap": "127.0.0.1:1", "max_event_bytes": 1000}, env={})
    c = GatewayClient(settings=s, gateway_id="gw", privacy=False)
    with pytest.raises(EventTooLarge, match="max_event_bytes") as e:
        c._encode(ToolCall(run_id="r", seq=1, gateway_id="gw", tool_name="t", params="x" * 1000))
    assert e.value.limit == 1000


# --- connecting ---------------------------------------------------------------------------


def test_an_unreachable_broker_is_a_broker_error_naming_the_address():
    addr = f"127.0.0.1:{free_port()}"

    async def main():
        async with GatewayClient(addr, gateway_id="gw"):
            pass

    with pytest.raises(BrokerError, match=f"cannot reach Kafka at {addr}"):
        asyncio.run(main())


def test_sasl_without_credentials_or_an_unreadable_ca_is_a_settings_error(tmp_path):
    async def enter(**flags):
        s = settings_mod.build({"bootstrap": "127.0.0.1:1", **flags}, env={})
        async with GatewayClient(settings=s, gateway_id="gw"):
            pass

    with pytest.raises(SettingsError, match=r"needs --sasl-username and --sasl-password \(sasl_username and"):
        asyncio.run(enter(security_protocol="SASL_PLAINTEXT"))
    with pytest.raises(SettingsError, match="cannot load the TLS files"):
        asyncio.run(enter(security_protocol="SSL", ssl_cafile=str(tmp_path / "missing.pem")))


# --- usage --------------------------------------------------------------------------------

BUDGET = load_config(json.dumps({"loopwarden": {"budgets": {"runTokens": 1000}}}))
USAGE = '{"type":"usage","run_id":"r","seq":1,"gateway_id":"g",'


@pytest.mark.parametrize(
    "field,value,why",
    [
        ("input_tokens", -1, "from 0 to 2\\^53 - 1"),
        ("input_tokens", 1.5, "whole number"),
        ("input_tokens", MAX_SAFE_INTEGER + 1, "from 0 to 2\\^53 - 1"),
        ("input_tokens", True, "whole number"),
        ("input_tokens", "12", "whole number"),
        ("output_tokens", -5, "from 0 to 2\\^53 - 1"),
        ("output_tokens", 0.25, "whole number"),
        ("output_tokens", None, "whole number"),
        ("cost_usd", -0.01, "finite number from 0"),
        ("cost_usd", float("nan"), "finite number from 0"),
        ("cost_usd", float("inf"), "finite number from 0"),
        ("cost_usd", 2e9, "finite number from 0"),
        ("cost_usd", "0.5", "number of US dollars"),
        ("cost_usd", False, "number of US dollars"),
        ("model", 4, "string or None"),
    ],
)
def test_usage_refuses_what_the_worker_would_dead_letter_and_sends_nothing(field, value, why):
    c = offline("gw-1", FakeWorker())
    with pytest.raises(LoopwardenError, match=f"^{field} must be .*{why}"):
        asyncio.run(c.usage("run-u", **{field: value}))
    assert c._producer.sent == []
    if isinstance(value, float) and not math.isfinite(value):
        return  # not JSON at all
    with pytest.raises(DecodeError):  # the worker's decoder refuses the same value
        decode_event(USAGE + json.dumps({field: value})[1:])


def test_usage_sends_amounts_at_their_limits_as_the_worker_reads_them():
    assert usage_amounts(0, MAX_SAFE_INTEGER, 1_000_000_000, "m") == (0, MAX_SAFE_INTEGER, 1e9, "m")
    assert usage_amounts(3.0, 4, 2, None) == (3, 4, 2.0, None)  # integral floats are sent as integers
    worker = FakeWorker(BUDGET)

    async def main():
        c = offline("gw-1", worker)
        return await c.usage("run-u", input_tokens=3.0, output_tokens=7, cost_usd=0.0125, model="gpt-x", agent_id="a")

    assert asyncio.run(main()) is None
    (ev,) = worker.events
    assert (ev.input_tokens, ev.output_tokens, ev.cost_usd, ev.model, ev.agent_id) == (3, 7, 0.0125, "gpt-x", "a")
    assert decode_event(encode(ev)) == ev


def test_usage_does_not_wait_and_the_abort_it_gets_is_what_the_next_check_returns_until_end_run():
    worker = FakeWorker(BUDGET)

    async def main():
        c = offline("gw-1", worker, timeout_s=5.0)
        allowed = await c.check("run-b", "read", {"p": 1})
        t0 = time.monotonic()
        first = await c.usage("run-b", input_tokens=700, output_tokens=300)  # 1000 of 1000: spent
        waited = time.monotonic() - t0
        await asyncio.sleep(0)  # the worker's answer arrives
        again = await c.usage("run-b", input_tokens=1)
        sent = len(c._producer.sent)
        stopped = await c.check("run-b", "read", {"p": 2})
        nothing_sent = len(c._producer.sent) == sent
        await c.end_run("run-b")
        fresh = await c.check("run-b", "read", {"p": 3})
        return c, allowed, first, waited, again, stopped, nothing_sent, fresh

    c, allowed, first, waited, again, stopped, nothing_sent, fresh = asyncio.run(main())
    assert allowed.action == "allow" and first is None and waited < 1.0
    (abort,) = worker.decisions[1:2]
    assert (abort.action, abort.detector, abort.tool_name, abort.count) == ("abort", "run_budget", None, 1000)
    assert abort.event_id == f"run-b:{worker.events[1].seq}"
    assert again == abort and stopped == abort and nothing_sent
    assert fresh.action == "allow" and not fresh.degraded and "run-b" not in c.aborted


def test_an_abort_answered_to_a_result_is_returned_by_the_next_check_without_sending_it():
    abort = decision("run-r", "gw-1", "abort", level="critical", detector="compaction_loop_persisted")

    async def main():
        c = offline("gw-1", FakeWorker())
        c._deliver(encode(abort))  # the worker's answer to a tool_result, which nobody waits for
        return c, await c.check("run-r", "exec", {"command": "make"})

    c, d = asyncio.run(main())
    assert d == abort and c._producer.sent == []


# --- shadow mode ----------------------------------------------------------------------------

SHADOW = load_config(
    json.dumps(
        {
            "tools": {"loopDetection": {"enabled": True, "warningThreshold": 3, "criticalThreshold": 5}},
            "loopwarden": {"budgets": {"runTokens": 1000}},
            "agents": {"list": [{"id": "main"}, {"id": "trial", "loopwarden": {"enforce": False}}]},
        }
    )
)


def test_a_shadow_run_is_allowed_throughout_logged_at_debug_and_never_remembered_as_aborted(caplog):
    worker = FakeWorker(SHADOW)
    caplog.set_level(logging.DEBUG, logger="loopwarden.gateway")

    async def main():
        c = offline("gw-1", worker, agent_id="trial")
        ds = await calls(c, "run-s", 7)
        spent = await c.usage("run-s", input_tokens=2000)
        await asyncio.sleep(0)
        return c, ds, spent, await c.check("run-s", "exec", {"command": "make"})

    c, ds, spent, after = asyncio.run(main())
    assert [d.action for d in ds] == ["allow"] * 7 and not any(d.enforced for d in ds)
    assert [d.shadow_action for d in ds] == ["allow", "allow", "allow", "warn", "allow", "block", "block"]
    usage_abort = worker.decisions[-2]
    assert (usage_abort.action, usage_abort.shadow_action, usage_abort.detector) == ("allow", "abort", "run_budget")
    assert spent is None and c.aborted == {}
    assert (after.action, after.shadow_action, after.detector) == ("allow", "abort", "run_budget")
    lines = [r.getMessage() for r in caplog.records if r.name == "loopwarden.gateway"]
    assert len(lines) == 9  # one per decision received: 7 calls, the usage event, the call after it
    assert lines[5] == (
        "shadow decision (executed as allow): run 'run-s', tool 'exec', detector generic_repeat, shadow_action block"
    )
    assert "tool None, detector run_budget, shadow_action abort" in lines[7]
    assert all(r.levelno == logging.DEBUG for r in caplog.records if r.name == "loopwarden.gateway")


def test_a_decision_not_enforced_is_executed_as_allow_whatever_its_action():
    d = decision("r", "gw-1", "block", level="critical", detector="generic_repeat", enforced=False)
    executed = as_executed(d)
    assert (executed.action, executed.shadow_action, executed.enforced) == ("allow", "block", False)
    enforced = msgspec.structs.replace(d, enforced=True)
    assert as_executed(enforced) is enforced

    async def main():
        c = offline("gw-1", FakeWorker())
        c._deliver(encode(d))
        return c

    c = asyncio.run(main())
    assert c.aborted == {} and "r" in c._shadow


def test_fail_closed_does_not_block_a_run_known_to_be_in_shadow():
    async def main():
        c = GatewayClient("127.0.0.1:1", gateway_id="gw", timeout_s=0.05, policy="fail-closed")
        c._producer = Silent(c, FakeWorker())  # type: ignore[assignment]
        c._deliver(encode(decision("shadow-run", "gw", "allow", enforced=False, shadow_action="allow")))
        shadow = await c.check("shadow-run", "read", {"p": 1})
        other = await c.check("other-run", "read", {"p": 1})
        await c.end_run("shadow-run")
        return shadow, other, await c.check("shadow-run", "read", {"p": 2})

    shadow, other, ended = asyncio.run(main())
    assert (shadow.action, shadow.enforced, shadow.shadow_action, shadow.degraded) == ("allow", False, "block", True)
    assert (other.action, other.enforced, other.shadow_action, other.degraded) == ("block", True, None, True)
    assert ended.action == "block"  # end_run forgot the run's shadow mode


# --- privacy mode: failed -------------------------------------------------------------------


@pytest.mark.parametrize("privacy", [True, False])
def test_a_failed_tool_is_sent_as_failed_in_privacy_mode_and_as_its_error_in_raw_mode(privacy):
    worker = FakeWorker()

    async def main():
        c = offline("gw-1", worker, privacy=privacy)
        await c.result("r", "exec", {"c": 1}, error="exit 2")
        await c.result("r", "exec", {"c": 1}, error=None)  # an error without a message is still one
        await c.result("r", "exec", {"c": 1}, result={"content": [{"type": "text", "text": "ok"}]})
        return [json.loads(v) for _, _, v in c._producer.sent]

    failed, null_error, ok = asyncio.run(main())
    if privacy:
        assert failed["failed"] is True and null_error["failed"] is True and "failed" not in ok
        assert not {"error", "result", "params"} & (failed.keys() | ok.keys())
        assert failed["result_hash"] != ok["result_hash"]
    else:
        assert failed["error"] == "exit 2" and null_error["error"] is None and "error" not in ok
        assert "failed" not in failed and "failed" not in ok


@pytest.mark.parametrize("privacy", [True, False])
def test_the_same_failing_call_is_blocked_by_failure_repeat_in_either_mode(privacy):
    rules = {"failureRepeat": {"enabled": True, "consecutive": 3}}
    worker = FakeWorker(
        load_config(json.dumps({"tools": {"loopDetection": {"enabled": True}}, "loopwarden": {"rules": rules}}))
    )

    async def main():
        c = offline("gw-1", worker, privacy=privacy)
        out = []
        for i in range(4):
            d = await c.check("r", "edit", {"path": "a.py", "old": "x"}, tool_call_id=f"c{i}")
            out.append(d)
            if d.action != "block":
                await c.result("r", "edit", {"path": "a.py", "old": "x"}, tool_call_id=f"c{i}", error="not found")
        return out

    ds = asyncio.run(main())
    assert [d.action for d in ds] == ["allow"] * 3 + ["block"]
    assert (ds[-1].detector, ds[-1].count) == ("failure_repeat", 3)
    assert ds[-1].message is not None and ds[-1].message.startswith("Blocked: edit failed 3 times in a row")


def test_a_spend_caps_pause_is_not_remembered_as_the_end_of_the_run():
    cap = {"id": "calls", "per": "agent", "windowMs": 86_400_000, "toolCalls": 2}
    config = load_config(
        json.dumps({"tools": {"loopDetection": {"enabled": True}}, "loopwarden": {"fleet": {"spendCaps": [cap]}}})
    )
    spend = SpendFold(config.spend_caps)  # what the spend stage does live
    worker = FakeWorker(config, FleetView())

    async def main():
        c = offline("gw-1", worker)
        out = []
        for i in range(3):
            out.append(await c.check("r", "read", {"p": i}, tool_call_id=f"c{i}", agent_id="a"))
            for signal in spend.observe(worker.events[-1]):
                worker.fleet.put(signal)
        return out, c

    ds, c = asyncio.run(main())
    assert [d.action for d in ds] == ["allow", "allow", "abort"] and ds[-1].detector == "fleet_spend_cap"
    assert c.aborted.get("r") is None  # paused, not ended: the next call is judged again
