"""The fleet on a real broker (semantics.md section 9): one tool breaker shared by three
workers, stop orders applied within a second, alerts posted to a real HTTP server
through `loopwarden alerts`, at least once, through a 500 answer and a timeout."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from streams.tools.launch import command
from tests.integration.harness import ROOT, audit, consume, produce, wait_until

pytestmark = pytest.mark.integration

PARTITIONS = 12
COOL_DOWN_MS = 4000
CONFIG = {
    "tools": {"loopDetection": {"enabled": True}},
    "loopwarden": {
        "fleet": {"toolBreaker": {"enabled": True, "minRuns": 10, "windowMs": 60000, "coolDownMs": COOL_DOWN_MS}}
    },
}


class Webhook:
    """A local HTTP server that records what is posted: its first answer is a 500, its
    second comes only after the client's timeout, then every answer is a 200."""

    def __init__(self, slow_s: float) -> None:
        self.got: list[tuple[int, dict]] = []  # (status answered, alert)
        self.lock = threading.Lock()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the standard library's name)
                alert = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with hook.lock:
                    n = len(hook.got)
                    status = 500 if n == 0 else 200
                    hook.got.append((status, alert))
                if n == 1:
                    # Answers late on purpose (a wall-clock delay past the follower's
                    # timeout): the follower gives up waiting and posts this one again.
                    time.sleep(slow_s)
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def delivered(self) -> list[dict]:
        with self.lock:
            return [a for s, a in self.got if s == 200]

    def close(self) -> None:
        self.server.shutdown()


def calls(runs: list[str], seq: int, ts: int, tool: str = "http_get") -> list[tuple[bytes, bytes]]:
    out = []
    for i, run in enumerate(runs):
        ev = {
            "type": "tool_call",
            "run_id": run,
            "seq": seq,
            "gateway_id": f"gw-{i % 6}",
            "ts": ts,
            "tool_call_id": f"{run}-{seq}",
            "tool_name": tool,
            "params": {"url": f"https://api.example.test/items/{i}"},
        }
        out.append((run.encode(), json.dumps(ev).encode()))
    return out


def failures(runs: list[str], seq: int, ts: int) -> list[tuple[bytes, bytes]]:
    out = []
    for i, run in enumerate(runs):
        ev = {
            "type": "tool_result",
            "run_id": run,
            "seq": seq,
            "gateway_id": f"gw-{i % 6}",
            "ts": ts,  # one ts: whichever failures reach the stage first, the tenth opens the breaker
            "tool_call_id": f"{run}-{seq - 1}",
            "tool_name": "http_get",
            "params": {"url": f"https://api.example.test/items/{i}"},
            "error": "503 Service Unavailable: upstream quota exhausted",
        }
        out.append((run.encode(), json.dumps(ev).encode()))
    return out


def test_one_breaker_for_three_workers_and_its_alerts_reach_a_webhook(bootstrap, tmp_path, start_worker):
    first = start_worker(None, CONFIG, partitions=PARTITIONS, name="w0", wait=False)
    s, prefix = first.topics, first.topics.topic_prefix
    workers = [first] + [
        start_worker(prefix, CONFIG, partitions=PARTITIONS, name=f"w{i}", wait=False) for i in range(1, 3)
    ]
    for w in workers:
        w.wait_healthy()
    wait_until(lambda: all(w.partitions() for w in workers), 60, "every worker to own partitions")
    hook = Webhook(slow_s=2.0)
    follower = subprocess.Popen(
        command(
            "alerts",
            "--bootstrap",
            bootstrap,
            "--topic-prefix",
            prefix,
            "--webhook",
            hook.url,
            "--timeout-s",
            "1",
            "--max-backoff-s",
            "1",
            "--from-beginning",
        ),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "alerts.log", "wb"),  # noqa: SIM115 (the child keeps it)
    )
    try:
        runs = [f"fleet-run-{i}" for i in range(30)]
        t0 = int(time.time() * 1000)
        produce(bootstrap, s.events_topic, calls(runs, 0, t0))
        produce(bootstrap, s.events_topic, failures(runs, 1, t0 + 10))
        # The breaker opens once, and every worker receives it.
        everywhere = lambda: all(w.metric("loopwarden_fleet_signals") >= 1 for w in workers)  # noqa: E731
        wait_until(everywhere, 30, "the breaker on every worker")
        breakers = [json.loads(m.value) for m in consume(bootstrap, s.fleet_topic, 1, timeout=10)]
        assert len(breakers) == 1 and breakers[0]["kind"] == "breaker", breakers
        b = breakers[0]
        assert b["tool_name"] == "http_get" and b["runs"] == 10 and 1 < b["gateways"] <= 6
        # Every run's next call of the tool is blocked, on whichever worker owns it.
        produce(bootstrap, s.events_topic, calls(runs, 2, b["from_ts"] + 100))
        decisions = [json.loads(m.value) for m in consume(bootstrap, s.decisions_topic, 60, timeout=60)]
        second = [d for d in decisions if d["seq"] == 2]
        assert len(second) == 30 and len(decisions) == 60
        assert {(d["action"], d["detector"], d["fleet_signal"]) for d in second} == {
            ("block", "fleet_tool_breaker", b["id"])
        }
        for w in workers:
            assert w.metric("loopwarden_decisions", action="block", detector="fleet_tool_breaker") > 0, w.tail()
        # After the cool-down the tool is allowed again, and the breaker's close is alerted.
        wait_until(lambda: time.time() * 1000 > b["until_ts"] + 50, COOL_DOWN_MS / 1000 + 5, "the cool-down")
        produce(bootstrap, s.events_topic, calls(runs, 3, int(time.time() * 1000)))
        decisions = [json.loads(m.value) for m in consume(bootstrap, s.decisions_topic, 90, timeout=60)]
        assert {d["action"] for d in decisions if d["seq"] == 3} == {"allow"} and len(decisions) == 90
        delivered = lambda: {a["kind"] for a in hook.delivered()} >= {"breaker_opened", "breaker_closed"}  # noqa: E731
        wait_until(delivered, 30, "the alerts")
        posted = [a for _, a in hook.got]
        on_topic = [json.loads(m.value) for m in consume(bootstrap, s.alerts_topic, 2, timeout=10)]
        assert [a["kind"] for a in on_topic] == ["breaker_opened", "breaker_closed"]
        # Nothing lost: every alert on the topic got a 200; the first was answered 500 and
        # posted again, the second timed out and was posted again (at least once).
        assert all(a in hook.delivered() for a in on_topic)
        assert hook.got[0][0] == 500 and posted[0] == posted[1] == posted[2], posted[:3]
        assert len(posted) <= len(on_topic) + 2
        # An audit of the whole run replays each call with the breaker its decision names:
        # every decision matches (the workers were pinned with --config: the audit is told it).
        code, out = audit(bootstrap, prefix, "--from", "beginning", "--worker-config", str(tmp_path / "config-w0.json"))
        assert code == 0 and out["matched"] == out["decisions_recorded"] == 90, out
        assert out["fleet"]["signals_applied"] == {"breaker": 30} and out["fleet"]["judged_late"] == 0, out["fleet"]
    finally:
        follower.terminate()
        follower.wait(10)
        hook.close()
    assert follower.returncode == 0, (tmp_path / "alerts.log").read_text()


def loopwarden(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(command(*args), cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_stop_orders_reach_the_worker_within_a_second_and_bad_records_are_skipped(bootstrap, start_worker):
    w = start_worker(None, {}, partitions=4)
    s, prefix = w.topics, w.topics.topic_prefix
    kafka = ("--bootstrap", bootstrap, "--topic-prefix", prefix)
    # Malformed records on the fleet topic: logged and skipped, never fatal.
    bad = [
        b"{not json",
        json.dumps({"kind": "stop", "id": "two", "run_id": "a", "agent_id": "b", "from_ts": 0}).encode(),
    ]
    produce(
        bootstrap,
        s.fleet_topic,
        [(b"junk", v) for v in bad] + [(b"k", json.dumps({"kind": "pause", "id": "k"}).encode())],
    )
    # `loopwarden stop` refuses what a worker would skip.
    for args in (("--reason", "x"), ("--run", "r", "--gateway", "g", "--reason", "x"), ("--run", "r")):
        p = loopwarden("stop", *kafka, *args)
        assert p.returncode in (1, 2) and (
            "exactly one" in p.stderr or "not allowed" in p.stderr or "--reason" in p.stderr
        )
    p = loopwarden("stop", *kafka, "--agent", "Batch", "--reason", "runaway spend on the batch agent")
    assert p.returncode == 0, p.stderr
    order_id = p.stdout.strip()
    returned = time.monotonic()
    wait_until(lambda: w.metric("loopwarden_fleet_signals") >= 1, 2.0, "the order on the worker within a second or two")
    took = time.monotonic() - returned
    now = int(time.time() * 1000)
    call = {"type": "tool_call", "seq": 0, "gateway_id": "gw", "agent_id": " batch", "ts": now, "tool_name": "read"}
    other = dict(call, agent_id="other")
    produce(
        bootstrap,
        s.events_topic,
        [(b"r1", json.dumps(call | {"run_id": "r1"}).encode()), (b"r2", json.dumps(other | {"run_id": "r2"}).encode())],
    )
    got = {json.loads(m.value)["run_id"]: json.loads(m.value) for m in consume(bootstrap, s.decisions_topic, 2)}
    assert (got["r1"]["action"], got["r1"]["detector"], got["r1"]["fleet_signal"]) == (
        "abort",
        "operator_stop",
        order_id,
    )
    assert got["r1"]["message"] == "runaway spend on the batch agent" and got["r2"]["action"] == "allow"
    assert took < 1.5, took
    # Lifted: a new run of the agent is allowed again; the stopped run stays aborted.
    assert loopwarden("stop", *kafka, "--lift", order_id).returncode == 0
    wait_until(lambda: w.metric("loopwarden_fleet_records_read") >= 2, 2.0, "the lift on the worker")
    listed = json.loads(loopwarden("stop", *kafka, "--list", "--json").stdout)
    assert [(o["id"], o["state"]) for o in listed] == [(order_id, "ended")]
    assert w.metric("loopwarden_fleet_records_skipped") == 3
    later = int(time.time() * 1000) + 1000
    produce(
        bootstrap,
        s.events_topic,
        [
            (b"r1", json.dumps(call | {"run_id": "r1", "seq": 1, "ts": later}).encode()),
            (b"r3", json.dumps(call | {"run_id": "r3", "ts": later}).encode()),
        ],
    )
    got = {json.loads(m.value)["run_id"]: json.loads(m.value) for m in consume(bootstrap, s.decisions_topic, 4)}
    assert got["r3"]["action"] == "allow"
    assert (got["r1"]["action"], got["r1"]["detector"], got["r1"]["fleet_signal"]) == ("abort", "operator_stop", None)
    alerts = [json.loads(m.value) for m in consume(bootstrap, s.alerts_topic, 3)]
    assert [(a["kind"], a["lifted"]) for a in alerts if a["kind"] == "stop_order"] == [
        ("stop_order", False),
        ("stop_order", True),
    ]
    assert [a["subject"] for a in alerts if a["kind"] == "run_aborted"] == ["r1"]
    assert w.alive() and "skipping an unreadable fleet record" in w.tail(200_000)
