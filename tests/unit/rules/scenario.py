"""A small language for the detector tables: runs of calls and results, decided through
the public fold (`load_config` and `replay`), exactly as the replay command decides them."""

from __future__ import annotations

import json
from typing import Any

from detectors import Decision, decode_event, fingerprint, load_config, replay

SAME = {"content": [{"type": "text", "text": "same"}]}
OTHER = {"content": [{"type": "text", "text": "other"}]}
LOOP_ECHO = {"details": {"status": "blocked", "deniedReason": "tool-loop"}}  # no outcome digest


def call(tool: str, params: Any = None, *, agent: str | None = None, **extra: Any) -> dict:
    ev = {"type": "tool_call", "tool_name": tool, **extra}
    if params is not None:
        ev["params"] = params
    if agent is not None:
        ev["agent_id"] = agent
    return ev


def result(tool: str, params: Any = None, *, agent: str | None = None, **extra: Any) -> dict:
    ev = {"type": "tool_result", "tool_name": tool, **extra}
    if params is not None:
        ev["params"] = params
    if agent is not None:
        ev["agent_id"] = agent
    return ev


def loop(tool: str, params: Any, outcome: Any, n: int, *, agent: str | None = None) -> list[dict]:
    """n calls, each followed by its result (`outcome` a result object, or "error:..." text)."""
    out = []
    for _ in range(n):
        out.append(call(tool, params, agent=agent))
        if isinstance(outcome, str) and outcome.startswith("error:"):
            out.append(result(tool, params, agent=agent, error=outcome[len("error:") :]))
        else:
            out.append(result(tool, params, agent=agent, result=outcome))
    return out


def compaction(*, agent: str | None = None) -> dict:
    ev: dict = {"type": "compaction_retry"}
    if agent is not None:
        ev["agent_id"] = agent
    return ev


def config(agents: list[dict] | None = None, **loop_detection: Any) -> dict:
    """A config document: `tools.loopDetection` from the keywords, and `agents.list`."""
    doc: dict = {"tools": {"loopDetection": loop_detection}}
    if agents is not None:
        doc["agents"] = {"list": agents}
    return doc


ON = config(enabled=True)


def agent(agent_id: str, **loop_detection: Any) -> dict:
    return {"id": agent_id, "tools": {"loopDetection": loop_detection}}


def decide(events: list[dict], doc: dict, run: str = "r") -> list[Decision]:
    """Every decision of one run's events (seq, run and gateway ids filled in)."""
    decoded = []
    for seq, ev in enumerate(events):
        full = {"run_id": run, "seq": seq, "gateway_id": "gw", **ev}
        if full["type"] in ("tool_call", "tool_result"):
            full.setdefault("tool_call_id", f"{run}-c{seq if full['type'] == 'tool_call' else seq - 1}")
        decoded.append(decode_event(json.dumps(full).encode()))
    return replay(decoded, load_config(json.dumps(doc)))


def last(events: list[dict], doc: dict) -> Decision:
    return decide(events, doc)[-1]


def verdict(d: Decision) -> tuple[str, str, str | None, int | None]:
    return d.action, d.level, d.detector, d.count


def outcome_hash(tool: str, params: Any, res: Any) -> str:
    """The outcome digest the engine keeps for a result, read through the public fingerprint."""
    ev = {"type": "tool_result", "run_id": "x", "seq": 0, "gateway_id": "gw", "tool_name": tool, "result": res}
    if params is not None:
        ev["params"] = params
    h = fingerprint(decode_event(json.dumps(ev).encode())).result_hash
    assert isinstance(h, str)
    return h
