"""The texts a decision carries for the model; a pure function of the decision's facts."""

from __future__ import annotations


def message_for(action: str, detector: str | None, tool: str, count: int | None, paired: str | None) -> str | None:
    if detector is None:
        return None
    if detector == "compaction_loop_persisted":
        if count is None:
            return f"Run aborted: {tool} was called after the run was stopped for repeating an identical loop through compaction."
        return (
            f"Run aborted: {tool} returned the same result {count} times in a row right after a "
            "context compaction; the loop survived compaction."
        )
    if detector == "unknown_tool_repeat":
        return f"Blocked: the tool {tool} is unavailable and was tried {count} times. Answer without it."
    if detector == "global_circuit_breaker":
        return (
            f"Blocked: {tool} returned the same no-progress outcome {count} times; the global "
            "circuit breaker stops this loop."
        )
    if detector == "known_poll_no_progress":
        if action == "block":
            return f"Blocked: {tool} was polled {count} times with identical arguments and no progress."
        return (
            f"Warning: {tool} was polled {count} times with identical arguments and no progress. "
            "Wait longer between checks, or report the task as stuck."
        )
    if detector == "ping_pong":
        other = f" and {paired}" if paired else ""
        if action == "block":
            return f"Blocked: {tool}{other} have alternated for {count} calls with no progress."
        return f"Warning: {tool}{other} have alternated for {count} calls. Stop and report the task as failed."
    if action == "block":
        return f"Blocked: {tool} was called {count} times with identical arguments and identical outcomes."
    return (
        f"Warning: {tool} was called {count} times with identical arguments. If this is not "
        "making progress, stop retrying and report the task as failed."
    )
