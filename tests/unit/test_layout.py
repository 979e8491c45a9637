"""The package layout's promises: a gateway library that imports no worker, and one
command registry whose commands return only the documented exit codes."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import streams.cli as cli

ROOT = Path(__file__).resolve().parents[2]
WORKER_ONLY = ("faust", "mode", "rich", "prometheus_client", "venusian", "croniter")


def test_the_client_and_the_core_import_no_worker_package():
    # A fresh interpreter: this test process has imported the worker already.
    code = (
        "import json, sys, detectors, detectors.ingest, streams.gateway, streams.gateway.client, "
        "streams.gateway.adapters, streams.replay; "
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    loaded = set(
        json.loads(
            subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True, text=True).stdout
        )
    )
    assert "aiokafka" in loaded and "msgspec" in loaded  # the check sees real imports
    assert not loaded & set(WORKER_ONLY), f"the gateway library loads worker packages: {loaded & set(WORKER_ONLY)}"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports anywhere in it (functions and TYPE_CHECKING blocks
    included), relative imports made absolute; `from a import b` counts as a and a.b."""
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found.add(module)
            found.update(f"{module}.{a.name}" for a in node.names)
    return found


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_never_the_gateway_library_imports_the_worker_audit_tools_admin_or_commands():
    # The gateway package is what a gateway installs and loads: of the shell it may use
    # only itself and the Kafka layer under it (but its Faust and batch-producer modules),
    # and none of the worker's third-party packages.
    forbidden = (
        "streams.worker",
        "streams.audit",
        "streams.tools",
        "streams.admin",
        "streams.cli",
        "streams.kafka.faust_compat",
        "streams.kafka.producer",
        *WORKER_ONLY,
    )
    files = sorted((ROOT / "streams" / "gateway").rglob("*.py"))
    seen = set()
    for path in files:
        for module in imported_modules(path):
            seen.add(module)
            where = f"{path.relative_to(ROOT)} imports {module}"
            assert not _within(module, forbidden), where
            assert not module.startswith("streams.") or _within(module, ("streams.gateway", "streams.kafka")), where
    assert {"streams.kafka.errors", "streams.gateway.client", "aiokafka", "detectors.wire"} <= seen  # a real scan


def test_the_kafka_layer_stands_under_every_other_room_of_the_shell():
    # streams/kafka is the floor: settings, errors, clients, range reads, the batch
    # producer, the aiokafka and Faust workarounds. It builds on the core alone.
    files = sorted((ROOT / "streams" / "kafka").rglob("*.py"))
    assert len(files) >= 8
    for path in files:
        for module in imported_modules(path):
            where = f"{path.relative_to(ROOT)} imports {module}"
            assert not module.startswith("streams.") or _within(module, ("streams.kafka",)), where


def test_nothing_in_the_project_imports_the_deprecated_paths():
    # streams.client and streams.frameworks only hand on the gateway package's names, for
    # users' code (tests/unit/test_deprecated_paths.py); the project itself uses the new paths.
    shims = {ROOT / "streams" / "client.py", *(ROOT / "streams" / "frameworks").glob("*.py")}
    files = [p for d in ("streams", "tests", "benchmarks", "examples") for p in (ROOT / d).rglob("*.py")]
    assert len(files) > 100
    for path in set(files) - shims:
        old = {m for m in imported_modules(path) if _within(m, ("streams.client", "streams.frameworks"))}
        assert not old, f"{path.relative_to(ROOT)} imports {sorted(old)}"


def test_the_tests_import_nothing_from_the_benchmarks():
    # What the tests and the benchmarks share is in streams/tools (the harness, the trace):
    # a benchmark changes with what it measures, and no test depends on it.
    files = sorted((ROOT / "tests").rglob("*.py"))
    assert len(files) > 50
    for path in files:
        found = {m for m in imported_modules(path) if _within(m, ("benchmarks",))}
        assert not found, f"{path.relative_to(ROOT)} imports {sorted(found)}"


def _starts_a_worker(call: ast.Call) -> bool:
    """`Worker(...)` or `launch.Worker(...)` (not Faust's), or `command("worker", ...)`."""
    f = call.func
    if isinstance(f, ast.Name) and f.id == "Worker":
        return True
    if isinstance(f, ast.Attribute) and f.attr == "Worker" and isinstance(f.value, ast.Name):
        return f.value.id == "launch"
    named = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
    first = call.args[0] if call.args else None
    return named == "command" and isinstance(first, ast.Constant) and first.value == "worker"


def test_tests_and_benchmarks_start_a_worker_one_way():
    # `loopwarden worker` as a child process is streams.tools.harness.WorkerProcess, for
    # every test and benchmark (the launcher's own tests aside).
    own = {ROOT / "streams" / "tools" / "harness.py", ROOT / "tests" / "unit" / "test_launch.py"}
    files = [p for d in ("tests", "benchmarks") for p in (ROOT / d).rglob("*.py")]
    files += [ROOT / "streams" / "tools" / "demo.py"]
    for path in sorted(set(files) - own):
        tree = ast.parse(path.read_text())
        calls = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and _starts_a_worker(n)]
        assert not calls, f"{path.relative_to(ROOT)} starts a worker itself, line {calls}"


def test_a_replay_starts_without_kafka_or_logging(tmp_path):
    # `loopwarden replay` is timed against a floor that imports next to nothing: what it
    # needs no client, event loop or logging for stays unloaded (each costs start-up time).
    events = tmp_path / "events.jsonl"
    events.write_text('{"type":"tool_call","run_id":"r","seq":0,"gateway_id":"g","tool_name":"read","params":{}}\n')
    code = (
        "import json, sys, streams.cli; "
        f"rc = streams.cli.main(['replay', '--input', {str(events)!r}, '--output', {str(tmp_path / 'out')!r}]); "
        "print(json.dumps([rc, sorted({m.split('.')[0] for m in sys.modules})]))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True, text=True).stdout
    rc, loaded = json.loads(out)
    assert rc == 0 and (tmp_path / "out").read_text().count('"action":"allow"') == 1  # it did replay
    assert "msgspec" in loaded  # the check sees real imports
    assert not {"aiokafka", "asyncio", "logging", "ssl", *WORKER_ONLY} & set(loaded)


def _declared_dependencies() -> list[str]:
    import tomllib

    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["dependencies"]


def test_a_plain_install_needs_only_msgspec_aiokafka_and_json5():
    names = sorted(d.split(">")[0].split("=")[0].split("[")[0].strip().lower() for d in _declared_dependencies())
    assert names == ["aiokafka", "json5", "msgspec"]


def test_every_subcommand_is_registered_in_cli_only():
    # No other module adds a subcommand (one registry): add_parser appears in cli.py alone.
    others = [p for p in (ROOT / "streams").rglob("*.py") if p.name != "cli.py" and "add_parser(" in p.read_text()]
    assert others == []
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert {"replay", "worker", "topics", "kafka", "simulate", "demo", "top", "audit"} <= set(sub.choices)


def test_commands_return_only_documented_exit_codes():
    # Every literal code a command function returns (cmd_* in cli.py, and the run_* /
    # main_* entry points of the tools, nested functions included) is an ExitCode;
    # cli.main() also refuses any other at run time.
    documented = {int(c) for c in cli.ExitCode}
    seen = 0
    for path in [ROOT / "streams" / "cli.py", *(ROOT / "streams" / "tools").glob("*.py")]:
        tree = ast.parse(path.read_text())
        for fn in tree.body:
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or not fn.name.startswith(
                ("cmd_", "run_", "main_")
            ):
                continue
            for node in ast.walk(fn):
                if not isinstance(node, ast.Return) or node.value is None:
                    continue
                values = [node.value.body, node.value.orelse] if isinstance(node.value, ast.IfExp) else [node.value]
                for v in values:
                    if isinstance(v, ast.Constant) and type(v.value) is int:
                        seen += 1
                        assert v.value in documented, f"{path.name}:{node.lineno} returns {v.value}"
    assert seen >= 5  # the scan found the commands' returns
    # The codes are documented once, in the module docstring and in --help.
    for code in documented:
        assert f"{code} " in cli.__doc__ or f"{code}  " in cli.__doc__
    assert "exit codes" in cli.build_parser().format_help()


def test_no_function_over_60_lines_and_no_class_over_250_in_the_shell_and_the_core():
    """Functions and classes of streams/ and detectors/ stay readable in one screen or a
    few (the argparse table of the command line aside)."""
    import ast

    over = []
    for root in ("streams", "detectors"):
        for path in sorted((ROOT / root).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1 if hasattr(node, "lineno") else 0
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name != "build_parser":
                    if lines > 60:
                        over.append(f"{path.relative_to(ROOT)}: {node.name} ({lines} lines)")
                elif isinstance(node, ast.ClassDef) and lines > 250:
                    over.append(f"{path.relative_to(ROOT)}: class {node.name} ({lines} lines)")
    assert over == []
