"""The catalogue of runs: a normal run and every kind of loop of semantics.md, each
saying how its calls and results look, step by step.

One place for the simulator (`streams/tools/simulate.py`), the benchmark trace
(`benchmarks/trace.py`) and the property tests' event streams (`tests/events.py`). A
kind is named for the detector that must stop it. Steps carry a little padding, so that
events are a few hundred bytes, as a real agent's are. A step's result is the same every
time (a loop makes no progress); a user that wants results to vary in what the outcome
digest ignores, or not, adds its own `details` (`result(text, details)`).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, NamedTuple

BREAKER_AGENT = "no-generic"  # an agent whose config switches genericRepeat off (examples/config.json5)
NORMAL_TOOLS = ["read", "grep", "exec", "edit", "web_fetch", "list"]


class Step(NamedTuple):
    """One call and what comes back: the result's text, or the error it fails with."""

    tool: str
    params: dict[str, Any]
    text: str | None
    error: str | None = None


class Kind(NamedTuple):
    name: str
    detector: str | None  # the detector that must stop it (None: a normal run, never flagged)
    step: Callable[[int, random.Random], Step]  # step i; only a normal run draws from the rng
    agent_id: str | None = None  # the agent it runs as (None: the default agent)
    compaction_at: int | None = None  # a compaction_retry comes before this step


def result(text: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """The tool result of a step that did not fail."""
    out: dict[str, Any] = {"content": [{"type": "text", "text": text}]}
    if details is not None:
        out["details"] = details
    return out


def _normal(i: int, rng: random.Random) -> Step:
    """Every call different: a path, a query and options drawn afresh, the step in the result."""
    tool = rng.choice(NORMAL_TOOLS)
    params = {
        "path": f"/workspace/src/module_{rng.randrange(500)}/file_{i}.py",
        "query": "def handler(request): " + "x" * rng.randrange(60, 160),
        "options": {"limit": rng.randrange(1, 200), "recursive": rng.random() < 0.5, "ratio": round(rng.random(), 3)},
    }
    return Step(tool, params, "ok " + "v" * rng.randrange(80, 250) + str(i))


def _repeat(i: int, rng: random.Random) -> Step:
    """The same read, the same answer."""
    return Step("read", {"path": "/workspace/README.md", "pad": "y" * 200}, "# Same\n" + "z" * 200)


def _poll(i: int, rng: random.Random) -> Step:
    """Polling a process that never moves on."""
    return Step("process", {"action": "poll", "sessionId": "sess-1", "pad": "p" * 150}, "still running" + " " * 100)


def _ping_pong(i: int, rng: random.Random) -> Step:
    """Two calls taking turns, each answered the same every time."""
    tool = "read" if i % 2 else "list"
    return Step(tool, {"path": f"/workspace/{tool}", "pad": "q" * 180}, f"{tool} output " + "w" * 150)


def _unknown(i: int, rng: random.Random) -> Step:
    """A tool that does not exist, asked something new each time."""
    return Step("web_search", {"q": f"query {i}", "pad": "u" * 150}, None, "Unknown tool: web_search")


NORMAL = Kind("normal", None, _normal)
# The loops, in the order the simulator deals them out; the first four need no agent
# config and no compaction (benchmarks/trace.py uses those).
LOOPS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind("generic_repeat", "generic_repeat", _repeat),
        Kind("known_poll_no_progress", "known_poll_no_progress", _poll),
        Kind("ping_pong", "ping_pong", _ping_pong),
        Kind("unknown_tool_repeat", "unknown_tool_repeat", _unknown),
        # the repeat after a compaction: the post-compaction guard aborts it within its window
        Kind("compaction_loop_persisted", "compaction_loop_persisted", _repeat, compaction_at=3),
        # the repeat with genericRepeat switched off: only the breaker stops it
        Kind("global_circuit_breaker", "global_circuit_breaker", _repeat, agent_id=BREAKER_AGENT),
    )
}
KINDS: dict[str, Kind] = {NORMAL.name: NORMAL, **LOOPS}
PLAIN_LOOPS = tuple(k.name for k in LOOPS.values() if k.agent_id is None and k.compaction_at is None)
