"""Every shared conformance scenario (v1; v2: 210 run budgets, 220 the fleet's tool
breaker, 230 shadow mode, 240 stop orders; v3: 250 fleet spend caps, 260 section 12's
rules), published through the TypeScript client (clients/openclaw) to a real broker and a
real worker, gives the decisions offline replay gives, in privacy mode and in raw mode
alike. Scenarios with the same config share a worker; run and gateway ids are tagged per
mode and scenario so nothing collides.

A scenario keeps its ids as written, with topics and a worker of its own per mode, when
its config sets `loopwarden.holdoutPercent` (holdout hashes the run id, semantics.md
section 10) or touches the fleet (sections 9 and 11): a stop order names run, gateway or
agent ids, a breaker counts distinct runs across the whole fleet, and a spend cap counts
an agent's (or all) calls across runs, so two scenarios or two modes sharing a worker
would trip each other's. Its stop orders are published to its fleet topic before the
worker starts; after each event that opens a breaker or reaches a cap offline, the
TypeScript script waits until the worker holds that signal (its /metrics
`loopwarden_fleet_signals`) before sending the next, as the Kafka harness does
(test_conformance_kafka.py). In privacy mode a failed result carries `failed: true`, what
makes it a failure for the breaker once its error text is hashed away.

Usage events go through the client's `publish` like every scenario event (their seq as
written); a usage event that spends a budget is answered with its own abort decision,
compared like the others."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from detectors import DetectionConfig
from tests.conftest import V2_ALL, V3_ALL, scenario_files
from tests.integration.harness import WorkerProcess, new_prefix, produce, setup_topics
from tests.integration.test_conformance_kafka import breaker_cuts, offline, wait_for_signals

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "clients" / "openclaw"
NODE = PLUGIN / "node_modules" / ".bin" / "node"


def holds_out(config: object) -> bool:
    """Whether a scenario's config sets loopwarden.holdoutPercent (whatever its value)."""
    block = config.get("loopwarden") if isinstance(config, dict) else None
    return isinstance(block, dict) and "holdoutPercent" in block


def on_its_own(sc: dict) -> bool:
    """Whether a scenario needs its ids as written and a worker of its own: holdout, stop
    orders, the tool breaker or spend caps (see the module docstring)."""
    cfg = DetectionConfig(sc["config"])
    return holds_out(sc["config"]) or bool(sc.get("fleet")) or cfg.tool_breaker is not None or bool(cfg.spend_caps)


def groups() -> list[tuple[list[Path], bool]]:
    """(scenarios, as_written): those sharing a config share a worker, their ids tagged;
    a scenario with holdout or the fleet is a group of its own, its ids as written."""
    by_config: dict[str, list[Path]] = {}
    alone: list[list[Path]] = []
    for path in scenario_files(V2_ALL, V3_ALL):
        sc = json.loads(path.read_text()) if path.exists() else {"config": None}
        if on_its_own(sc):
            alone.append([path])
        else:
            by_config.setdefault(json.dumps(sc["config"], sort_keys=True), []).append(path)
    return [(paths, False) for paths in by_config.values()] + [(paths, True) for paths in alone]


def group_id(group: tuple[list[Path], bool]) -> str:
    paths, as_written = group
    return "+".join(p.stem[:3] for p in paths) + ("-as-written" if as_written else "")


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


def node_client(
    bootstrap: str, prefix: str, mode: str, tag: str | None, paths: list[Path], w: WorkerProcess, pause: tuple[str, ...]
) -> dict:
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
        *pause,
        *map(str, paths),
    ]
    out = subprocess.run(cmd, cwd=PLUGIN, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, f"{out.stderr[-4000:]}\nthe worker's log:\n{w.tail()}"
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

    # A group of its own (as_written) is one scenario: its stop orders and breaker cuts.
    orders = scenarios[0].get("fleet", []) if as_written else []
    cuts = breaker_cuts(scenarios[0]) if as_written else []

    def start_worker(name: str) -> tuple[str, WorkerProcess]:
        prefix = new_prefix()
        s = setup_topics(bootstrap, prefix)
        if orders:  # published first, as an operator would before the calls
            produce(bootstrap, s.fleet_topic, [(r["id"].encode(), json.dumps(r).encode()) for r in orders])
        w = WorkerProcess(bootstrap, prefix, scenarios[0]["config"], tmp_path, name=name)
        workers.append(w)
        w.start()
        wait_for_signals(w, len({r["id"] for r in orders}))
        return prefix, w

    def pause(w: WorkerProcess) -> tuple[str, ...]:
        """The script's flags to wait, after each event that opens a breaker, until the
        worker holds it (its fleet signals: the orders, then one more per breaker)."""
        if not cuts:
            return ()
        at = ",".join(map(str, cuts))
        held = str(len({r["id"] for r in orders}))
        return ("--cuts", at, "--signals", held, "--metrics", f"http://127.0.0.1:{w.port}/metrics")

    shared = None if as_written else start_worker("w")
    decided = {}
    for mode in ("privacy", "raw"):
        # ids as written: the same run ids in both modes, so each mode has topics of its own
        prefix, w = shared or start_worker(mode)
        tag = None if as_written else mode[0]
        got = node_client(bootstrap, prefix, mode, tag, paths, w, pause(w))
        written = [e for sc in scenarios for e in sc["events"]]
        for e, ev in zip(written, got["sent"], strict=True):
            if ev["type"] in ("tool_call", "tool_result"):
                raw_fields = {"params", "result", "error"} & ev.keys()
                assert not raw_fields if mode == "privacy" else "args_hash" not in ev, (mode, ev)
            if mode == "privacy" and ev["type"] == "tool_result":  # the breaker's failure, its error hashed away
                assert ev.get("failed", False) == ("error" in e or e.get("failed") is True), (e, ev)
        per_scenario: list[list[dict]] = [[] for _ in scenarios]
        for d in got["decisions"]:
            i, d = untag(d, tag)
            per_scenario[i].append(d)
        for sc, exp, have in zip(scenarios, expected, per_scenario, strict=True):
            have = at_least_once(have, exp)
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


def at_least_once(have: list[dict], exp: list[dict]) -> list[dict]:
    """The decisions received, each event's beyond the count expected of it dropped: a
    worker may publish a decision again (an event folded twice after a rebalance or a
    reread; gateways keep the first), and such a repeat must equal the first. A scenario
    that sends an event twice (170) expects its decision twice, so repeats are counted
    per event, not removed."""
    want = Counter(d["event_id"] for d in exp)
    first: dict[str, dict] = {}
    seen: Counter[str] = Counter()
    out = []
    for d in have:
        eid = d["event_id"]
        seen[eid] += 1
        if seen[eid] <= want[eid] or eid not in first:  # kept: expected, or not expected at all
            out.append(d)
            first.setdefault(eid, d)
        else:
            assert d == first[eid], f"a repeat that differs from the first: {d}"
    return out
