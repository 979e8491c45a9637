"""The fast hook: `fast_hook.c` (beside this file) built with the machine's C compiler
when `loopwarden hooks install` runs, and written into the runtime's config in place of
`loopwarden-hook`. It does what the Python hook does, answer for answer and byte for
byte, with no interpreter to start on every tool call (`python -m benchmarks.hooks`
times both).

Why a C program and not a shell script over curl: the script would start /bin/sh and
curl (and head, to bound the input) on every call, and curl alone starts slower than
the whole C hook runs; it would also give curl's error texts, not Python's, so the
messages could not be the same. A compiler is on most developer machines, and where
there is none the Python hook is written instead.

Where it goes: beside the Python hook (`loopwarden-hook`, whose absolute path is built
into it: it hands that hook any command line it does not read itself) when that folder
is writable, else under $XDG_DATA_HOME/loopwarden (default ~/.local/share/loopwarden).
A build is kept while its build id (a hash of the source, the generated header and the
compiler's command) is in the binary; otherwise it is built again.

When the Python hook is written instead (`Unavailable` says why): no C compiler (CC, else
cc, gcc or clang on the PATH), the build fails, the built program does not answer a
self-test exactly as the Python hook does, or no `loopwarden-hook` is installed to hand
unusual command lines to.
"""

from __future__ import annotations

import hashlib
import io
import os
import shlex
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

from . import hook as hook_mod
from .runtimes import FAIL_CLOSED, MAX_INPUT_BYTES, RUNTIMES, fail_answer

SOURCE = Path(__file__).with_name("fast_hook.c")
NAME = "loopwarden-hook-fast"
CFLAGS = ["-O2", "-std=gnu11", "-Wall", "-Wextra"]
_MARK = "LOOPWARDENCAUSE"


class Unavailable(Exception):
    """The fast hook cannot be used here; the message says why."""


def compiler(env: dict[str, str] | None = None) -> list[str]:
    """The C compiler's command: $CC, else cc, gcc or clang from the PATH."""
    env = dict(os.environ) if env is None else env
    given = env.get("CC", "").strip()
    if given:
        words = shlex.split(given)
        if not shutil.which(words[0], path=env.get("PATH")):
            raise Unavailable(f"the C compiler {words[0]} (CC) is not there")
        return words
    for name in ("cc", "gcc", "clang"):
        found = shutil.which(name, path=env.get("PATH"))
        if found:
            return [found]
    raise Unavailable("no C compiler (cc, gcc or clang) on the PATH; set CC to use another")


def _c_string(text: str) -> str:
    """A C string literal of `text`'s bytes (as the file system encodes them), every byte
    but letters, digits and some punctuation written in octal."""
    plain = set(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 -_./:,;()[]{}")
    return '"' + "".join(chr(b) if b in plain else f"\\{b:03o}" for b in os.fsencode(text)) + '"'


def config_header(python_hook: str) -> str:
    """lw_config.h: the Python hook's path, the default URL and input limit, and each
    runtime's hook events with the fail-closed answer around the cause (from
    runtimes.fail_answer, so the C program answers as the Python hook does)."""
    lines = [
        f"#define LW_PYTHON_HOOK {_c_string(python_hook)}",
        f"#define LW_DEFAULT_URL {_c_string(hook_mod.DEFAULT_URL)}",
        f"#define LW_MAX_INPUT_BYTES {MAX_INPUT_BYTES}LL",
        "static const struct endpoint LW_ENDPOINTS[] = {",
    ]
    for runtime, rt in RUNTIMES.items():
        for event in rt.events:
            deny = fail_answer(runtime, event, FAIL_CLOSED, _MARK)
            head, tail = deny.split(_MARK) if deny else ("", "")
            lines.append(f"    {{{_c_string(runtime)}, {_c_string(event)}, {_c_string(head)}, {_c_string(tail)}}},")
    lines.append("};")
    return "\n".join(lines) + "\n"


def build(python_hook: str, out: Path, env: dict[str, str] | None = None) -> Path:
    """Compile the fast hook to `out` (replaced only by a build that passed its
    self-test). Raises Unavailable naming the cause."""
    cc = compiler(env)
    header = config_header(python_hook)
    build_id = build_id_of(cc, header)
    with tempfile.TemporaryDirectory(prefix="loopwarden-fast-hook-") as tmp:
        (Path(tmp) / "lw_config.h").write_text(header + f'#define LW_BUILD_ID "{build_id}"\n')
        exe = Path(tmp) / NAME
        argv = [*cc, *CFLAGS, "-I", tmp, "-o", str(exe), str(SOURCE)]
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise Unavailable(f"{cc[0]} did not run: {exc}") from None
        if p.returncode != 0:
            raise Unavailable(f"{cc[0]} could not build {SOURCE.name}: {p.stderr.strip()[-2000:]}")
        self_test(exe, python_hook)
        out.parent.mkdir(parents=True, exist_ok=True)
        staged = out.with_name(f".{out.name}.{os.getpid()}")
        shutil.copyfile(exe, staged)
        os.chmod(staged, 0o755)
        os.replace(staged, out)
    return out


def build_id_of(cc: list[str], header: str) -> str:
    digest = hashlib.sha256(SOURCE.read_bytes() + header.encode() + "\0".join([*cc, *CFLAGS]).encode())
    return digest.hexdigest()[:24]


def is_current(exe: Path, python_hook: str, env: dict[str, str] | None = None) -> bool:
    """`exe` exists and is the build this source, header and compiler make."""
    try:
        data = exe.read_bytes()
    except OSError:
        return False
    build_id = build_id_of(compiler(env), config_header(python_hook))
    return f"loopwarden-hook-fast build {build_id}".encode() in data and os.access(exe, os.X_OK)


def self_test(exe: Path, python_hook: str) -> None:
    """The built program answers as the Python hook (run in this process) for a call the
    sidecar cannot take (a port bound and not listening), both policies, and for input over
    the limit; Unavailable when not."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}"
        payload = b'{"session_id": "s", "tool_name": "Bash", "tool_input": {"command": "ls"}}'
        cases = [
            ["claude-code", "PreToolUse", "--fail-closed", "--url", url],
            ["gemini-cli", "BeforeTool", "--url", url],
            ["codex", "PreToolUse", "--fail-closed", "--max-input-bytes", "8", "--url", url],
        ]
        for argv in cases:
            env = {k: v for k, v in os.environ.items() if k not in ("CLAUDE_PROJECT_DIR", "GEMINI_PROJECT_DIR")}
            try:
                p = subprocess.run([str(exe), *argv], input=payload, capture_output=True, timeout=10, env=env)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise Unavailable(f"the built fast hook did not run: {exc}") from None
            want = python_answer(argv, payload)
            if (p.returncode, p.stdout, p.stderr) != want:
                got = (p.returncode, p.stdout, p.stderr)
                raise Unavailable(f"the built fast hook answered {got!r} where the Python hook answers {want!r}")


def python_answer(argv: list[str], stdin: bytes) -> tuple[int, bytes, bytes]:
    """hook.run's exit code, stdout and stderr as a `loopwarden-hook` process writes them
    (UTF-8; stderr with backslashreplace)."""
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", newline="")
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace", newline="")
    code = hook_mod.run(argv, io.BytesIO(stdin), out, err)
    out.flush()
    err.flush()
    return code, out.buffer.getvalue(), err.buffer.getvalue()


def python_hook_path(exe: str) -> str:
    """The absolute path of the Python hook `exe` (a name on the PATH or a path)."""
    found = shutil.which(exe)
    if not found:
        raise Unavailable(f"no {exe} to hand unusual command lines to (pip install loopwarden)")
    return os.path.abspath(found)


def destination(python_hook: str, env: dict[str, str] | None = None) -> Path:
    """Beside the Python hook when that folder is writable, else in the user's data folder."""
    env = dict(os.environ) if env is None else env
    beside = Path(python_hook).parent
    if os.access(beside, os.W_OK):
        return beside / NAME
    data = Path(env.get("XDG_DATA_HOME") or Path(env.get("HOME") or Path.home()) / ".local" / "share")
    tag = hashlib.sha256(python_hook.encode()).hexdigest()[:12]
    return data / "loopwarden" / tag / NAME


def ensure(python_exe: str, *, build_it: bool = True, env: dict[str, str] | None = None) -> str:
    """The fast hook's path, built if it is missing or stale (only when `build_it`: else the
    path it would be built at). Raises Unavailable naming why the Python hook must do."""
    python_hook = python_hook_path(python_exe)
    out = destination(python_hook, env)
    if not build_it:
        compiler(env)
        return str(out)
    if not is_current(out, python_hook, env):
        build(python_hook, out, env)
    return str(out)
