"""A realistic mixed trace: many interleaved runs, payloads of a few hundred bytes,
about a fifth of the runs stuck in one kind of loop. Deterministic for a given seed."""

from __future__ import annotations

import json
import random

from detectors.fingerprint import fingerprint
from detectors.wire import decode_event, encode

LOOP_KINDS = ("repeat", "poll", "pingpong", "unknown")


def _params(rng: random.Random, i: int) -> dict:
    return {
        "path": f"/workspace/src/module_{rng.randrange(500)}/file_{i}.py",
        "query": "def handler(request): " + "x" * rng.randrange(60, 160),
        "options": {"limit": rng.randrange(1, 200), "recursive": rng.random() < 0.5, "ratio": round(rng.random(), 3)},
    }


def _result(rng: random.Random, text: str) -> dict:
    return {
        "content": [{"type": "text", "text": text}],
        "details": {"bytes": len(text), "durationMs": rng.randrange(1, 900), "cached": False},
    }


def _run_events(rng: random.Random, run: str, gw: str, length: int, loop: str | None):
    seq = 0
    tools = ["read", "grep", "exec", "edit", "web_fetch", "list"]
    for i in range(length):
        stuck = loop is not None and i >= length // 3
        if stuck and loop == "repeat":
            tool, params, out = "read", {"path": "/workspace/README.md", "pad": "y" * 200}, "# Same\n" + "z" * 200
        elif stuck and loop == "poll":
            tool, params, out = "process", {"action": "poll", "sessionId": "sess-1", "pad": "p" * 150}, "still running" + " " * 100
        elif stuck and loop == "pingpong":
            tool = "read" if i % 2 else "list"
            params, out = {"path": f"/workspace/{tool}", "pad": "q" * 180}, f"{tool} output " + "w" * 150
        elif stuck and loop == "unknown":
            tool, params, out = "web_search", {"q": f"query {i}", "pad": "u" * 150}, None
        else:
            tool, params, out = rng.choice(tools), _params(rng, i), "ok " + "v" * rng.randrange(80, 250) + str(i)
        call_id = f"{run}-c{i}"
        yield {"type": "tool_call", "run_id": run, "seq": seq, "gateway_id": gw, "agent_id": None,
               "ts": 1767225600000 + seq, "tool_call_id": call_id, "tool_name": tool, "params": params}
        seq += 1
        res = {"type": "tool_result", "run_id": run, "seq": seq, "gateway_id": gw, "ts": 1767225600000 + seq,
               "tool_call_id": call_id, "tool_name": tool, "params": params}
        if out is None:
            res["error"] = "Unknown tool: web_search"
        else:
            res["result"] = _result(rng, out)
        yield res
        seq += 1
    yield {"type": "run_end", "run_id": run, "seq": seq, "gateway_id": gw}


def generate(n_events: int, seed: int = 7, concurrent: int = 400, privacy: bool = False) -> list[bytes]:
    """About n_events JSON lines; `concurrent` runs are interleaved at any time. With
    `privacy`, each event is in the form the client library sends by default (hashes
    computed at the gateway, no params or results)."""
    rng = random.Random(seed)
    lines: list[bytes] = []
    active: list = []
    made = 0
    while len(lines) < n_events:
        while len(active) < concurrent:
            loop = rng.choice(LOOP_KINDS) if rng.random() < 0.2 else None
            length = rng.randrange(20, 80)
            active.append(_run_events(rng, f"run-{made:06d}", f"gw-{made % 16:02d}", length, loop))
            made += 1
        k = rng.randrange(len(active))
        ev = next(active[k], None)
        if ev is None:
            active.pop(k)
            continue
        line = json.dumps(ev, separators=(",", ":")).encode()
        lines.append(encode(fingerprint(decode_event(line))) if privacy else line)
    return lines


CONFIG = {"tools": {"loopDetection": {"enabled": True}}}
