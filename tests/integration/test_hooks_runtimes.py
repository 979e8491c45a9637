"""What `loopwarden hooks install` writes, checked by each runtime's own CLI (installed
from the npm registry into a cache, pinned; no model, no account):

- Claude Code: `claude doctor` reads the project's settings files and lists every
  invalid entry under "Invalid settings" (unknown hook events, a handler without a
  command, a timeout that is not a number, ...).
- Codex: `codex doctor --json` loads config.toml; its `config.load` check fails on a
  hooks table Codex cannot read.
- Gemini CLI: `gemini mcp list` loads the settings files and prints "Invalid
  configuration" for a hooks entry that does not match its schema.

Each check is first shown to catch a broken hooks entry, so a pass means something.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from streams.cli import main

pytestmark = pytest.mark.integration

CLIS = {
    "claude": "@anthropic-ai/claude-code@2.1.328",
    "codex": "@openai/codex@0.169.0",
    "gemini": "@google/gemini-cli@0.61.0",
}


@pytest.fixture(scope="module")
def bins() -> Path:
    """The runtimes' CLIs, installed once into LOOPWARDEN_HOOK_CLIS (default
    ~/.cache/loopwarden/hook-clis)."""
    root = Path(os.environ.get("LOOPWARDEN_HOOK_CLIS") or Path.home() / ".cache" / "loopwarden" / "hook-clis")
    b = root / "node_modules" / ".bin"
    if not all((b / name).exists() for name in CLIS):
        npm = shutil.which("npm")
        assert npm, "npm is needed to install the runtimes' CLIs"
        root.mkdir(parents=True, exist_ok=True)
        p = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--loglevel=error", "--prefix", str(root), *CLIS.values()],
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert p.returncode == 0, p.stderr[-3000:]
    return b


def run(argv: list, cwd: Path, home: Path, **env: str) -> str:
    e = {**os.environ, "HOME": str(home), "NO_COLOR": "1", **env}
    e.pop("CLAUDE_PROJECT_DIR", None)
    p = subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=e, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL
    )
    return p.stdout + p.stderr


def install(*args: str, env: dict | None = None) -> None:
    old = dict(os.environ)
    os.environ.update(env or {})
    try:
        assert main(["hooks", "install", *args, "--hook-command", "loopwarden-hook"]) == 0
    finally:
        os.environ.clear()
        os.environ.update(old)


def test_claude_doctor_accepts_the_installed_hooks(bins, tmp_path):
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    (project / ".claude").mkdir(parents=True)
    settings = project / ".claude" / "settings.json"
    settings.write_text(json.dumps({"hooks": {"PreToolUse": [{"hooks": [{"type": "command", "timeout": "soon"}]}]}}))
    out = run([bins / "claude", "doctor"], project, home)
    assert "Invalid settings" in out and "hooks.PreToolUse.0.hooks.0" in out  # the check catches a broken entry
    settings.unlink()
    install("claude-code", "--project", str(project))
    out = run([bins / "claude", "doctor"], project, home)
    assert "Claude Code doctor" in out and "Invalid settings" not in out, out
    install("claude-code", "--project", str(project), "--http")  # the http hooks too
    assert json.loads(settings.read_text())["hooks"]["PreToolUse"][0]["hooks"][0]["type"] == "http"
    out = run([bins / "claude", "doctor"], project, home)
    assert "Claude Code doctor" in out and "Invalid settings" not in out, out


def test_codex_doctor_loads_the_installed_config(bins, tmp_path):
    home, codex_home = tmp_path / "home", tmp_path / "codex"
    home.mkdir()
    codex_home.mkdir()
    config = codex_home / "config.toml"

    def config_load() -> dict:
        out = run([bins / "codex", "doctor", "--json"], tmp_path, home, CODEX_HOME=str(codex_home))
        report, _ = json.JSONDecoder().raw_decode(out[out.index("{") :])  # a warning may follow on stderr
        return report["checks"]["config.load"]

    config.write_text('[hooks.PreToolUse]\nmatcher = "Bash"\n')  # a table where Codex wants [[...]]
    assert config_load()["status"] == "fail"
    config.write_text('model = "gpt-5-codex"\n')
    install("codex", "--user", env={"CODEX_HOME": str(codex_home)})
    assert "[[hooks.PreToolUse.hooks]]" in config.read_text()
    assert config_load()["status"] == "ok"


def test_gemini_cli_loads_the_installed_settings(bins, tmp_path):
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    (project / ".gemini").mkdir(parents=True)
    settings = project / ".gemini" / "settings.json"
    settings.write_text(json.dumps({"hooks": {"BeforeTool": "notalist"}}))
    out = run([bins / "gemini", "mcp", "list"], project, home)
    assert "Invalid configuration" in out and "hooks.BeforeTool" in out
    settings.write_text(json.dumps({"ui": {"theme": "GitHub"}}))
    install("gemini-cli", "--project", str(project))
    out = run([bins / "gemini", "mcp", "list"], project, home)
    assert "Invalid configuration" not in out and "No MCP servers configured" in out, out
    assert json.loads(settings.read_text())["ui"] == {"theme": "GitHub"}
