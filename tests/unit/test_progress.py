"""The progress bars on a real terminal (a pseudo-terminal): they draw, on stderr, and
never stop the work they report on."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from streams.tools.launch import command

ROOT = Path(__file__).resolve().parents[2]

BAR = """
import time
from streams.progress import Progress
p = Progress("auditing", 1000)
assert p.shown
for done in range(0, 1001, 100):
    p.update(done)
    time.sleep(0.05)  # paces the work on purpose: the bar draws a rate
p.close()
print("finished")
"""


def on_a_terminal(cmd: list[str], timeout: float = 60) -> tuple[int, str, str]:
    """(exit code, stdout, what the terminal on stderr showed)."""
    leader, follower = pty.openpty()
    with tempfile.TemporaryFile() as stdout:  # a file: a pipe nobody reads could fill up
        p = subprocess.Popen(cmd, cwd=ROOT, stdout=stdout, stderr=follower, stdin=subprocess.DEVNULL)
        os.close(follower)
        shown = b""
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                ready, _, _ = select.select([leader], [], [], 1)
                if not ready:
                    continue
                try:
                    chunk = os.read(leader, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                shown += chunk
            else:
                raise AssertionError(f"still running after {timeout} s: {shown[-2000:]!r}")
            code = p.wait(timeout)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            os.close(leader)
        stdout.seek(0)
        return code, stdout.read().decode(), shown.decode(errors="replace")


def test_a_count_bar_draws_its_rate_on_the_terminal_and_lets_the_work_finish():
    code, out, shown = on_a_terminal([sys.executable, "-c", BAR])
    assert code == 0, shown
    assert out.strip() == "finished"  # nothing of the bar on stdout
    assert "auditing" in shown and "events/s" in shown and "Traceback" not in shown


def test_replay_on_a_terminal_keeps_its_output_clean(tmp_path):
    from streams.tools.trace import CONFIG, generate

    src, cfg = tmp_path / "events.jsonl", tmp_path / "config.json"
    src.write_bytes(b"\n".join(generate(3000)) + b"\n")
    cfg.write_text(json.dumps(CONFIG))
    cmd = command("replay", "--config", str(cfg), "--input", str(src))
    code, out, shown = on_a_terminal(cmd)
    assert code == 0, shown
    lines = out.splitlines()
    assert lines and all(json.loads(x)["action"] in ("allow", "warn", "block", "abort") for x in lines)
    assert "Traceback" not in shown
