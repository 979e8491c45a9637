"""Every shared scenario through the offline `loopwarden replay` command."""

import json
import shlex
import subprocess
import sys

import pytest

from streams.tools.launch import command
from tests.conftest import ROOT, V2_ALL, V3_ALL, conformance_dir, scenario_files


def first_difference(expected: list[dict], got: list[dict]) -> str | None:
    if len(expected) != len(got):
        return f"{len(got)} decisions, expected {len(expected)}"
    for i, (e, g) in enumerate(zip(expected, got, strict=True)):
        for k, v in e.items():
            if g.get(k) != v:
                return f"decision {i} (run {e.get('run_id')} seq {e.get('seq')}): {k}={g.get(k)!r}, expected {v!r}"
    return None


def write_scenario(sc: dict, d) -> tuple:
    cfg, ev = d / "config.json", d / "events.jsonl"
    cfg.write_text(json.dumps(sc["config"]))
    ev.write_text("".join(json.dumps(e) + "\n" for e in sc["events"]))
    return cfg, ev


@pytest.mark.parametrize("path", scenario_files(V2_ALL, V3_ALL), ids=lambda p: p.stem)
def test_scenario_through_replay_command(path, tmp_path):
    assert path.exists(), f"no conformance scenarios in {conformance_dir()}"
    sc = json.loads(path.read_text())
    cfg, ev = write_scenario(sc, tmp_path)
    out = tmp_path / "decisions.jsonl"
    fleet = []
    if sc.get("fleet"):  # stop orders and spend cap lifts, given as `--fleet FILE` (wire-format.md)
        (tmp_path / "fleet.jsonl").write_text("".join(json.dumps(r) + "\n" for r in sc["fleet"]))
        fleet = ["--fleet", str(tmp_path / "fleet.jsonl")]
    p = subprocess.run(
        command("replay", "--config", str(cfg), "--input", str(ev), "--output", str(out), *fleet),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    got = [json.loads(x) for x in out.read_text().splitlines() if x.strip()]
    assert first_difference(sc["decisions"], got) is None, first_difference(sc["decisions"], got)


def test_the_maintainers_checker_agrees():
    tool = ROOT.parent / "shared" / "tools" / "conformance_check.py"
    assert tool.exists(), tool
    p = subprocess.run(
        [
            sys.executable,
            str(tool),
            shlex.join(command("replay")),
            str(conformance_dir()),
            str(conformance_dir() / "v2"),
            str(conformance_dir() / "v3"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "scenarios pass" in p.stdout
