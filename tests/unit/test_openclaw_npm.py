"""The OpenClaw plugin's own tests (`npm test` in clients/openclaw: type-check against the
published `openclaw` package's types, the golden vectors in TypeScript, the plugin's
config schema and hooks in OpenClaw's hook runner). The test session installs the
plugin's packages (tests/conftest.py, `openclaw_packages`); no npm fails the run."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

PLUGIN = Path(__file__).resolve().parents[2] / "clients" / "openclaw"


def test_openclaw_plugin_npm_test():
    npm = shutil.which("npm")
    assert npm, "npm is not installed (Node.js and npm are needed for clients/openclaw)"
    assert (PLUGIN / "node_modules" / ".bin" / "node").exists(), (
        "no clients/openclaw/node_modules (tests/conftest.py installs it)"
    )
    out = subprocess.run([npm, "test"], cwd=PLUGIN, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-3000:]
    passed = re.search(r"^ℹ pass (\d+)$", out.stdout, re.M)
    failed = re.search(r"^ℹ fail (\d+)$", out.stdout, re.M)
    assert passed and failed, out.stdout[-3000:]
    assert int(passed.group(1)) >= 10 and failed.group(1) == "0", out.stdout[-3000:]
