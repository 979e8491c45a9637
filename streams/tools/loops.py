"""The catalogue of runs: normal runs (every call different; paging through a file;
editing and rerunning a test) and every kind of loop of semantics.md, each saying how its
calls and results look, step by step.

One place for the simulator (`streams/tools/simulate.py`), the benchmark trace
(`streams/tools/trace.py`) and the property tests' event streams (`tests/events.py`). A
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
    rules: bool = False  # only section 12's rules (`loopwarden.rules`) stop it, or keep it unflagged


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


def _paging(i: int, rng: random.Random) -> Step:
    """Paging through a long file with the same call: every page different (progress)."""
    return Step("scroll_down", {"file": "/workspace/src/big_module.py", "pad": "s" * 120}, _page(i))


def _page(i: int) -> str:
    return "\n".join(f"{n}: line {n} of big_module.py" for n in range(i * 20, i * 20 + 20))


def _test_rerun(i: int, rng: random.Random) -> Step:
    """Edit, rerun the same test, edit again: each edit different, each test run's output
    too (fewer failures each time), as an agent fixing a bug works."""
    if i % 2 == 0:
        params = {"path": "/workspace/src/app.py", "old": f"step {i}", "new": f"step {i + 2}", "pad": "e" * 80}
        return Step("edit", params, f"edited /workspace/src/app.py (change {i // 2})")
    left = max(0, 12 - i // 2)
    return Step("exec", {"command": "python -m pytest tests/test_app.py -q"}, f"{left} failed, {40 - left} passed")


def _failing_retry(i: int, rng: random.Random) -> Step:
    """An edit whose old text is not in the file, retried: slightly varied at first, then
    the same call again and again, with the same error every time."""
    old = ("retrun value", "retrun  value", "retrun value ")[min(i, 2)]
    params = {"path": "/workspace/src/app.py", "old": old, "new": "return value", "pad": "f" * 100}
    return Step("edit", params, None, "old text not found in /workspace/src/app.py")


def _cycle(i: int, rng: random.Random) -> Step:
    """Three calls in a round (open, search, go to a line), each answered the same every time."""
    steps = (
        ("open", {"path": "/workspace/src/app.py", "pad": "c" * 100}, "opened /workspace/src/app.py (412 lines)"),
        ("search", {"query": "def handler", "pad": "c" * 100}, "no matches in /workspace/src/app.py"),
        ("goto", {"line": 120, "pad": "c" * 100}, "line 120: return value"),
    )
    tool, params, text = steps[i % 3]
    return Step(tool, params, text)


NORMAL = Kind("normal", None, _normal)
# Normal runs that repeat a call while making progress: OpenClaw's generic warning counts
# them, section 12's progress-aware warning does not (loopwarden.rules.progressAware).
NORMALS: dict[str, Kind] = {
    k.name: k
    for k in (
        NORMAL,
        Kind("paging", None, _paging, rules=True),
        Kind("test_rerun", None, _test_rerun, rules=True),
    )
}
# The loops, in the order the simulator deals them out; the first four need no agent
# config and no compaction (streams/tools/trace.py uses those).
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
        # section 12's loops: the same failing edit retried, a round of three calls
        Kind("failure_repeat", "failure_repeat", _failing_retry, rules=True),
        Kind("cycle", "cycle", _cycle, rules=True),
    )
}
KINDS: dict[str, Kind] = {**NORMALS, **LOOPS}
PLAIN_LOOPS = tuple(k.name for k in LOOPS.values() if k.agent_id is None and k.compaction_at is None and not k.rules)
