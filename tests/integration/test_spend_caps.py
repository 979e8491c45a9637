"""Fleet spend caps on a real broker (semantics.md section 11): three workers and twelve
partitions, three agents on six gateways reporting usage; a per-agent hourly cost cap is
reached once, every worker pauses that agent's next calls and no other agent's, the
alerts reach a local HTTP server through `loopwarden alerts`, a lift lets the agent go
on, and an audit matches every decision."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from streams.kafka.partitioner import partition_for
from streams.tools.launch import command
from tests.integration.harness import ROOT, audit, consume, produce, wait_until
from tests.integration.test_fleet import Webhook

pytestmark = pytest.mark.integration

PARTITIONS = 12
HOUR = 3_600_000
CAP = {"id": "agent-hourly", "per": "agent", "windowMs": HOUR, "costUsd": 0.05}
CONFIG = {"tools": {"loopDetection": {"enabled": True}}, "loopwarden": {"fleet": {"spendCaps": [CAP]}}}
AGENTS = ("spender", "writer", "seo")


def event(kind: str, run: str, seq: int, gw: str, agent: str, ts: int, **fields: object) -> tuple[bytes, bytes]:
    ev = {"type": kind, "run_id": run, "seq": seq, "gateway_id": gw, "agent_id": agent, "ts": ts, **fields}
    return run.encode(), json.dumps(ev).encode()


def call(run: str, seq: int, gw: str, agent: str, ts: int) -> tuple[bytes, bytes]:
    return event("tool_call", run, seq, gw, agent, ts, tool_name="read", tool_call_id=f"{run}-{seq}", params={"n": seq})


def runs_on(owned: list[list[int]], agent: str) -> list[str]:
    """A run id of `agent` on a partition of each worker (its events go to that worker)."""
    out = []
    for parts in owned:
        i = 0
        while partition_for(f"{agent}-run-{i}".encode(), PARTITIONS) not in parts:
            i += 1
        out.append(f"{agent}-run-{i}")
    return out


def hour_left_ms() -> int:
    now = int(time.time() * 1000)
    return HOUR - now % HOUR


def loopwarden(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(command(*args), cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_an_agents_hourly_cost_cap_pauses_it_on_every_worker_until_lifted(bootstrap, tmp_path, start_worker):
    if hour_left_ms() < 150_000:  # every event of the test in one hourly window
        time.sleep(hour_left_ms() / 1000 + 1)
    first = start_worker(None, CONFIG, partitions=PARTITIONS, name="w0", wait=False)
    s, prefix = first.topics, first.topics.topic_prefix
    kafka = ("--bootstrap", bootstrap, "--topic-prefix", prefix)
    workers = [first] + [start_worker(prefix, CONFIG, partitions=PARTITIONS, name=f"w{i}", wait=False) for i in (1, 2)]
    for w in workers:
        w.wait_healthy()
    wait_until(
        lambda: all(w.partitions() for w in workers) and sum(len(w.partitions()) for w in workers) == PARTITIONS,
        60,
        "the partitions spread over the workers",
    )
    owned = [w.partitions() for w in workers]
    hook = Webhook(slow_s=0.0)
    follower = subprocess.Popen(
        command(
            "alerts", *kafka, "--webhook", hook.url, "--timeout-s", "2", "--max-backoff-s", "1", "--from-beginning"
        ),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "alerts.log", "wb"),  # noqa: SIM115 (the child keeps it)
    )
    try:
        runs = {a: runs_on(owned, a) for a in AGENTS}
        gw = {(a, i): f"gw-{(j * 3 + i) % 6}" for j, a in enumerate(AGENTS) for i in range(3)}
        t = int(time.time() * 1000)
        # Each run reports a model call's usage, then makes a call: the spender's cost
        # 0.02 a model call, the others' 0.001. The spender's third usage reaches 0.05
        # (whichever of its runs it is on), and the cap is reached once.
        first_round = []
        for a in AGENTS:
            for i, run in enumerate(runs[a]):
                cost = 0.02 if a == "spender" else 0.001
                first_round.append(event("usage", run, 0, gw[a, i], a, t + i, input_tokens=100, cost_usd=cost))
                first_round.append(call(run, 1, gw[a, i], a, t + 10 + i))
        produce(bootstrap, s.events_topic, first_round)
        everywhere = lambda: all(w.metric("loopwarden_fleet_signals") >= 1 for w in workers)  # noqa: E731
        wait_until(everywhere, 30, lambda: "the cap's signal on every worker\n" + first.tail())
        (signal,) = [json.loads(m.value) for m in consume(bootstrap, s.fleet_topic, 1, timeout=10)]
        assert (signal["kind"], signal["cap"], signal["key"], signal["unit"]) == (
            "spend_cap",
            "agent-hourly",
            "spender",
            "cost",
        )
        assert signal["used"] == 60_000 and signal["ceiling"] == 50_000 and signal["until_ts"] == signal["window_end"]
        # Every worker pauses the spender's next call, and no other agent's.
        t2 = max(signal["from_ts"], t) + 1000
        produce(
            bootstrap,
            s.events_topic,
            [call(run, 2, gw[a, i], a, t2 + i) for a in AGENTS for i, run in enumerate(runs[a])],
        )
        decisions = [json.loads(m.value) for m in consume(bootstrap, s.decisions_topic, 18, timeout=60)]
        second = {(d["run_id"]): d for d in decisions if d["seq"] == 2}
        assert len(second) == 9
        for a in AGENTS:
            for run in runs[a]:
                d = second[run]
                if a == "spender":
                    assert (d["action"], d["detector"], d["fleet_signal"]) == (
                        "abort",
                        "fleet_spend_cap",
                        signal["id"],
                    ), d
                    assert "agent-hourly" in d["message"] and "spender" in d["message"]
                else:
                    assert d["action"] == "allow", d
        for w in workers:
            assert w.metric("loopwarden_decisions", action="abort", detector="fleet_spend_cap") == 1, w.tail()
        # A lift lets the agent go on: its next calls (after the lift) are allowed.
        p = loopwarden("stop", *kafka, "--lift", signal["id"])
        assert p.returncode == 0, p.stderr
        wait_until(
            lambda: all(w.metric("loopwarden_fleet_records_read") >= 2 for w in workers), 10, "the lift on every worker"
        )
        t3 = int(time.time() * 1000) + 1000
        produce(
            bootstrap,
            s.events_topic,
            [call(run, 3, gw["spender", i], "spender", t3 + i) for i, run in enumerate(runs["spender"])],
        )
        decisions = [json.loads(m.value) for m in consume(bootstrap, s.decisions_topic, 21, timeout=60)]
        assert {d["action"] for d in decisions if d["seq"] == 3} == {"allow"}
        # The alerts reached the webhook: the warnings at 80 and 95 percent (the second
        # usage made 0.04: 80 percent), the cap reached, and its lift.
        kinds = lambda: [a["kind"] for a in hook.delivered()]  # noqa: E731
        wait_until(
            lambda: {"spend_cap_warning", "spend_cap_reached", "spend_cap_lifted"} <= set(kinds()),
            30,
            lambda: f"the alerts (got {kinds()})",
        )
        warned = [a for a in hook.delivered() if a["kind"] == "spend_cap_warning"]
        # (the third usage made 0.06: past 95 percent in the same record that reached it)
        assert [(a["key"], a["unit"], a["mark"]) for a in warned] == [("spender", "cost", 80), ("spender", "cost", 95)]
        assert [a["subject"] for a in hook.delivered() if a["kind"] == "spend_cap_reached"] == [signal["id"]]
        # An audit matches every decision, each paused call with the signal it names.
        code, out = audit(bootstrap, prefix, "--from", "beginning", "--worker-config", str(tmp_path / "config-w0.json"))
        assert code == 0 and out["matched"] == out["decisions_recorded"] == 21, out
    finally:
        follower.terminate()
        follower.wait(10)
        hook.close()
    assert follower.returncode == 0, (tmp_path / "alerts.log").read_text()
