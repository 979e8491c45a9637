"""The README's offline example runs as written, and its Python examples import what they
name, so the quickstart cannot rot."""

import importlib
import re
import shlex
import subprocess

import pytest

from streams.tools.launch import command
from tests.conftest import ROOT


def readme_commands(prefix: str) -> list[str]:
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", text, re.S)
    return [ln.strip() for b in blocks for ln in b.splitlines() if ln.strip().startswith(prefix)]


def test_readme_replay_example_runs():
    cmds = readme_commands(".venv/bin/loopwarden replay")
    assert cmds, "the README shows an offline replay example"
    for cmd in cmds:
        argv = shlex.split(cmd)
        p = subprocess.run(command(*argv[1:]), cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        actions = [line.split('"action":"')[1].split('"')[0] for line in p.stdout.splitlines()]
        assert actions[-1] == "block" and "warn" in actions
        assert '"decisions": 6' in p.stderr


def readme_test_command() -> list[str]:
    """The command of the fenced block under the README's paragraph on running the tests."""
    text = (ROOT / "README.md").read_text()
    # the paragraph (lines up to a blank one), then the block right after it
    m = re.search(r"^Run the tests\b.*\n(?:.+\n)*\n```sh\n((?s:.*?))```", text, re.M)
    assert m, "the README has a paragraph 'Run the tests' with a sh block under it"
    lines = [ln for ln in m.group(1).splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert len(lines) == 1, lines
    return shlex.split(lines[0], comments=True)


def ci_pytest_commands() -> list[list[str]]:
    """Every command line of .ci/run that runs pytest, as argv."""
    out = []
    for line in (ROOT / ".ci" / "run").read_text().splitlines():
        argv = shlex.split(line, comments=True)
        if "pytest" in argv:
            out.append(argv)
    return out


def test_readme_gives_the_test_command_that_ci_runs():
    cmd = readme_test_command()
    assert cmd[:3] == [".venv/bin/python", "-m", "pytest"]
    assert ci_pytest_commands() == [cmd]


def test_readme_python_examples_import_what_they_name():
    # `from streams... import A, B` lines, and `A(...)  # from streams...` comments, in the
    # README's python blocks: the module imports (its framework installed) and has the names.
    text = (ROOT / "README.md").read_text()
    code = "\n".join(re.findall(r"```python\n(.*?)```", text, re.S))
    named = re.findall(r"^\s*from (streams[\w.]*) import ([\w, ]+)$", code, re.M)
    named += [(m, n) for n, m in re.findall(r"(\w+)\(.*# from (streams[\w.]*)$", code, re.M)]
    assert len(named) >= 3, named
    frameworks = {"langchain": "langchain", "openai_agents": "agents"}
    for module, names in named:
        if module.rpartition(".")[2] in frameworks:
            pytest.importorskip(frameworks[module.rpartition(".")[2]])
        mod = importlib.import_module(module)
        for name in names.split(","):
            assert hasattr(mod, name.strip()), f"{module} has no {name.strip()}"
