"""Hypothesis strategies for realistic event streams, shared by the property tests."""

from __future__ import annotations

import json

from hypothesis import strategies as st

TOOLS = ["read", "exec", "Bash", "process", "command_status", "update_plan", "message", "web_fetch"]
PARAMS = [
    {"path": "/a"},
    {"path": "/b", "n": 1.0},
    {"command": "make test"},
    {"action": "poll", "sessionId": "s1"},
    {"action": "log", "sessionId": "s1"},
    {"action": "send", "to": "x", "text": "hi"},
    {"plan": [{"step": "one", "status": "pending"}], "explanation": "why"},
    None,
    "__absent__",
]
RESULTS = [
    {"content": [{"type": "text", "text": "same"}], "details": {"bytes": 4}},
    {"content": [{"type": "text", "text": "other"}]},
    {"details": {"status": "completed", "exitCode": 1, "aggregated": "boom", "durationMs": 5}},
    {"details": {"status": "running", "tail": "..."}},
    {"details": {"status": "blocked", "deniedReason": "tool-loop"}},
    {"details": {"messageId": "m1", "ok": True}},
    "__error__Unknown tool: web_fetch",
    "__error__disk full",
    [1, 2],
    "__absent__",
]

step = st.one_of(
    st.tuples(st.just("call"), st.integers(0, len(TOOLS) - 1), st.integers(0, len(PARAMS) - 1),
              st.one_of(st.none(), st.integers(0, len(RESULTS) - 1))),
    st.tuples(st.just("compaction"), st.just(0), st.just(0), st.none()),
    st.tuples(st.just("end"), st.just(0), st.just(0), st.none()),
)


def _events_for(run: str, gw: str, steps) -> list[dict]:
    out, seq = [], 0
    for n, (kind, t, p, r) in enumerate(steps):
        base = {"run_id": run, "seq": seq, "gateway_id": gw}
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
                res["error"] = RESULTS[r][len("__error__"):]
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
        f"run-{i}": _events_for(f"run-{i}", f"gw-{i % 2}", draw(st.lists(step, max_size=max_steps)))
        for i in range(n)
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
    "tools": {"loopDetection": {
        "enabled": True, "historySize": 8, "warningThreshold": 2, "criticalThreshold": 4,
        "unknownToolThreshold": 3, "globalCircuitBreakerThreshold": 6,
        "postCompactionGuard": {"windowSize": 2},
    }}
}
