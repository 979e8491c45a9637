"""Start `loopwarden worker` as a child process, wait until its /health says ok, stop it.

The one way the demo, the integration tests and the benchmarks run a worker. The child
gets its own process group (a Ctrl-C at the terminal reaches the parent only, which then
stops the child) and writes its output to a log file; stopping it is SIGTERM, then
SIGKILL once a bound has passed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..kafka.errors import WorkerError
from .localkafka import free_port

READY_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 20.0


def command(*args: str) -> list[str]:
    """The argv of `loopwarden ARGS...` run by this interpreter from this checkout."""
    return [sys.executable, "-m", "streams.cli", *args]


def health(port: int, timeout: float = 1.0) -> dict[str, Any] | None:
    """What the worker's /health answers (the body of a 200 and of a 503 alike), or None
    when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=timeout) as r:
            body: dict[str, Any] = json.loads(r.read())
            return body
    except urllib.error.HTTPError as exc:  # 503 with a body that says why
        try:
            body = json.loads(exc.read())
            return body
        except (ValueError, OSError):
            return None
    except (OSError, ValueError):
        return None


def kill_process(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL to the process's group, and reap it."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def stop_process(proc: subprocess.Popen[Any], timeout: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM to the process's group (started with start_new_session); SIGKILL if it has
    not exited within `timeout` seconds."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            kill_process(proc)


class Worker:
    """`python -m streams.cli worker ARGS --web-port PORT` (ARGS: the worker's flags), its
    output appended to `log`. start() may be called again after the process has exited:
    the same command, the same port and log."""

    def __init__(
        self,
        args: Sequence[str],
        log: Path,
        port: int | None = None,
        cwd: Path | None = None,
        stop_timeout: float = STOP_TIMEOUT_S,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.port = port or free_port()
        self.env = None if env is None else {**os.environ, **env}  # added to this process's environment
        self.stop_timeout = stop_timeout
        self.log = Path(log)
        self.cwd = cwd
        self.cmd = command("worker", *args, "--web-port", str(self.port))
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self, wait: bool = True, timeout: float = READY_TIMEOUT_S) -> Worker:
        with open(self.log, "ab") as out:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                self.cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.cwd,
                env=self.env,
                start_new_session=True,
            )
        self.starts += 1
        if wait:
            try:
                self.wait_healthy(timeout)
            except BaseException:
                self.stop()
                raise
        return self

    def health(self) -> dict[str, Any] | None:
        return health(self.port)

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=2) as r:
            body: bytes = r.read()
            return body.decode()

    def wait_healthy(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Until /health says ok; WorkerError (with the log's tail) if the process exits or
        time runs out first."""
        assert self.proc is not None, "start() first"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise WorkerError(f"the worker exited with {self.proc.returncode}; see {self.log}:\n{self.tail()}")
            if (self.health() or {}).get("status") == "ok":
                return
            time.sleep(0.3)
        raise WorkerError(f"the worker did not become ready within {timeout:.0f}s; see {self.log}:\n{self.tail()}")

    def tail(self, n: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.proc:
            kill_process(self.proc)

    def stop(self, timeout: float | None = None) -> None:
        """SIGTERM, then SIGKILL after `timeout` (default: the one given at construction)."""
        if self.proc:
            stop_process(self.proc, self.stop_timeout if timeout is None else timeout)

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
