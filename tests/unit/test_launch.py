"""The worker launcher (streams/tools/launch.py) without a broker: a worker that exits
at once is reported with its exit code and log, /health's 200 and 503 bodies are both
read, and a child that ignores SIGTERM is killed once the bound has passed."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
import time

import pytest

from streams.kafka.errors import WorkerError
from streams.tools import launch


def test_a_worker_that_exits_is_reported_with_its_code_and_log(tmp_path):
    w = launch.Worker(["--no-such-flag"], tmp_path / "w.log")
    with pytest.raises(WorkerError) as err:
        w.start(timeout=60)
    assert "exited with 2" in str(err.value) and "--no-such-flag" in str(err.value)
    assert w.starts == 1 and not w.alive()
    assert w.cmd[-2:] == ["--web-port", str(w.port)]


class _Health(http.server.BaseHTTPRequestHandler):
    answer = (200, {"status": "ok"})

    def do_GET(self):  # noqa: N802
        code, body = self.answer
        self.send_response(code)
        self.end_headers()
        self.wfile.write(json.dumps(body).encode())

    def log_message(self, *args):
        pass


@pytest.mark.parametrize(
    "code,body", [(200, {"status": "ok", "partitions": [0]}), (503, {"status": "rebalancing", "partitions": []})]
)
def test_health_reads_the_body_of_ok_and_of_not_ok(code, body):
    handler = type("H", (_Health,), {"answer": (code, body)})
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert launch.health(server.server_address[1]) == body
    finally:
        server.shutdown()
        server.server_close()


def test_health_is_none_when_nothing_answers():
    assert launch.health(launch.free_port()) is None


def test_stop_kills_a_child_that_ignores_sigterm_after_the_bound():
    # a child that ignores SIGTERM and sleeps on purpose: only the SIGKILL after the bound ends it
    code = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    t0 = time.monotonic()
    launch.stop_process(proc, timeout=1.0)
    took = time.monotonic() - t0
    assert proc.returncode == -9 and 1.0 <= took < 10, (proc.returncode, took)
