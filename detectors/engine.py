"""The fold of one event: `apply(state, event, config) -> (state, decisions)`.

The detectors themselves live in `rules/`; this module keeps a run's history, asks the
agent's detectors in order (the first verdict wins), applies warning suppression, and
builds the decision. It runs once per event on every reader, so it is written for speed:
one new state per event, no work beyond the decision for a call nothing fires on.
"""

from __future__ import annotations

from msgspec.structs import replace

from .config import AgentConfig, DetectionConfig
from .errors import StaleSeqError
from .fingerprint import call_facts, call_key, result_facts
from .rules import BY_NAME, COMPACTION_GUARD, CallScan, GuardScan, Verdict
from .state import (
    ANSWER_CHUNK,
    EMPTY,
    KEY_CHARS,
    MAX_WARNING_KEYS,
    REMEMBERED_DECISIONS,
    Answer,
    GuardEntry,
    HistoryEntry,
    RunState,
    history_key,
    keys_of,
    remembered,
)
from .wire import CompactionRetry, Decision, Event, RunEnd, ToolCall, ToolResult

ABORT = COMPACTION_GUARD.name
_NO_DECISIONS: tuple[Decision, ...] = ()


def _decision(
    ev: ToolCall | ToolResult,
    tool: str,
    sig: str,
    cfg: AgentConfig,
    action: str = "allow",
    level: str = "none",
    detector: str | None = None,
    count: int | None = None,
    warning_key: str | None = None,
    paired: str | None = None,
) -> Decision:
    message = BY_NAME[detector].message(action, tool, count, paired) if detector is not None else None
    # By position, in the wire order: run_id, seq, gateway_id, agent_id, tool_call_id,
    # tool_name, ts, event_id, action, level, detector, count, message, warning_key,
    # paired_tool_name, args_hash, config_hash.
    return Decision(
        ev.run_id,
        ev.seq,
        ev.gateway_id,
        ev.agent_id,
        ev.tool_call_id,
        tool,
        ev.ts,
        f"{ev.run_id}:{ev.seq}",
        action,
        level,
        detector,
        count,
        message,
        warning_key,
        paired,
        sig,
        cfg.config_hash,
    )


def _remember(state: RunState, a: Answer) -> tuple[tuple[Answer, ...], tuple[Answer, ...]]:
    """(answers, recent_answers) of the run with `a` remembered."""
    recent = state.recent_answers + (a,)
    if len(recent) < ANSWER_CHUNK:
        return state.answers, recent
    return (state.answers + recent)[-REMEMBERED_DECISIONS:], ()


def _append(
    history: tuple[HistoryEntry, ...], keys: str, entry: HistoryEntry, size: int
) -> tuple[tuple[HistoryEntry, ...], str]:
    """The history with `entry` added, the oldest dropped past `size`, and its keys."""
    n = len(history)
    if n >= size:
        drop = n - size + 1
        return history[drop:] + (entry,), keys[drop * KEY_CHARS :] + history_key(entry.args_hash)
    return history + (entry,), keys + history_key(entry.args_hash)


def _answer_again(ev: ToolCall, a: Answer, config: DetectionConfig) -> Decision:
    tool, sig = call_key(ev)
    return _decision(
        ev,
        tool,
        sig,
        config.for_agent(ev.agent_id),
        a.action,
        a.level,
        a.detector,
        a.count,
        a.warning_key,
        a.paired_tool_name,
    )


def _warn(warned: dict[str, int], v: Verdict) -> tuple[str, dict[str, int]]:
    """Warning suppression: (action, new warning memory) for a warning verdict."""
    key = v.warning_key
    assert key is not None  # every warning has a key
    bucket = v.count // 10
    last = warned.get(key)
    if last is not None and bucket <= last:
        return "allow", warned
    warned = dict(warned)
    if last is None and len(warned) >= MAX_WARNING_KEYS:
        del warned[next(iter(warned))]
    warned[key] = bucket
    return "warn", warned


def _on_call(state: RunState, ev: ToolCall, cfg: AgentConfig, ts: int | None) -> tuple[RunState, tuple[Decision]]:
    tool, sig, poll = call_facts(ev)
    if state.aborted:
        d = _decision(ev, tool, sig, cfg, "abort", "critical", ABORT)
        a = Answer(ev.seq, "abort", "critical", ABORT)
        answers, recent = _remember(state, a)
        return replace(state, last_seq=ev.seq, last_ts=ts, answers=answers, recent_answers=recent), (d,)
    history = state.history
    keys = state.history_keys
    if len(keys) != KEY_CHARS * len(history):  # keys_of, inlined
        keys = keys_of(state)
    key = sig[-KEY_CHARS:]
    if len(key) < KEY_CHARS:  # history_key, inlined
        key = history_key(sig)
    v = None
    detectors = cfg.call_detectors
    if detectors:
        new = key not in keys
        if new:  # most calls: only detectors that need no repeat can fire
            if history and history[-1].unknown_tool_name:
                detectors = cfg.new_call_detectors
            else:  # no unknown-tool streak either (with the defaults: no detector at all)
                detectors = cfg.plain_call_detectors
    if detectors:
        scan = CallScan(history, tool, sig, poll, new)
        if not (new or scan.seen):  # its key, but another signature's: not a repeat after all
            detectors = cfg.new_call_detectors
        for detector in detectors:
            v = detector.evaluate(scan, cfg)
            if v is not None:
                break
    if v is None:  # allow: the common case, inlined
        seq = ev.seq
        run = ev.run_id
        call_id = ev.tool_call_id
        d = Decision(
            run,
            seq,
            ev.gateway_id,
            ev.agent_id,
            call_id,
            tool,
            ev.ts,
            f"{run}:{seq}",
            "allow",
            "none",
            None,
            None,
            None,
            None,
            None,
            sig,
            cfg.config_hash,
        )
        entry = HistoryEntry(tool, sig, call_id)
        n = len(history)
        size = cfg.history_size
        if n >= size:  # _append, inlined
            drop = n - size + 1
            history = history[drop:] + (entry,)
            keys = keys[drop * KEY_CHARS :] + key
        else:
            history = history + (entry,)
            keys = keys + key
        a = Answer(seq, "allow", "none")
        warned = state.warned
    else:
        name = v.detector.name
        warned = state.warned
        if v.level == "critical":
            action, level = "block", "critical"  # a blocked call is not recorded: the block stays in force
        else:
            action, warned = _warn(warned, v)
            level = "warning"
            history, keys = _append(history, keys, HistoryEntry(tool, sig, ev.tool_call_id), cfg.history_size)
        d = _decision(ev, tool, sig, cfg, action, level, name, v.count, v.warning_key, v.paired_tool_name)
        a = Answer(ev.seq, action, level, name, v.count, v.warning_key, v.paired_tool_name)
    answers = state.answers
    recent = state.recent_answers + (a,)
    if len(recent) >= ANSWER_CHUNK:  # _remember, inlined
        answers, recent = (answers + recent)[-REMEMBERED_DECISIONS:], ()
    return replace(
        state,
        last_seq=ev.seq,
        last_ts=ts,
        history=history,
        history_keys=keys,
        warned=warned,
        answers=answers,
        recent_answers=recent,
    ), (d,)


def _on_result(
    state: RunState, ev: ToolResult, cfg: AgentConfig, ts: int | None
) -> tuple[RunState, tuple[Decision, ...]]:
    if state.aborted:
        return replace(state, last_seq=ev.seq, last_ts=ts), _NO_DECISIONS
    tool, sig, rh, unknown = result_facts(ev)
    if rh is None:
        return replace(state, last_seq=ev.seq, last_ts=ts), _NO_DECISIONS
    # Fill the newest entry of this call still waiting for its outcome, else append one.
    history = state.history
    keys = state.history_keys  # a filled entry keeps its key
    want_id = ev.tool_call_id
    last = len(history) - 1
    for i in range(last, -1, -1):
        r = history[i]
        if (
            r.result_hash is None
            and r.args_hash == sig
            and r.tool_name == tool
            and (want_id is None or r.tool_call_id == want_id)
        ):
            filled = HistoryEntry(tool, sig, r.tool_call_id, rh, unknown)
            if i == last:  # the usual case: the result of the newest call
                history = history[:i] + (filled,)
            else:
                history = history[:i] + (filled,) + history[i + 1 :]
            break
    else:
        history, keys = _append(
            history, keys_of(state), HistoryEntry(tool, sig, want_id, rh, unknown), cfg.history_size
        )
    left = state.guard_left
    if left <= 0 or not cfg.result_detectors:
        return replace(state, last_seq=ev.seq, last_ts=ts, history=history, history_keys=keys), _NO_DECISIONS
    entry = GuardEntry(tool, sig, rh)
    window = state.guard_window + (entry,)
    scan = GuardScan(window, entry, window.count(entry))
    for detector in cfg.result_detectors:
        v = detector.evaluate(scan, cfg)
        if v is not None:
            d = _decision(ev, tool, sig, cfg, "abort", "critical", v.detector.name, v.count)
            return replace(
                state,
                last_seq=ev.seq,
                last_ts=ts,
                history=history,
                history_keys=keys,
                guard_left=0,
                guard_window=(),
                aborted=True,
            ), (d,)
    left -= 1
    return replace(
        state,
        last_seq=ev.seq,
        last_ts=ts,
        history=history,
        history_keys=keys,
        guard_left=left,
        guard_window=window if left else (),
    ), _NO_DECISIONS


def apply(state: RunState | None, ev: Event, config: DetectionConfig) -> tuple[RunState | None, tuple[Decision, ...]]:
    """Apply one event to its run's state. A None state is a run with no state yet; a
    None result means the run ended and its state is to be dropped. Raises StaleSeqError
    for a stale tool_call whose decision is no longer remembered."""
    if state is None:
        state = EMPTY
    ts = ev.ts
    if ts is None:
        ts = state.last_ts
    elif state.last_ts is not None and ts - state.last_ts > config.idle_timeout_ms:
        # Idle longer than the timeout (a gateway that crashed never sent run_end): the
        # run is dropped as by run_end, and this event starts a new one (section 7).
        state = EMPTY
    if ev.seq <= state.last_seq:
        if isinstance(ev, ToolCall):
            for a in reversed(remembered(state)):
                if a.seq == ev.seq:
                    return state, (_answer_again(ev, a, config),)
            raise StaleSeqError(
                f"stale tool_call: seq {ev.seq} <= last applied seq {state.last_seq} of run {ev.run_id!r}"
            )
        return state, _NO_DECISIONS
    if isinstance(ev, ToolCall):
        return _on_call(state, ev, config.for_agent(ev.agent_id), ts)
    if isinstance(ev, ToolResult):
        return _on_result(state, ev, config.for_agent(ev.agent_id), ts)
    if isinstance(ev, RunEnd):
        return None, _NO_DECISIONS
    assert isinstance(ev, CompactionRetry)
    cfg = config.for_agent(ev.agent_id)
    if cfg.compaction_guard_on:
        return replace(state, last_seq=ev.seq, last_ts=ts, guard_left=cfg.window, guard_window=()), _NO_DECISIONS
    return replace(state, last_seq=ev.seq, last_ts=ts), _NO_DECISIONS
