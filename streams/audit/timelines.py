"""The timelines of the `--html` report: for each run, its last events in the range with
the recorded, replayed (and what-if) verdicts beside each other; a run that ends with a
flag (a mismatch, a block, an abort, a what-if change) is kept for the report. And the
lines of `--diff`, which show verdicts the same way."""

from __future__ import annotations

from collections import deque
from typing import Any

from detectors.wire import CompactionRetry, Decision, Event, RunEnd, ToolCall, ToolResult, Usage

from .join import Verdict

MAX_RUNS = 300  # flagged runs kept for the report
LENGTH = 200  # entries kept of each run (its last)

TYPES = {
    ToolCall: "tool_call",
    ToolResult: "tool_result",
    Usage: "usage",
    CompactionRetry: "compaction_retry",
    RunEnd: "run_end",
}


def verdict(d: Decision | Verdict | None) -> dict[str, Any] | None:
    if d is None:
        return None
    return {
        "action": d.action,
        "detector": d.detector,
        "count": d.count,
        "message": d.message,
        "config_hash": d.config_hash,
    }


def diff_line(
    kind: str,
    eid: str,
    run_id: str,
    recorded: Decision | Verdict | None,
    replayed: Decision | None,
    what_if: Decision | None,
    changes: list[str] | None = None,
) -> dict[str, Any]:
    """A line of `--diff`: a decision that differs (`kind` what it came to), or a what-if change."""
    line: dict[str, Any] = {
        "kind": kind,
        "event_id": eid,
        "run_id": run_id,
        "recorded": verdict(recorded),
        "replayed": verdict(replayed),
    }
    if kind == "what_if":
        line["what_if"] = verdict(what_if)
        line["changes"] = changes
    return line


class _Timeline:
    __slots__ = ("agent", "entries", "flags", "gateway", "partial", "truncated")

    def __init__(self, length: int, gateway: str, agent: str | None, partial: bool) -> None:
        self.entries: deque[dict[str, Any]] = deque(maxlen=length)
        self.truncated = 0
        self.flags: set[str] = set()
        self.gateway = gateway
        self.agent = agent
        self.partial = partial


class Timelines:
    """The open runs' timelines, and the flagged runs closed so far (at most `max_runs`)."""

    def __init__(self, what_if: bool, max_runs: int = MAX_RUNS, length: int = LENGTH) -> None:
        self.what_if = what_if  # entries show a what-if verdict
        self.max_runs = max_runs
        self.length = length
        self.open: dict[str, _Timeline] = {}
        self.flagged: list[dict[str, Any]] = []

    def start(self, run_id: str, gateway: str, agent: str | None, partial: bool) -> None:
        self.open[run_id] = _Timeline(self.length, gateway, agent, partial)

    def add(
        self,
        ev: Event,
        status: str | None,
        recorded: Decision | Verdict | None,
        replayed: Decision | None,
        what_if: Decision | None,
        changed: bool,
    ) -> None:
        """An event of an open run, in the range: `status` what its decisions came to
        (None: not compared), `changed` whether the what-if verdict differs."""
        t = self.open[ev.run_id]
        if status is not None:
            if status != "matched":
                t.flags.add("mismatch")
            if replayed is not None and replayed.action in ("block", "abort"):
                t.flags.add(replayed.action)
            if changed:
                t.flags.add("what_if")
        if len(t.entries) == t.entries.maxlen:
            t.truncated += 1
        t.entries.append(
            {
                "seq": ev.seq,
                "ts": ev.ts,
                "type": TYPES[type(ev)],
                "tool_name": getattr(ev, "tool_name", None),
                "status": status,
                "recorded": verdict(recorded),
                "replayed": verdict(replayed),
                "what_if": verdict(what_if) if self.what_if else None,
            }
        )

    def close(self, run_id: str) -> None:
        t = self.open.pop(run_id, None)
        if t is None or not t.flags or len(self.flagged) >= self.max_runs:
            return
        self.flagged.append(
            {
                "run_id": run_id,
                "gateway_id": t.gateway,
                "agent_id": t.agent,
                "partial": t.partial,
                "flags": sorted(t.flags),
                "truncated": t.truncated,
                "timeline": list(t.entries),
            }
        )

    def finish(self) -> None:
        for run_id in list(self.open):
            self.close(run_id)
