"""`loopwarden top` on a real broker: known decisions in, exact figures out."""

from __future__ import annotations

import http.server
import json
import os
import pty
import select
import signal
import subprocess
import threading
import time
from collections import Counter

import pytest

from detectors.wire import Decision, encode
from streams.tools.launch import command

from .harness import ROOT, Send, new_prefix, produce, setup_topics

pytestmark = pytest.mark.integration


def decision(
    run: str,
    seq: int,
    gw: str,
    action: str = "allow",
    detector: str | None = None,
    count: int | None = None,
    tool: str = "read",
    agent: str | None = "main",
) -> Decision:
    level = "none" if detector is None else ("critical" if action in ("block", "abort") else "warning")
    return Decision(
        run_id=run,
        seq=seq,
        gateway_id=gw,
        agent_id=agent,
        tool_call_id=f"c{seq}",
        tool_name=tool,
        ts=None,
        event_id=f"{run}:{seq}",
        action=action,
        level=level,
        detector=detector,
        count=count,
        message=None if detector is None else f"{detector} x{count}",
        warning_key=None,
        paired_tool_name="write" if detector == "ping_pong" else None,
        args_hash=None,
        config_hash="cfg",
    )


def known_decisions() -> list[Decision]:
    """Normal calls on three gateways, and runs that loop in every way (and one that stops)."""
    out = []
    for g in range(3):
        for n in range(10):
            out.append(decision(f"normal-g{g}-{n}", 1, f"gw-{g}"))
    out += [
        decision("loop-repeat", 10, "gw-0", "warn", "generic_repeat", 10, tool="read"),
        decision("loop-repeat", 11, "gw-0", "allow", "generic_repeat", 11, tool="read"),  # suppressed repeat
        decision("loop-repeat", 20, "gw-0", "block", "generic_repeat", 20, tool="read"),
        decision("loop-poll", 10, "gw-1", "warn", "known_poll_no_progress", 10, tool="status", agent="ops"),
        decision("loop-poll", 11, "gw-1"),  # moved on: no longer looping
        decision("loop-pingpong", 10, "gw-1", "warn", "ping_pong", 10, tool="ls"),
        decision("loop-unknown", 10, "gw-2", "block", "unknown_tool_repeat", 10, tool="no_such_tool"),
        decision("loop-compaction", 5, "gw-2", "abort", "compaction_loop_persisted", 3, tool="bash", agent=None),
        decision("loop-breaker", 30, "gw-0", "block", "global_circuit_breaker", 30, tool="grep", agent="no-generic"),
    ]
    return out


def produce_decisions(bootstrap: str, topic: str, decisions: list[Decision], ts_ms: int, step_ms: int = 10) -> None:
    """Keyed by gateway_id, as workers publish them; timestamps ts_ms, ts_ms + step_ms, ..."""
    produce(
        bootstrap, topic, [Send(d.gateway_id.encode(), encode(d), ts_ms + i * step_ms) for i, d in enumerate(decisions)]
    )


def top(bootstrap: str, prefix: str, *extra: str, timeout: float = 90) -> dict:
    p = subprocess.run(
        command("top", "--bootstrap", bootstrap, "--topic-prefix", prefix, "--once", "--json", *extra),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
    )
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_once_json_reports_exact_counts_and_the_looping_runs(bootstrap):
    prefix = new_prefix()
    s = setup_topics(bootstrap, prefix, partitions=4)
    ds = known_decisions()
    now_ms = int(time.time() * 1000)
    produce_decisions(bootstrap, s.decisions_topic, ds, now_ms - 5000)
    dead = [
        Send(b"k1", b"not json", now_ms, [("loopwarden.error", b"decode_error")]),
        Send(None, b"{}", now_ms, [("loopwarden.error", b"missing_key")]),
        Send(None, b"{}", now_ms, [("loopwarden.error", b"missing_key")]),
    ]
    produce(bootstrap, s.deadletter_topic, dead)

    snap = top(bootstrap, prefix)
    assert snap["topic"] == s.decisions_topic
    assert snap["decisions"] == len(ds) and snap["duplicates"] == 0 and snap["undecodable"] == 0
    assert snap["actions"] == dict(Counter(d.action for d in ds)) == {"allow": 32, "warn": 3, "block": 3, "abort": 1}
    assert snap["detectors"] == dict(Counter(d.detector for d in ds if d.detector))
    assert snap["detectors"] == {
        "generic_repeat": 3,
        "known_poll_no_progress": 1,
        "ping_pong": 1,
        "unknown_tool_repeat": 1,
        "compaction_loop_persisted": 1,
        "global_circuit_breaker": 1,
    }
    assert snap["detector_actions"]["generic_repeat"] == {"allow": 1, "warn": 1, "block": 1, "abort": 0}

    # the latest warning, block or abort of each run still looping, newest first
    runs = snap["looping_runs"]
    assert [r["run_id"] for r in runs] == [
        "loop-breaker",
        "loop-compaction",
        "loop-unknown",
        "loop-pingpong",
        "loop-repeat",
    ]
    got = {
        r["run_id"]: (r["gateway_id"], r["agent_id"], r["tool_name"], r["action"], r["detector"], r["count"])
        for r in runs
    }
    assert got == {
        "loop-breaker": ("gw-0", "no-generic", "grep", "block", "global_circuit_breaker", 30),
        "loop-compaction": ("gw-2", None, "bash", "abort", "compaction_loop_persisted", 3),
        "loop-unknown": ("gw-2", "main", "no_such_tool", "block", "unknown_tool_repeat", 10),
        "loop-pingpong": ("gw-1", "main", "ls", "warn", "ping_pong", 10),
        "loop-repeat": ("gw-0", "main", "read", "block", "generic_repeat", 20),
    }
    by_gw = Counter(d.gateway_id for d in ds)
    assert {g: v["decisions"] for g, v in snap["gateways"].items()} == dict(by_gw)
    assert {g: v["blocks"] for g, v in snap["gateways"].items()} == {"gw-0": 2, "gw-1": 0, "gw-2": 1}
    assert all(v["calls_per_s"] > 0 for v in snap["gateways"].values())  # all within the last 10 s
    assert snap["per_minute_by_detector"]["generic_repeat"]["block"] > 0
    assert snap["dead_letters"]["total"] == 3
    assert snap["dead_letters"]["by_reason"] == {"decode_error": 1, "missing_key": 2}

    # --from: only what was published since then (offsets_for_times on every partition)
    produce_decisions(
        bootstrap, s.decisions_topic, [decision("late", 1, "gw-9", "abort", "ping_pong", 40)], now_ms + 60_000
    )
    late = top(bootstrap, prefix, "--from", time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now_ms / 1000 + 30)))
    assert late["decisions"] == 1 and late["actions"]["abort"] == 1 and late["detectors"] == {"ping_pong": 1}
    assert [r["run_id"] for r in late["looping_runs"]] == ["late"]
    assert top(bootstrap, prefix, "--from", "-1m")["decisions"] == len(ds) + 1
    assert top(bootstrap, prefix, "--from", "beginning")["decisions"] == len(ds) + 1


class _Metrics(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        body = (
            b'# TYPE loopwarden_consumer_lag gauge\nloopwarden_consumer_lag{partition="0"} 7.0\n'
            b'loopwarden_consumer_lag{partition="3"} 5.0\n'
        )
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def test_live_json_lines_start_from_now_and_scrape_worker_lag(bootstrap):
    prefix = new_prefix()
    s = setup_topics(bootstrap, prefix, partitions=4)
    produce_decisions(
        bootstrap, s.decisions_topic, known_decisions(), int(time.time() * 1000) - 2000
    )  # before: not read
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        p = subprocess.Popen(
            command(
                "top",
                "--bootstrap",
                bootstrap,
                "--topic-prefix",
                prefix,
                "--json",
                "--seconds",
                "8",
                "--worker-metrics",
                f"127.0.0.1:{srv.server_address[1]}",
                "--worker-metrics",
                "127.0.0.1:9",
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        first = json.loads(p.stdout.readline())  # the first refresh: it reads from now on
        assert first["decisions"] == 0
        new = [decision("now-1", 1, "gw-0", "block", "generic_repeat", 20), decision("now-2", 1, "gw-1")]
        produce_decisions(bootstrap, s.decisions_topic, new, int(time.time() * 1000))
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        last = json.loads(out.splitlines()[-1])
    finally:
        srv.shutdown()
    assert last["decisions"] == 2 and last["actions"] == {"allow": 1, "warn": 0, "block": 1, "abort": 0}
    assert [r["run_id"] for r in last["looping_runs"]] == ["now-1"]
    workers = {w["url"]: w for w in last["workers"]}
    ok = workers[f"http://127.0.0.1:{srv.server_address[1]}/metrics"]
    assert ok["reachable"] and ok["lag"] == 12 and ok["partitions"] == {"0": 7, "3": 5}
    assert workers["http://127.0.0.1:9/metrics"]["reachable"] is False


def test_the_live_view_on_a_terminal_quits_cleanly_on_ctrl_c(bootstrap):
    prefix = new_prefix()
    s = setup_topics(bootstrap, prefix, partitions=2)
    env = {**os.environ, "COLUMNS": "80", "LINES": "24", "TERM": "xterm-256color"}
    argv = command("top", "--bootstrap", bootstrap, "--topic-prefix", prefix)
    pid, fd = pty.fork()
    if pid == 0:  # the child: top on a pseudo-terminal
        os.chdir(ROOT)
        os.execve(argv[0], argv, env)
    out = b""

    def read_for(seconds: float) -> None:
        nonlocal out
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            r, _, _ = select.select([fd], [], [], 0.1)
            if r:
                try:
                    out += os.read(fd, 65536)
                except OSError:
                    return

    status = None
    try:
        deadline = time.monotonic() + 60
        while b"looping now" not in out and time.monotonic() < deadline:
            read_for(0.5)
        produce_decisions(
            bootstrap,
            s.decisions_topic,
            [decision("tty-run-1", 1, "gw-0", "abort", "compaction_loop_persisted", 3, tool="bash")],
            int(time.time() * 1000),
        )
        deadline = time.monotonic() + 3
        while b"tty-run-1" not in out and time.monotonic() < deadline:
            read_for(0.2)
        assert b"tty-run-1" in out, out[-3000:]
        os.kill(pid, signal.SIGINT)
        deadline = time.monotonic() + 20
        while status is None and time.monotonic() < deadline:
            read_for(0.2)
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                status = st
        read_for(0.2)
    finally:
        if status is None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)
    assert status is not None, "top did not quit on Ctrl-C"
    assert os.waitstatus_to_exitcode(status) == 0, out[-2000:]
    # the alternate screen was entered and left, and the cursor is shown again
    assert b"\x1b[?1049h" in out and b"\x1b[?1049l" in out[-300:] and b"\x1b[?25h" in out[-300:], out[-300:]
    assert b"Error" not in out
