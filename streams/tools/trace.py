"""A realistic mixed trace, for the benchmarks and the tests: many interleaved runs,
payloads of a few hundred bytes, about a fifth of the runs sliding into one kind of loop
(streams/tools/loops.py) after their first third. Deterministic for a given seed."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

from detectors.fingerprint import fingerprint
from detectors.wire import decode_event, encode

from . import loops

# The loops a run can slide into without an agent config or a compaction.
LOOP_KINDS = loops.PLAIN_LOOPS
CONFIG = {"tools": {"loopDetection": {"enabled": True}}}
T0 = 1767225600000  # the first event's ts (ms); each event's is T0 + its seq


def run_events(rng: random.Random, run: str, gw: str, length: int, loop: str | None) -> Iterator[dict[str, Any]]:
    """One run's events, its run_end last; `loop` (a name in LOOP_KINDS, or None) takes
    over after a third. Each result also carries its size and a duration drawn afresh (so
    a loop of plain reads makes progress in the outcome digest's eyes, as slow tools do)."""
    seq = 0
    for i in range(length):
        step = (loops.LOOPS[loop] if loop is not None and i >= length // 3 else loops.NORMAL).step(i, rng)
        call_id = f"{run}-c{i}"
        yield {
            "type": "tool_call",
            "run_id": run,
            "seq": seq,
            "gateway_id": gw,
            "agent_id": None,
            "ts": T0 + seq,
            "tool_call_id": call_id,
            "tool_name": step.tool,
            "params": step.params,
        }
        seq += 1
        res: dict[str, Any] = {
            "type": "tool_result",
            "run_id": run,
            "seq": seq,
            "gateway_id": gw,
            "ts": T0 + seq,
            "tool_call_id": call_id,
            "tool_name": step.tool,
            "params": step.params,
        }
        if step.text is None:
            res["error"] = step.error
        else:
            res["result"] = loops.result(
                step.text, {"bytes": len(step.text), "durationMs": rng.randrange(1, 900), "cached": False}
            )
        yield res
        seq += 1
    yield {"type": "run_end", "run_id": run, "seq": seq, "gateway_id": gw}


def privacy_form(line: bytes) -> bytes:
    """An event's JSON in the form the client library sends by default (hashes computed
    at the gateway, no params or results)."""
    return encode(fingerprint(decode_event(line)))


def generate(n_events: int, seed: int = 7, concurrent: int = 400, privacy: bool = False) -> list[bytes]:
    """About n_events JSON lines; `concurrent` runs are interleaved at any time. With
    `privacy`, each event is in its privacy form (`privacy_form`)."""
    rng = random.Random(seed)
    lines: list[bytes] = []
    active: list[Iterator[dict[str, Any]]] = []
    made = 0
    while len(lines) < n_events:
        while len(active) < concurrent:
            loop = rng.choice(LOOP_KINDS) if rng.random() < 0.2 else None
            length = rng.randrange(20, 80)
            active.append(run_events(rng, f"run-{made:06d}", f"gw-{made % 16:02d}", length, loop))
            made += 1
        k = rng.randrange(len(active))
        ev = next(active[k], None)
        if ev is None:
            active.pop(k)
            continue
        line = json.dumps(ev, separators=(",", ":")).encode()
        lines.append(privacy_form(line) if privacy else line)
    return lines
