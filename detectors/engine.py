"""The fold of one event: `apply(state, event, config) -> (state, decisions)`."""

from __future__ import annotations

from msgspec.structs import replace

from .config import AgentConfig, DetectionConfig
from .errors import StaleSeqError
from .fingerprint import call_facts, result_facts
from .rules import BY_NAME, COMPACTION_GUARD, CallScan, GuardScan, Verdict
from .state import EMPTY, MAX_WARNING_KEYS, REMEMBERED_DECISIONS, Answer, GuardEntry, HistoryEntry, RunState
from .wire import CompactionRetry, Decision, Event, RunEnd, ToolCall, ToolResult

ABORT = COMPACTION_GUARD.name


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
    return Decision(
        run_id=ev.run_id,
        seq=ev.seq,
        gateway_id=ev.gateway_id,
        agent_id=ev.agent_id,
        tool_call_id=ev.tool_call_id,
        tool_name=tool,
        ts=ev.ts,
        event_id=f"{ev.run_id}:{ev.seq}",
        action=action,
        level=level,
        detector=detector,
        count=count,
        message=BY_NAME[detector].message(action, tool, count, paired) if detector is not None else None,
        warning_key=warning_key,
        paired_tool_name=paired,
        args_hash=sig,
        config_hash=cfg.config_hash,
    )


def _remember(state: RunState, d: Decision) -> tuple[Answer, ...]:
    kept = state.answers[-(REMEMBERED_DECISIONS - 1):] if len(state.answers) >= REMEMBERED_DECISIONS else state.answers
    return kept + (Answer(d.seq, d.action, d.level, d.detector, d.count, d.warning_key, d.paired_tool_name),)


def _answer_again(ev: ToolCall, a: Answer, config: DetectionConfig) -> Decision:
    tool, sig, _ = call_facts(ev)
    return _decision(ev, tool, sig, config.for_agent(ev.agent_id), a.action, a.level, a.detector, a.count,
                     a.warning_key, a.paired_tool_name)


def _append(history: tuple[HistoryEntry, ...], rec: HistoryEntry, size: int) -> tuple[HistoryEntry, ...]:
    if len(history) >= size:
        return history[len(history) - size + 1:] + (rec,)
    return history + (rec,)


def _warn(state: RunState, v: Verdict) -> tuple[str, dict[str, int]]:
    """Warning suppression: (action, new warning memory) for a warning verdict."""
    key = v.warning_key
    assert key is not None  # every warning has a key
    bucket = v.count // 10
    last = state.warned.get(key)
    if last is not None and bucket <= last:
        return "allow", state.warned
    warned = dict(state.warned)
    if last is None and len(warned) >= MAX_WARNING_KEYS:
        del warned[next(iter(warned))]
    warned[key] = bucket
    return "warn", warned


def _on_call(state: RunState, ev: ToolCall, cfg: AgentConfig, ts: int | None) -> tuple[RunState, tuple[Decision, ...]]:
    tool, sig, poll = call_facts(ev)
    if state.aborted:
        d = _decision(ev, tool, sig, cfg, "abort", "critical", ABORT)
        return replace(state, last_seq=ev.seq, last_ts=ts, answers=_remember(state, d)), (d,)
    v = None
    if cfg.call_detectors:
        scan = CallScan(state.history, tool, sig, poll)
        for detector in cfg.call_detectors:
            v = detector.evaluate(scan, cfg)
            if v is not None:
                break
    warned = state.warned
    history = state.history
    if v is None:
        d = _decision(ev, tool, sig, cfg)
    elif v.level == "critical":
        d = _decision(ev, tool, sig, cfg, "block", "critical", v.detector.name, v.count, v.warning_key,
                      v.paired_tool_name)
    else:
        action, warned = _warn(state, v)
        d = _decision(ev, tool, sig, cfg, action, "warning", v.detector.name, v.count, v.warning_key,
                      v.paired_tool_name)
    if d.action != "block":
        history = _append(history, HistoryEntry(tool, sig, ev.tool_call_id), cfg.history_size)
    return replace(state, last_seq=ev.seq, last_ts=ts, history=history, warned=warned, answers=_remember(state, d)), (d,)


def _on_result(state: RunState, ev: ToolResult, cfg: AgentConfig, ts: int | None) -> tuple[RunState, tuple[Decision, ...]]:
    if state.aborted:
        return replace(state, last_seq=ev.seq, last_ts=ts), ()
    tool, sig, _ = call_facts(ev)
    rh, unknown = result_facts(ev, tool)
    if rh is None:
        return replace(state, last_seq=ev.seq, last_ts=ts), ()
    history = state.history
    want_id = ev.tool_call_id
    for i in range(len(history) - 1, -1, -1):
        r = history[i]
        if r.result_hash is None and r.args_hash == sig and r.tool_name == tool and (want_id is None or r.tool_call_id == want_id):
            history = history[:i] + (replace(r, result_hash=rh, unknown_tool_name=unknown),) + history[i + 1:]
            break
    else:
        history = _append(history, HistoryEntry(tool, sig, want_id, rh, unknown), cfg.history_size)
    if state.guard_left <= 0 or not cfg.result_detectors:
        return replace(state, last_seq=ev.seq, last_ts=ts, history=history), ()
    entry = GuardEntry(tool, sig, rh)
    window = state.guard_window + (entry,)
    scan = GuardScan(window, entry, sum(1 for e in window if e == entry))
    for detector in cfg.result_detectors:
        v = detector.evaluate(scan, cfg)
        if v is not None:
            d = _decision(ev, tool, sig, cfg, "abort", "critical", v.detector.name, v.count)
            return replace(state, last_seq=ev.seq, last_ts=ts, history=history, guard_left=0, guard_window=(),
                           aborted=True), (d,)
    left = state.guard_left - 1
    return replace(state, last_seq=ev.seq, last_ts=ts, history=history, guard_left=left, guard_window=window if left else ()), ()


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
            for a in reversed(state.answers):
                if a.seq == ev.seq:
                    return state, (_answer_again(ev, a, config),)
            raise StaleSeqError(f"stale tool_call: seq {ev.seq} <= last applied seq {state.last_seq} of run {ev.run_id!r}")
        return state, ()
    if isinstance(ev, ToolCall):
        return _on_call(state, ev, config.for_agent(ev.agent_id), ts)
    if isinstance(ev, ToolResult):
        return _on_result(state, ev, config.for_agent(ev.agent_id), ts)
    if isinstance(ev, RunEnd):
        return None, ()
    assert isinstance(ev, CompactionRetry)
    cfg = config.for_agent(ev.agent_id)
    if cfg.compaction_guard_on:
        return replace(state, last_seq=ev.seq, last_ts=ts, guard_left=cfg.window, guard_window=()), ()
    return replace(state, last_seq=ev.seq, last_ts=ts), ()
