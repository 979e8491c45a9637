"""The plugin as an operator installs it, in a real OpenClaw (the `openclaw` CLI of the
published package, in a throw-away home): `npm pack`, `openclaw plugins install` of the
archive (OpenClaw installs its dependencies with npm), OpenClaw's own validation of the
plugin config against openclaw.plugin.json's configSchema, enable, and inspect: loaded.
Its conversation hooks (llm_output, which carries the model usage, and agent_end) are
registered only once `hooks.allowConversationAccess` is set, as the README says."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

PLUGIN = Path(__file__).resolve().parents[2] / "clients" / "openclaw"
BIN = PLUGIN / "node_modules" / ".bin"


@pytest.mark.integration
def test_openclaw_installs_validates_and_loads_the_plugin(tmp_path):
    npm = shutil.which("npm")
    assert npm and (BIN / "openclaw").exists(), "no clients/openclaw/node_modules (tests/conftest.py installs it)"
    home = tmp_path / "home"
    home.mkdir()
    env = dict(os.environ, HOME=str(home), PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", NO_COLOR="1")

    def run(*args: str, ok: bool = True) -> subprocess.CompletedProcess:
        p = subprocess.run(list(args), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert (p.returncode == 0) == ok, f"{args}: {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
        return p

    run(npm, "pack", "--pack-destination", str(tmp_path), "--loglevel=error", str(PLUGIN))
    (tgz,) = tmp_path.glob("loopwarden-openclaw-*.tgz")
    out = run("openclaw", "plugins", "install", str(tgz), "--force", "--accept-capabilities")
    assert "Installed plugin: loopwarden" in out.stdout + out.stderr
    bad = run(
        "openclaw",
        "config",
        "set",
        "plugins.entries.loopwarden.config",
        '{"bootstrap": "127.0.0.1:9092", "failPolicy": "maybe"}',
        "--strict-json",
        ok=False,
    )
    assert "failPolicy" in bad.stdout + bad.stderr
    run(
        "openclaw",
        "config",
        "set",
        "plugins.entries.loopwarden.config",
        '{"bootstrap": "127.0.0.1:9092", "gatewayId": "gw-install", "failPolicy": "fail-closed"}',
        "--strict-json",
    )
    run("openclaw", "plugins", "enable", "loopwarden")
    info = json.loads(run("openclaw", "plugins", "inspect", "loopwarden", "--json").stdout)
    manifest = json.loads((PLUGIN / "openclaw.plugin.json").read_text())
    assert info["plugin"]["status"] == "loaded" and info["plugin"]["enabled"] is True, info["plugin"]
    assert info["plugin"]["source"].endswith("dist/index.js")
    assert info["plugin"]["configJsonSchema"] == manifest["configSchema"]

    def runtime_hooks() -> tuple[list[str], list[str]]:
        out = json.loads(run("openclaw", "plugins", "inspect", "loopwarden", "--runtime", "--json").stdout)
        return sorted(h["name"] for h in out["typedHooks"]), [d["message"] for d in out["diagnostics"]]

    hooks, diagnostics = runtime_hooks()
    assert hooks == [
        "after_compaction",
        "after_tool_call",
        "before_tool_call",
        "gateway_start",
        "gateway_stop",
        "tool_result_persist",
    ]
    for hook in ("llm_output", "agent_end"):
        assert any(f'"{hook}" blocked' in m and "allowConversationAccess=true" in m for m in diagnostics), diagnostics
    run("openclaw", "config", "set", "plugins.entries.loopwarden.hooks.allowConversationAccess", "true")
    hooks, diagnostics = runtime_hooks()
    assert "llm_output" in hooks and "agent_end" in hooks and len(hooks) == 8, hooks
    assert diagnostics == []
