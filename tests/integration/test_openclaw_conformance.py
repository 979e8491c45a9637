"""Every shared conformance scenario (v1, and v2's per-run sections: 210 run budgets, 230
shadow mode), published through the TypeScript client (clients/openclaw) to a real broker
and a real worker, gives the decisions offline replay gives, in privacy mode and in raw
mode alike. Scenarios with the same config share a worker; run and gateway ids are tagged
per mode and scenario so nothing collides. Holdout hashes the run id (semantics.md section
10), so a scenario whose config sets `loopwarden.holdoutPercent` keeps its ids as written
and gets topics and a worker of its own, per mode. Usage events go through the client's
`publish` like every scenario event (their seq as written); a usage event that spends a
budget is answered with its own abort decision, compared like the others."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from detectors import DetectionConfig, decode_event, encode, replay
from tests.conftest import V2_PER_RUN, scenario_files
from tests.integration.harness import WorkerProcess, new_prefix, setup_topics

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "clients" / "openclaw"
NODE = PLUGIN / "node_modules" / ".bin" / "node"


def holds_out(config: object) -> bool:
    """Whether a scenario's config sets loopwarden.holdoutPercent (whatever its value)."""
    block = config.get("loopwarden") if isinstance(config, dict) else None
    return isinstance(block, dict) and "holdoutPercent" in block


def groups() -> list[tuple[list[Path], bool]]:
    """(scenarios, as_written): those sharing a config share a worker, their ids tagged;
    a scenario setting holdoutPercent is a group of its own, its ids as written."""
    by_config: dict[str, list[Path]] = {}
    alone: list[list[Path]] = []
    for path in scenario_files(V2_PER_RUN):
        config = json.loads(path.read_text())["config"] if path.exists() else None
        if holds_out(config):
            alone.append([path])
        else:
            by_config.setdefault(json.dumps(config, sort_keys=True), []).append(path)
    return [(paths, False) for paths in by_config.values()] + [(paths, True) for paths in alone]


def group_id(group: tuple[list[Path], bool]) -> str:
    paths, as_written = group
    return "+".join(p.stem[:3] for p in paths) + ("-as-written" if as_written else "")


def offline(sc: dict) -> list[dict]:
    cfg = DetectionConfig(sc["config"])
    return [json.loads(encode(d)) for d in replay([decode_event(json.dumps(e)) for e in sc["events"]], cfg)]


def untag(d: dict, tag: str | None) -> tuple[int, dict]:
    """The scenario index of a decision and the decision with its ids as the scenario wrote
    them (tag None: sent as written, one scenario)."""
    if tag is None:
        return 0, d
    index, _, run = d["run_id"][len(tag) :].partition("-")
    strip = f"{tag}{index}-"
    out = dict(
        d, run_id=run, gateway_id=d["gateway_id"].removeprefix(strip), event_id=d["event_id"].removeprefix(strip)
    )
    return int(index), out


def node_client(bootstrap: str, prefix: str, mode: str, tag: str | None, paths: list[Path]) -> dict:
    if not NODE.exists():
        pytest.fail(f"{NODE} is missing: run `npm ci` in clients/openclaw (.ci/run does)")
    cmd = [
        str(NODE),
        "scripts/conformance.ts",
        "--bootstrap",
        bootstrap,
        "--prefix",
        prefix,
        "--mode",
        mode,
        *(["--as-written"] if tag is None else ["--tag", tag]),
        *map(str, paths),
    ]
    out = subprocess.run(cmd, cwd=PLUGIN, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout)


@pytest.mark.integration
@pytest.mark.parametrize("group", groups(), ids=group_id)
def test_scenarios_through_the_typescript_client(group, bootstrap, tmp_path, workers):
    paths, as_written = group
    assert all(p.exists() for p in paths), "no conformance scenarios found"
    scenarios = [json.loads(p.read_text()) for p in paths]
    expected = [offline(sc) for sc in scenarios]
    for sc, exp in zip(scenarios, expected, strict=True):  # replay itself agrees with each scenario
        assert len(exp) == len(sc["decisions"]), sc["name"]
        for e, d in zip(sc["decisions"], exp, strict=True):
            assert {k: d.get(k, "(absent)") for k in e} == e, sc["name"]

    def start_worker(name: str) -> tuple[str, WorkerProcess]:
        prefix = new_prefix()
        setup_topics(bootstrap, prefix)
        w = WorkerProcess(bootstrap, prefix, scenarios[0]["config"], tmp_path, name=name)
        workers.append(w)
        w.start()
        return prefix, w

    shared = None if as_written else start_worker("w")
    decided = {}
    for mode in ("privacy", "raw"):
        # ids as written: the same run ids in both modes, so each mode has topics of its own
        prefix, w = shared or start_worker(mode)
        tag = None if as_written else mode[0]
        got = node_client(bootstrap, prefix, mode, tag, paths)
        for ev in got["sent"]:
            if ev["type"] in ("tool_call", "tool_result"):
                raw_fields = {"params", "result", "error"} & ev.keys()
                assert not raw_fields if mode == "privacy" else "args_hash" not in ev, (mode, ev)
        per_scenario: list[list[dict]] = [[] for _ in scenarios]
        for d in got["decisions"]:
            i, d = untag(d, tag)
            per_scenario[i].append(d)
        for sc, exp, have in zip(scenarios, expected, per_scenario, strict=True):
            assert len(have) == len(exp), f"{mode} {sc['name']}: {len(have)} decisions, {len(exp)} expected\n{w.tail()}"
            runs = {d["run_id"] for d in exp}
            for run in runs:  # each gateway reads one partition, where a run's decisions keep their order
                assert [d for d in have if d["run_id"] == run] == [d for d in exp if d["run_id"] == run], (
                    f"{mode} {sc['name']} run {run}"
                )
        decided[mode] = [
            {run: [d for d in have if d["run_id"] == run] for run in sorted({d["run_id"] for d in have})}
            for have in per_scenario
        ]
        assert w.alive()
    assert decided["privacy"] == decided["raw"]  # decision for decision, run by run
