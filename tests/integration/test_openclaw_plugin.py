"""The OpenClaw plugin in OpenClaw's own hook runner, against a real broker and worker: a
looping agent is warned, then blocked with loopwarden's message at the configured counts;
with the worker stopped, fail-open runs the calls and fail-closed blocks them
(clients/openclaw/test/agent.integration.ts)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.integration.harness import WorkerProcess, new_prefix, setup_topics

PLUGIN = Path(__file__).resolve().parents[2] / "clients" / "openclaw"
NODE = PLUGIN / "node_modules" / ".bin" / "node"
CONFIG = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 3, "criticalThreshold": 5}}}


def run_phase(bootstrap: str, prefix: str, phase: str) -> str:
    if not NODE.exists():
        pytest.fail(f"{NODE} is missing: run `npm ci` in clients/openclaw (.ci/run does)")
    env = dict(os.environ, LW_BOOTSTRAP=bootstrap, LW_PREFIX=prefix, LW_PHASE=phase)
    out = subprocess.run(
        [str(NODE), "--test", "--test-reporter=tap", "test/agent.integration.ts"],
        cwd=PLUGIN,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
    return out.stdout


@pytest.mark.integration
def test_openclaw_plugin_blocks_a_looping_agent_and_keeps_its_fail_policy(bootstrap, tmp_path, workers):
    prefix = new_prefix()
    setup_topics(bootstrap, prefix)
    w = WorkerProcess(bootstrap, prefix, CONFIG, tmp_path)
    workers.append(w)
    w.start()
    out = run_phase(bootstrap, prefix, "worker")
    assert "# pass 3" in out and "# fail 0" in out, out[-3000:]
    w.stop()
    assert not w.alive()
    out = run_phase(bootstrap, prefix, "stopped")
    assert "# pass 3" in out and "# fail 0" in out, out[-3000:]
