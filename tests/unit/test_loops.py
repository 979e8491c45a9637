"""The catalogue of runs (streams/tools/loops.py) against the rules: with the recommended
config (examples/config.json5), each kind of loop is stopped by the detector it is named
for, well within the simulator's 60 steps, and no normal run is ever flagged; with
OpenClaw's config (examples/openclaw.json5), the runs that repeat a call while making
progress are warned, which is why the recommended config turns section 12's rules on."""

from __future__ import annotations

import json
import random
from pathlib import Path

import json5
import pytest

from detectors import decode_event, load_config, replay
from streams.tools import loops

ROOT = Path(__file__).resolve().parents[2]
CONFIG = load_config((ROOT / "examples" / "config.json5").read_text())
OPENCLAW = load_config((ROOT / "examples" / "openclaw.json5").read_text())


def run_events(kind: loops.Kind, steps: int, rng: random.Random, run: str = "r") -> list[dict]:
    """The events the simulator sends for a run of this kind, had nothing stopped it."""
    out: list[dict] = []

    def add(ev: dict) -> None:
        out.append({"run_id": run, "seq": len(out), "gateway_id": "gw", "agent_id": kind.agent_id, **ev})

    for i in range(steps):
        if i == kind.compaction_at:
            add({"type": "compaction_retry"})
        s = kind.step(i, rng)
        call = {"tool_name": s.tool, "params": s.params, "tool_call_id": f"{run}-{i}"}
        add({"type": "tool_call", **call})
        add(
            {
                "type": "tool_result",
                **call,
                **({"result": loops.result(s.text)} if s.text is not None else {"error": s.error}),
            }
        )
    return out


def decisions(events: list[dict], config=CONFIG):
    return replay([decode_event(json.dumps(e).encode()) for e in events], config)


@pytest.mark.parametrize("name", list(loops.LOOPS))
def test_each_loop_is_stopped_by_its_detector(name):
    kind = loops.LOOPS[name]
    ds = decisions(run_events(kind, 60, random.Random(1)))
    stops = [d for d in ds if d.action in ("block", "abort")]
    assert stops, f"{name} was never stopped"
    assert stops[0].detector == kind.detector == name
    # nothing else flagged it first
    assert {d.detector for d in ds[: ds.index(stops[0])] if d.level != "none"} <= {name}


@pytest.mark.parametrize("name", list(loops.NORMALS))
@pytest.mark.parametrize("seed", range(10))
def test_a_normal_run_is_never_flagged(name, seed):
    ds = decisions(run_events(loops.NORMALS[name], 40, random.Random(seed)))
    assert len(ds) == 40 and all(d.level == "none" and d.action == "allow" for d in ds)


@pytest.mark.parametrize("name", [k.name for k in loops.NORMALS.values() if k.rules])
def test_openclaws_rules_warn_the_runs_that_make_progress(name):
    ds = decisions(run_events(loops.NORMALS[name], 40, random.Random(1)), OPENCLAW)
    assert [d.action for d in ds if d.action != "allow"] and {d.detector for d in ds if d.level != "none"} == {
        "generic_repeat"
    }


@pytest.mark.parametrize("name", [k.name for k in loops.LOOPS.values() if k.rules])
def test_section_12_loops_go_on_under_openclaws_rules_until_its_own_stop_them(name):
    kind = loops.LOOPS[name]
    ds = decisions(run_events(kind, 60, random.Random(1)), OPENCLAW)
    first = next((i for i, d in enumerate(ds) if d.action in ("block", "abort")), None)
    stopped = next(i for i, d in enumerate(decisions(run_events(kind, 60, random.Random(1)))) if d.action == "block")
    assert stopped < 10 and (first is None or first > stopped)


def test_the_plain_loops_need_no_agent_no_compaction_and_no_rules():
    assert loops.PLAIN_LOOPS == ("generic_repeat", "known_poll_no_progress", "ping_pong", "unknown_tool_repeat")
    assert set(loops.KINDS) == {*loops.NORMALS, *loops.LOOPS}


def test_the_configs_differ_only_in_loopwarden_rules():
    rec = json5.loads((ROOT / "examples" / "config.json5").read_text())
    oc = json5.loads((ROOT / "examples" / "openclaw.json5").read_text())
    assert set(rec.pop("loopwarden")) == {"rules"}
    assert rec == oc
