"""`loopwarden hooks install`: each runtime's config written where its documentation
says (Claude Code `.claude/settings.json`, https://code.claude.com/docs/en/hooks "Hook
locations"; Codex `.codex/config.toml` with `[[hooks.EVENT]]` /
`[[hooks.EVENT.hooks]]`, https://developers.openai.com/codex/hooks; Gemini CLI
`.gemini/settings.json`, https://github.com/google-gemini/gemini-cli/blob/main/docs/hooks/index.md
"Configuration"), merged with what is there, the same the second time, and shown
without writing by --print."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import pytest

from detectors.errors import LoopwardenError
from streams.cli import main
from streams.hooks import fast
from streams.hooks import install as install_mod
from streams.hooks.install import MARK_BEGIN, config_path, plan
from streams.hooks.runtimes import RUNTIMES


def install(*args: str) -> int:
    return main(["hooks", "install", *args, "--hook-command", "loopwarden-hook"])


def test_claude_code_settings_are_merged_keeping_everything_else(tmp_path):
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    mine = {"matcher": "Bash", "hooks": [{"type": "command", "command": "./check.sh"}]}
    settings.write_text(json.dumps({"model": "opus", "hooks": {"PreToolUse": [mine], "Stop": [mine]}}))
    assert install("claude-code", "--project", str(tmp_path)) == 0
    data = json.loads(settings.read_text())
    assert data["model"] == "opus" and data["hooks"]["Stop"] == [mine]
    assert data["hooks"]["PreToolUse"] == [
        mine,
        {"hooks": [{"type": "command", "command": "loopwarden-hook claude-code PreToolUse", "timeout": 15}]},
    ]
    assert set(data["hooks"]) == {"Stop", *RUNTIMES["claude-code"].events}
    before = settings.read_text()
    assert install("claude-code", "--project", str(tmp_path)) == 0
    assert settings.read_text() == before  # a second install changes nothing
    assert install("claude-code", "--project", str(tmp_path), "--fail-closed") == 0  # replaces, never duplicates
    pre = json.loads(settings.read_text())["hooks"]["PreToolUse"]
    assert pre[0] == mine and len(pre) == 2
    assert pre[1]["hooks"][0]["command"] == "loopwarden-hook claude-code PreToolUse --fail-closed"


def test_claude_code_http_hooks(tmp_path):
    assert install("claude-code", "--project", str(tmp_path), "--http", "--url", "http://127.0.0.1:7100") == 0
    data = json.loads((tmp_path / ".claude" / "settings.json").read_text())
    assert data["hooks"]["PostCompact"] == [
        {
            "hooks": [
                {
                    "type": "http",
                    "url": "http://127.0.0.1:7100/claude-code/PostCompact",
                    "timeout": 15,
                    "name": "loopwarden",
                }
            ]
        }
    ]
    with pytest.raises(LoopwardenError, match="command hooks only"):
        plan("codex", tmp_path / "c.toml", http_url="http://127.0.0.1:7077")


def test_gemini_cli_settings_use_milliseconds_and_a_name(tmp_path, capsys):
    assert install("gemini-cli", "--project", str(tmp_path), "--print") == 0
    printed = json.loads(capsys.readouterr().out)
    assert not (tmp_path / ".gemini").exists()  # --print writes nothing
    assert printed["hooks"]["BeforeTool"] == [
        {
            "hooks": [
                {
                    "type": "command",
                    "command": "loopwarden-hook gemini-cli BeforeTool",
                    "timeout": 15000,
                    "name": "loopwarden",
                }
            ]
        }
    ]
    assert set(printed["hooks"]) == {"BeforeTool", "AfterTool", "PreCompress", "SessionEnd"}


def test_codex_toml_is_appended_between_markers_and_replaced_on_reinstall(tmp_path):
    config = tmp_path / ".codex" / "config.toml"
    config.parent.mkdir()
    mine = (
        '# my settings\nmodel = "gpt-5-codex"\n\n[[hooks.PreToolUse]]\nmatcher = "^Bash$"\n'
        '[[hooks.PreToolUse.hooks]]\ntype = "command"\ncommand = "./guard.sh"\n'
    )
    config.write_text(mine)
    assert install("codex", "--project", str(tmp_path)) == 0
    text = config.read_text()
    assert text.startswith(mine)  # the user's part byte for byte
    data = tomllib.loads(text)
    assert data["model"] == "gpt-5-codex"
    assert [h["hooks"][0]["command"] for h in data["hooks"]["PreToolUse"]] == [
        "./guard.sh",
        "loopwarden-hook codex PreToolUse",
    ]
    assert data["hooks"]["PostCompact"] == [
        {"hooks": [{"type": "command", "command": "loopwarden-hook codex PostCompact", "timeout": 15}]}
    ]
    assert install("codex", "--project", str(tmp_path)) == 0
    assert config.read_text() == text
    assert install("codex", "--project", str(tmp_path), "--fail-closed") == 0
    again = config.read_text()
    assert again.startswith(mine) and again.count(MARK_BEGIN) == 1 and "PreToolUse --fail-closed" in again


def test_files_that_cannot_take_the_hooks_are_refused_untouched(tmp_path):
    config = tmp_path / ".codex" / "config.toml"
    config.parent.mkdir()
    config.write_text('[hooks]\nPreToolUse = [{ hooks = [{ type = "command", command = "x" }] }]\n')
    with pytest.raises(LoopwardenError, match="cannot take more"):
        plan("codex", config)
    config.write_text("model = \n")
    with pytest.raises(LoopwardenError, match="not valid TOML"):
        plan("codex", config)
    settings = tmp_path / ".gemini" / "settings.json"
    settings.parent.mkdir()
    settings.write_text('{\n  // my comment\n  "theme": "dark"\n}\n')
    assert main(["hooks", "install", "gemini-cli", "--project", str(tmp_path)]) == 1
    assert "// my comment" in settings.read_text()
    settings.write_text('{"hooks": []}')
    with pytest.raises(LoopwardenError, match="`hooks` is not a JSON object"):
        plan("gemini-cli", settings)


def test_user_config_paths():
    env = {"HOME": "/home/u"}
    assert str(config_path("claude-code", None, True, env)) == "/home/u/.claude/settings.json"
    assert str(config_path("gemini-cli", None, True, env)) == "/home/u/.gemini/settings.json"
    assert str(config_path("codex", None, True, env)) == "/home/u/.codex/config.toml"
    assert str(config_path("codex", None, True, {**env, "CODEX_HOME": "/srv/codex"})) == "/srv/codex/config.toml"
    assert str(config_path("codex", "/p", False, env)) == "/p/.codex/config.toml"


def test_install_writes_the_fast_hook_built_here_and_keeps_it_while_current(tmp_path, monkeypatch, capsys):
    built = tmp_path / "bin" / fast.NAME
    monkeypatch.setattr(fast, "destination", lambda python_hook, env=None: built)
    project = tmp_path / "project"
    assert main(["hooks", "install", "codex", "--project", str(project), "--print"]) == 0
    assert f'command = "{built} codex PreToolUse"' in capsys.readouterr().out
    assert not built.exists()  # --print builds nothing
    assert main(["hooks", "install", "claude-code", "--project", str(project), "--fail-closed"]) == 0
    data = json.loads((project / ".claude" / "settings.json").read_text())
    command = data["hooks"]["PreToolUse"][0]["hooks"][0]["command"]
    assert command == f"{built} claude-code PreToolUse --fail-closed"
    assert os.access(built, os.X_OK) and fast.is_current(built, fast.python_hook_path(install_mod.default_exe()))
    stamp = built.stat().st_mtime_ns
    assert main(["hooks", "install", "gemini-cli", "--project", str(project)]) == 0
    assert built.stat().st_mtime_ns == stamp  # current: not built again
    gemini = json.loads((project / ".gemini" / "settings.json").read_text())
    assert gemini["hooks"]["BeforeTool"][0]["hooks"][0]["command"] == f"{built} gemini-cli BeforeTool"
    capsys.readouterr()
    # an earlier Python hook's entries are loopwarden's own: replaced, not kept beside
    assert install("claude-code", "--project", str(project)) == 0
    assert main(["hooks", "install", "claude-code", "--project", str(project)]) == 0
    pre = json.loads((project / ".claude" / "settings.json").read_text())["hooks"]["PreToolUse"]
    assert [h["hooks"][0]["command"] for h in pre] == [f"{built} claude-code PreToolUse"]


def test_without_a_compiler_install_writes_the_python_hook_and_says_why(tmp_path, monkeypatch, capsys):
    built = tmp_path / "bin" / fast.NAME
    monkeypatch.setattr(fast, "destination", lambda python_hook, env=None: built)
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    assert main(["hooks", "install", "claude-code", "--project", str(tmp_path)]) == 0
    command = json.loads((tmp_path / ".claude" / "settings.json").read_text())["hooks"]["SessionEnd"][0]["hooks"][0]
    assert command["command"] == f"{install_mod.default_exe()} claude-code SessionEnd"
    err = capsys.readouterr().err
    assert f"no fast hook: the C compiler {tmp_path / 'no-such-cc'} (CC) is not there" in err
    assert not built.exists()
    monkeypatch.setenv("CC", "false")  # a "compiler" that fails: the build's failure is named
    assert main(["hooks", "install", "codex", "--project", str(tmp_path)]) == 0
    assert "no fast hook: false could not build fast_hook.c" in capsys.readouterr().err
    assert (
        f'command = "{install_mod.default_exe()} codex PreToolUse"' in (tmp_path / ".codex" / "config.toml").read_text()
    )


def test_a_fast_hook_that_answers_otherwise_than_python_is_not_installed(tmp_path, monkeypatch):
    monkeypatch.setattr(fast, "SOURCE", tmp_path / "fast_hook.c")
    wrong = (
        (Path(fast.__file__).with_name("fast_hook.c")).read_text().replace('"loopwarden-hook: "', '"loopwarden hook: "')
    )
    (tmp_path / "fast_hook.c").write_text(wrong)
    with pytest.raises(fast.Unavailable, match="answered .* where the Python hook answers"):
        fast.build(fast.python_hook_path(install_mod.default_exe()), tmp_path / "out" / fast.NAME)
    assert not (tmp_path / "out" / fast.NAME).exists()
