"""Events and decisions for the tests: Hypothesis strategies for realistic event streams,
shared by the property tests, and the helpers every test uses on events and decisions
(`offline`, `per_run`, `distinct`), written once.

A stream mixes single calls, whose tool, params and result are drawn independently from
pools of odd shapes (aliases, 1 vs 1.0, plans, sends, the guard's own echo, non-object
results) and of the catalogue's steps, with stretches of a whole kind of run from the
catalogue (streams/tools/loops.py): a normal run or a loop, with its agent and its
compaction."""

from __future__ import annotations

import json
import random

from hypothesis import strategies as st

from detectors import DetectionConfig, decode_event, encode, replay
from detectors.fleet import decode_fleet_record
from streams.tools import loops

# Two steps of every kind in the catalogue (a ping-pong's two sides, a normal run's two calls).
_SAMPLES = [kind.step(i, random.Random(i)) for kind in loops.KINDS.values() for i in (0, 1)]


def _unique(xs: list) -> list:
    out: list = []
    for x in xs:
        if x not in out:
            out.append(x)
    return out


TOOLS = _unique(
    [
        "read",
        "exec",
        "Bash",
        "process",
        "command_status",
        "update_plan",
        "message",
        "web_fetch",
        *(s.tool for s in _SAMPLES),
    ]
)
PARAMS = _unique(
    [
        {"path": "/a"},
        {"path": "/b", "n": 1.0},
        {"command": "make test"},
        {"action": "log", "sessionId": "s1"},
        {"action": "send", "to": "x", "text": "hi"},
        {"plan": [{"step": "one", "status": "pending"}], "explanation": "why"},
        None,
        "__absent__",
        *(s.params for s in _SAMPLES),
    ]
)
RESULTS = _unique(
    [
        {"content": [{"type": "text", "text": "same"}], "details": {"bytes": 4}},
        {"details": {"status": "completed", "exitCode": 1, "aggregated": "boom", "durationMs": 5}},
        {"details": {"status": "running", "tail": "..."}},
        {"details": {"status": "blocked", "deniedReason": "tool-loop"}},
        {"details": {"messageId": "m1", "ok": True}},
        "__error__disk full",
        [1, 2],
        "__absent__",
        *(loops.result(s.text) if s.text is not None else "__error__" + str(s.error) for s in _SAMPLES),
    ]
)
KIND_NAMES = list(loops.KINDS)

step = st.one_of(
    st.tuples(
        st.just("call"),
        st.integers(0, len(TOOLS) - 1),
        st.integers(0, len(PARAMS) - 1),
        st.one_of(st.none(), st.integers(0, len(RESULTS) - 1)),
    ),
    # a stretch of one kind of run: (kind, its first step, how many steps)
    st.tuples(st.just("kind"), st.integers(0, len(KIND_NAMES) - 1), st.integers(0, 5), st.integers(1, 25)),
    st.tuples(st.just("compaction"), st.just(0), st.just(0), st.none()),
    st.tuples(st.just("end"), st.just(0), st.just(0), st.none()),
)


def _kind_steps(name: str, start: int, count: int) -> list[tuple[loops.Step, str | None, bool]]:
    """(step, agent, compaction before it) for steps start..start+count of a kind."""
    kind = loops.KINDS[name]
    rng = random.Random(start)
    return [(kind.step(i, rng), kind.agent_id, i == kind.compaction_at) for i in range(start, start + count)]


def _events_for(run: str, gw: str, steps) -> list[dict]:
    out: list[dict] = []
    seq = 0
    for n, (kind, t, p, r) in enumerate(steps):
        base = {"run_id": run, "seq": seq, "gateway_id": gw}
        if kind == "kind":
            for k, (s, agent, compaction) in enumerate(_kind_steps(KIND_NAMES[t], p, r)):
                who = {} if agent is None else {"agent_id": agent}
                if compaction:
                    out.append({"type": "compaction_retry", "run_id": run, "seq": seq, "gateway_id": gw, **who})
                    seq += 1
                call = {"tool_name": s.tool, "tool_call_id": f"{run}-{n}-{k}", "params": s.params, **who}
                out.append({"type": "tool_call", "run_id": run, "seq": seq, "gateway_id": gw, **call})
                res = {"result": loops.result(s.text)} if s.text is not None else {"error": s.error}
                out.append({"type": "tool_result", "run_id": run, "seq": seq + 1, "gateway_id": gw, **call, **res})
                seq += 2
            continue
        if kind == "compaction":
            out.append({"type": "compaction_retry", **base})
            seq += 1
            continue
        if kind == "end":
            out.append({"type": "run_end", **base})
            seq = 0
            continue
        call = {"tool_name": TOOLS[t], "tool_call_id": f"{run}-{n}"}
        if PARAMS[p] != "__absent__":
            call["params"] = PARAMS[p]
        out.append({"type": "tool_call", **base, **call})
        seq += 1
        if r is not None:
            res = {"type": "tool_result", "run_id": run, "seq": seq, "gateway_id": gw, **call}
            if isinstance(RESULTS[r], str) and RESULTS[r].startswith("__error__"):
                res["error"] = RESULTS[r][len("__error__") :]
            elif RESULTS[r] != "__absent__":
                res["result"] = RESULTS[r]
            out.append(res)
            seq += 1
    return out


@st.composite
def runs(draw, max_runs: int = 3, max_steps: int = 40) -> dict[str, list[dict]]:
    """Several runs, each a list of wire events (dicts) in its own order."""
    n = draw(st.integers(1, max_runs))
    return {
        f"run-{i}": _events_for(f"run-{i}", f"gw-{i % 2}", draw(st.lists(step, max_size=max_steps))) for i in range(n)
    }


@st.composite
def interleaved(draw, per_run: dict[str, list[dict]]) -> list[dict]:
    """One stream mixing the runs, each run's own order kept."""
    queues = {k: list(v) for k, v in per_run.items() if v}
    out = []
    while queues:
        k = draw(st.sampled_from(sorted(queues)))
        out.append(queues[k].pop(0))
        if not queues[k]:
            del queues[k]
    return out


def lines(events: list[dict]) -> list[bytes]:
    return [json.dumps(e).encode() for e in events]


SMALL_CONFIG = {
    "tools": {
        "loopDetection": {
            "enabled": True,
            "historySize": 8,
            "warningThreshold": 2,
            "criticalThreshold": 4,
            "unknownToolThreshold": 3,
            "globalCircuitBreakerThreshold": 6,
            "postCompactionGuard": {"windowSize": 2},
        }
    }
}


def offline(events, config=None, fleet=()) -> list[dict]:
    """What `loopwarden replay` decides, as dicts: of a scenario (a dict with `events`,
    `config` and, optionally, `fleet`: its stop orders), or of a list of events (dicts,
    JSON bytes or decoded events) under `config` (a config document or a DetectionConfig)
    and the fleet records `fleet` (dicts or decoded)."""
    if isinstance(events, dict):
        return offline(events["events"], events["config"], events.get("fleet", ()))
    cfg = config if isinstance(config, DetectionConfig) else DetectionConfig(config or {})
    decoded = [decode_event(_raw(e)) if isinstance(e, dict | bytes | str) else e for e in events]
    records = [decode_fleet_record(_raw(r)) if isinstance(r, dict | bytes | str) else r for r in fleet]
    return [json.loads(encode(d)) for d in replay(decoded, cfg, records)]


def _raw(x: dict | bytes | str) -> bytes | str:
    return json.dumps(x) if isinstance(x, dict) else x


def per_run(decisions: list) -> dict[str, list]:
    """Decisions (dicts, or their JSON bytes) by run_id, each run's in their order."""
    out: dict[str, list] = {}
    for d in decisions:
        out.setdefault((d if isinstance(d, dict) else json.loads(d))["run_id"], []).append(d)
    return out


def distinct(items: list) -> list:
    """Decisions (dicts, or messages of the decisions topic), a decision's repeats (by
    event_id) dropped. A worker may publish a decision again (an event folded twice after
    a rebalance or a re-read is answered identically, and gateways keep the first), so a
    repeat must be identical to the first: an AssertionError says otherwise."""
    seen: dict[str, dict] = {}
    out = []
    for x in items:
        d = x if isinstance(x, dict) else json.loads(x.value)
        first = seen.setdefault(d["event_id"], d)
        if first is d:
            out.append(x)
        else:
            assert first == d, f"two different decisions for {d['event_id']}"
    return out
