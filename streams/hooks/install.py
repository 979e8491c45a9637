"""`loopwarden hooks install claude-code|codex|gemini-cli [--project DIR | --user]`:
the runtime's hook config written or merged, keeping everything else in it.

- Claude Code: `.claude/settings.json` of the project (or `~/.claude/settings.json`),
  a command hook `loopwarden-hook claude-code EVENT` (or, with `--http`, an http hook
  posting to the sidecar) under each of PreToolUse, PostToolUse, PostToolUseFailure,
  PostCompact and SessionEnd (timeout in seconds).
- Codex: `.codex/config.toml` of the project (or `$CODEX_HOME/config.toml`,
  `~/.codex/config.toml`), `[[hooks.PreToolUse]]`, PostToolUse and PostCompact, each
  with a `[[hooks.EVENT.hooks]]` command hook. The block is appended between two marker
  comments, so the rest of the file stays byte for byte; a new install replaces the
  block. A file whose `hooks` cannot take more array entries (an inline table or array)
  is refused, naming the cause.
- Gemini CLI: `.gemini/settings.json` (or `~/.gemini/settings.json`), BeforeTool,
  AfterTool, PreCompress and SessionEnd (timeout in milliseconds, name `loopwarden`).

The command is the fast hook (streams/hooks/fast.py: a C program built here with the
machine's compiler, no interpreter start per call), or, where it cannot be built or does
not pass its self-test, the Python hook `loopwarden-hook`, with the cause on stderr;
`--hook-command` names another.

JSON files keep every other key and hook; loopwarden's own earlier entries (a
`loopwarden-hook` or `loopwarden-hook-fast` command, or an http hook to the sidecar) are
replaced. A file that is
not plain JSON (JSON with comments) is refused rather than rewritten without them.
`--print` shows the file as it would be written and writes nothing.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from detectors.errors import LoopwardenError

from . import fast
from .runtimes import RUNTIMES

TIMEOUT_S = 15  # the runtimes' hook timeout: above loopwarden-hook's own 10 s
MARK_BEGIN = "# >>> loopwarden hooks (written by `loopwarden hooks install`; replaced on the next install)"
MARK_END = "# <<< loopwarden hooks"


@dataclass(frozen=True)
class Plan:
    path: Path
    text: str  # the whole file as it will be written
    changed: bool


def config_path(runtime: str, project: str | None, user: bool, env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    if user:
        home = Path(env.get("HOME") or Path.home())
        if runtime == "codex":
            return Path(env["CODEX_HOME"]) / "config.toml" if env.get("CODEX_HOME") else home / ".codex" / "config.toml"
        return home / (".claude" if runtime == "claude-code" else ".gemini") / "settings.json"
    root = Path(project or ".")
    if runtime == "codex":
        return root / ".codex" / "config.toml"
    return root / (".claude" if runtime == "claude-code" else ".gemini") / "settings.json"


def hook_command(runtime: str, event: str, exe: str, flags: list[str]) -> str:
    return " ".join(shlex.quote(word) for word in [exe, runtime, event, *flags])


def default_exe() -> str:
    """`loopwarden-hook` when it is on PATH, else the one beside this Python (a venv)."""
    if shutil.which("loopwarden-hook"):
        return "loopwarden-hook"
    beside = Path(sys.executable).parent / "loopwarden-hook"
    return str(beside) if beside.exists() else "loopwarden-hook"


def hook_exe(given: str | None, build: bool) -> str:
    """The command the runtime runs: `given` (--hook-command) as it is; else the fast hook,
    built when missing or stale (unless not `build`: --print writes nothing); else the
    Python hook, saying on stderr why."""
    if given:
        return given
    python_hook = default_exe()
    try:
        return fast.ensure(python_hook, build_it=build)
    except fast.Unavailable as exc:
        print(f"loopwarden hooks: writing the Python hook {python_hook}: no fast hook: {exc}", file=sys.stderr)
        return python_hook


def _ours(handler: object, runtime: str) -> bool:
    if not isinstance(handler, dict):
        return False
    command, url = handler.get("command"), handler.get("url")
    if isinstance(command, str) and "loopwarden-hook" in command:
        return True
    return isinstance(url, str) and f"/{runtime}/" in url and handler.get("name") == "loopwarden"


def merge_json(existing: dict[str, Any], runtime: str, handlers: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """`existing` with loopwarden's handler for each event (earlier ones replaced)."""
    out = dict(existing)
    hooks = out.get("hooks", {})
    if not isinstance(hooks, dict):
        raise LoopwardenError("its `hooks` is not a JSON object")
    hooks = dict(hooks)
    for event, handler in handlers.items():
        groups = hooks.get(event, [])
        if not isinstance(groups, list):
            raise LoopwardenError(f"its `hooks.{event}` is not a list")
        kept = []
        for g in groups:
            if isinstance(g, dict) and isinstance(g.get("hooks"), list):
                inner = [h for h in g["hooks"] if not _ours(h, runtime)]
                if not inner and g["hooks"]:
                    continue  # a group that held only loopwarden's handler
                g = {**g, "hooks": inner}
            kept.append(g)
        hooks[event] = [*kept, {"hooks": [handler]}]
    out["hooks"] = hooks
    return out


def handlers(runtime: str, exe: str, flags: list[str], http_url: str | None) -> dict[str, dict[str, Any]]:
    out = {}
    for event in RUNTIMES[runtime].events:
        if http_url:  # Claude Code only (checked by plan)
            h: dict[str, Any] = {
                "type": "http",
                "url": f"{http_url.rstrip('/')}/{runtime}/{event}",
                "timeout": TIMEOUT_S,
            }
        else:
            h = {"type": "command", "command": hook_command(runtime, event, exe, flags)}
            h["timeout"] = TIMEOUT_S * 1000 if runtime == "gemini-cli" else TIMEOUT_S
        if runtime == "gemini-cli" or http_url:
            h["name"] = "loopwarden"
        out[event] = h
    return out


def codex_block(exe: str, flags: list[str]) -> str:
    lines = [MARK_BEGIN]
    for event in RUNTIMES["codex"].events:
        command = hook_command("codex", event, exe, flags)
        lines += [f"[[hooks.{event}]]", f"[[hooks.{event}.hooks]]", 'type = "command"']
        lines += [f"command = {json.dumps(command)}", f"timeout = {TIMEOUT_S}", ""]
    lines[-1] = MARK_END
    return "\n".join(lines) + "\n"


def merge_toml(existing: str, block: str) -> str:
    """`existing` with loopwarden's marked block replaced, or appended."""
    start = existing.find(MARK_BEGIN)
    end = existing.find(MARK_END, start)
    if start >= 0 and end >= 0:
        before, rest = existing[:start], existing[end + len(MARK_END) :].removeprefix("\n")
        existing = (before[:-1] if before.endswith("\n\n") else before) + rest  # the blank line added before it
    if not existing.strip():
        return block
    return existing + ("\n" if existing.endswith("\n") else "\n\n") + block


def plan(
    runtime: str,
    path: Path,
    *,
    exe: str = "loopwarden-hook",
    flags: list[str] | None = None,
    http_url: str | None = None,
) -> Plan:
    """What installing writes at `path` (nothing is written here)."""
    if runtime not in RUNTIMES:
        raise LoopwardenError(f"unknown runtime {runtime!r} (loopwarden knows {', '.join(RUNTIMES)})")
    if http_url and runtime != "claude-code":
        raise LoopwardenError(f"--http: {runtime} has command hooks only (Claude Code has http hooks)")
    flags = flags or []
    try:
        old = path.read_text(encoding="utf-8") if path.exists() else ""
    except (OSError, UnicodeDecodeError) as exc:
        raise LoopwardenError(f"cannot read {path}: {exc}") from None
    if runtime == "codex":
        text = merge_toml(old, codex_block(exe, flags))
        try:
            tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            where = "its `hooks` cannot take more [[hooks.EVENT]] entries"
            if _toml_error(old):
                where = "it is not valid TOML"
            raise LoopwardenError(f"cannot add loopwarden's hooks to {path}: {where} ({exc})") from None
        return Plan(path, text, text != old)
    try:
        data = json.loads(old) if old.strip() else {}
    except ValueError as exc:
        raise LoopwardenError(f"{path} is not plain JSON ({exc}); fix it, or add --print's hooks by hand") from None
    if not isinstance(data, dict):
        raise LoopwardenError(f"{path} is not a JSON object")
    try:
        merged = merge_json(data, runtime, handlers(runtime, exe, flags, http_url))
    except LoopwardenError as exc:
        raise LoopwardenError(f"cannot add loopwarden's hooks to {path}: {exc}") from None
    text = json.dumps(merged, indent=2, ensure_ascii=False) + "\n"
    return Plan(path, text, merged != data or not old)


def _toml_error(text: str) -> bool:
    try:
        tomllib.loads(text)
        return False
    except tomllib.TOMLDecodeError:
        return True


def write(p: Plan) -> None:
    p.path.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.path.with_name(p.path.name + ".loopwarden-tmp")
    try:
        tmp.write_text(p.text, encoding="utf-8")
        if p.path.exists():
            os.chmod(tmp, p.path.stat().st_mode & 0o7777)
        os.replace(tmp, p.path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise LoopwardenError(f"cannot write {p.path}: {exc.strerror or exc}") from None


@dataclass(frozen=True)
class InstallOptions:
    """`loopwarden hooks install`'s command line, as values (parsed in cli.py)."""

    runtime: str
    project: str | None = None  # the project's folder (None: this directory)
    user: bool = False  # the user's config instead
    print: bool = False  # print the config, write nothing
    fail_closed: bool = False
    url: str | None = None
    http: bool = False  # claude-code: http hooks posting to the sidecar
    hook_command: str | None = None


def run_install(args: InstallOptions) -> int:
    """`loopwarden hooks install`: 0 when written (or already there), or printed."""
    path = config_path(args.runtime, args.project, args.user)
    flags = ["--fail-closed"] if args.fail_closed else []
    if args.url:
        flags += ["--url", args.url]
    http_url = (args.url or "http://127.0.0.1:7077") if args.http else None
    exe = "loopwarden-hook" if http_url else hook_exe(args.hook_command, build=not args.print)
    p = plan(args.runtime, path, exe=exe, flags=flags, http_url=http_url)
    if args.print:
        sys.stdout.write(p.text)
        return 0
    if p.changed:
        write(p)
    print(f"{p.path}: {'written' if p.changed else 'unchanged, loopwarden hooks already there'}", file=sys.stderr)
    return 0
