"""The README's offline example runs as written, so the quickstart cannot rot."""

import re
import shlex
import subprocess
import sys

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
        p = subprocess.run([sys.executable, "-m", "streams.cli", *argv[1:]], cwd=ROOT, capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        actions = [line.split('"action":"')[1].split('"')[0] for line in p.stdout.splitlines()]
        assert actions[-1] == "block" and "warn" in actions
        assert '"decisions": 6' in p.stderr


def test_readme_gives_the_test_command_that_ci_runs():
    assert ".venv/bin/python -m pytest" in readme_commands(".venv/bin/python -m pytest")
    assert ".venv/bin/python -m pytest" in (ROOT / ".ci" / "run").read_text()
