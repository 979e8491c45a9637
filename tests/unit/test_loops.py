"""The catalogue of runs (streams/tools/loops.py) against the rules: with the example
config, each kind of loop is stopped by the detector it is named for, well within the
simulator's 60 steps, and a normal run is never flagged."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from detectors import decode_event, load_config, replay
from streams.tools import loops

ROOT = Path(__file__).resolve().parents[2]
CONFIG = load_config((ROOT / "examples" / "config.json5").read_text())


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


def decisions(events: list[dict]):
    return replay([decode_event(json.dumps(e).encode()) for e in events], CONFIG)


@pytest.mark.parametrize("name", list(loops.LOOPS))
def test_each_loop_is_stopped_by_its_detector(name):
    kind = loops.LOOPS[name]
    ds = decisions(run_events(kind, 60, random.Random(1)))
    stops = [d for d in ds if d.action in ("block", "abort")]
    assert stops, f"{name} was never stopped"
    assert stops[0].detector == kind.detector == name
    # nothing else flagged it first
    assert {d.detector for d in ds[: ds.index(stops[0])] if d.level != "none"} <= {name}


@pytest.mark.parametrize("seed", range(20))
def test_a_normal_run_is_never_flagged(seed):
    ds = decisions(run_events(loops.NORMAL, 40, random.Random(seed)))
    assert len(ds) == 40 and all(d.level == "none" and d.action == "allow" for d in ds)


def test_the_plain_loops_need_no_agent_and_no_compaction():
    assert loops.PLAIN_LOOPS == ("generic_repeat", "known_poll_no_progress", "ping_pong", "unknown_tool_repeat")
    assert set(loops.KINDS) == {"normal", *loops.LOOPS}
