"""The fold of one event: `apply(state, event, config) -> (state, decisions)`.

The detectors themselves live in `rules/`; this module keeps a run's history, asks the
agent's detectors in order (the first verdict wins), applies warning suppression, and
builds the decision. It runs once per event on every reader, so it is written for speed:
one new state per event, no work beyond the decision for a call nothing fires on.
"""

from __future__ import annotations

from msgspec import UNSET
from msgspec.structs import replace

from .config import AgentConfig, DetectionConfig, micro_dollars
from .errors import StaleSeqError
from .fingerprint import call_facts, call_key, result_facts
from .fleet import FleetView, StopOrder
from .policy import (
    FLEET_SPEND_CAP,
    FLEET_TOOL_BREAKER,
    KINDS,
    OPERATOR_STOP,
    RUN_BUDGET,
    aborted_message,
    breaker_message,
    budget_abort_message,
    budget_warning_message,
    due_mark,
    enforced,
    exhausted,
    spend_cap_message,
    stop_message,
)
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
from .wire import CompactionRetry, Decision, Event, RunEnd, ToolCall, ToolResult, Usage

ABORT = COMPACTION_GUARD.name
_NO_DECISIONS: tuple[Decision, ...] = ()


def shown_name(ev: ToolCall | ToolResult | Usage) -> str:
    """The tool's name as the event carried it (`Bash`, `run_shell_command`), for the
    messages a model reads; `tool_name` on the wire stays normalized (section 7)."""
    return ev.tool_name.strip() if not isinstance(ev, Usage) else ""


def _decision(
    ev: ToolCall | ToolResult | Usage,
    tool: str | None,
    sig: str | None,
    cfg: AgentConfig,
    action: str = "allow",
    level: str = "none",
    detector: str | None = None,
    count: int | None = None,
    warning_key: str | None = None,
    paired: str | None = None,
    message: str | None = None,
    signal: str | None = None,
    shadow: bool = False,
) -> Decision:
    """A decision of `ev`. `message` None: the detector's own (rebuilt from the fields,
    naming the tool as the event carried it); `shadow`: not enforced, so published as
    allow with the action as `shadow_action`."""
    if message is None and detector is not None:
        message = BY_NAME[detector].message(action, shown_name(ev) if tool else "", count, paired)
    # By position, in the wire order: run_id, seq, gateway_id, agent_id, tool_call_id,
    # tool_name, ts, event_id, action, level, detector, count, message, warning_key,
    # paired_tool_name, args_hash, config_hash, fleet_signal, enforced, shadow_action.
    return Decision(
        ev.run_id,
        ev.seq,
        ev.gateway_id,
        ev.agent_id,
        getattr(ev, "tool_call_id", None),
        tool,
        ev.ts,
        f"{ev.run_id}:{ev.seq}",
        "allow" if shadow else action,
        level,
        detector,
        count,
        message,
        warning_key,
        paired,
        sig,
        cfg.config_hash,
        signal,
        not shadow,
        action if shadow else None,
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
    shadow = a.shadow_action is not None
    return _decision(
        ev,
        tool,
        sig,
        config.for_agent(ev.agent_id),
        a.shadow_action if shadow else a.action,  # type: ignore[arg-type]  # shadow: not None
        a.level,
        a.detector,
        a.count,
        a.warning_key,
        a.paired_tool_name,
        a.message,
        a.fleet_signal,
        shadow,
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


def _on_call(
    state: RunState, ev: ToolCall, cfg: AgentConfig, ts: int | None, fleet: FleetView | None
) -> tuple[RunState, tuple[Decision]]:
    tool, sig, poll = call_facts(ev)
    if fleet is not None and fleet.orders and ev.ts is not None:
        order = fleet.stop_for(ev)
        if order is not None:
            return _stopped(state, ev, tool, sig, cfg, ts, order)
    if state.aborted:
        return _aborted(state, ev, tool, sig, cfg, ts)
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
    if v is not None or not cfg.plain_policy or (fleet is not None and (fleet.breakers or fleet.spend)):
        return _judged(state, ev, tool, sig, key, keys, cfg, ts, v, fleet)
    # allow, enforced, no budget, no breaker: the common case, inlined
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
        None,
        True,
        None,
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
    answers = state.answers
    recent = state.recent_answers + (Answer(seq, "allow", "none"),)
    if len(recent) >= ANSWER_CHUNK:  # _remember, inlined
        answers, recent = (answers + recent)[-REMEMBERED_DECISIONS:], ()
    return replace(
        state,
        last_seq=seq,
        last_ts=ts,
        history=history,
        history_keys=keys,
        answers=answers,
        recent_answers=recent,
        calls=state.calls + 1,
    ), (d,)


def _judged(
    state: RunState,
    ev: ToolCall,
    tool: str,
    sig: str,
    key: str,
    keys: str,
    cfg: AgentConfig,
    ts: int | None,
    v: Verdict | None,
    fleet: FleetView | None,
) -> tuple[RunState, tuple[Decision]]:
    """A call some rule may judge: the detectors' verdict V (`v`, None for allow), then
    section 9's list from "a budget exhausted" on (a spend cap in force next, section
    11), then enforcement (section 10)."""
    calls = state.calls + 1
    warned = state.warned
    marks = state.budget_marks
    action, level = "allow", "none"
    name = warning_key = paired = message = signal = None
    count: int | None = None
    if v is not None:
        name, count, warning_key, paired = v.detector.name, v.count, v.warning_key, v.paired_tool_name
        if v.level == "critical":
            action, level = "block", "critical"
        else:
            action, warned = _warn(warned, v)
            level = "warning"
    record = action != "block"  # a blocked call is not recorded: the block stays in force
    aborted = False
    budgets = cfg.budgets
    spent = exhausted(budgets, state.tokens, state.cost_micros, calls) if budgets is not None else None
    if spent is not None:  # 8.3: abort, whatever V was (a V of abort was answered before)
        kind, used, ceiling = spent
        action, level, name, count, warning_key, paired = "abort", "critical", RUN_BUDGET, used, f"budget:{kind}", None
        message = budget_abort_message(kind, used, ceiling)
        record, aborted = False, True  # the run stops here: the call is not run, so not recorded
        warned = state.warned
    elif (
        fleet is not None
        and fleet.spend
        and cfg.spend_caps
        and (paused := fleet.spend_for(cfg.spend_caps, ev)) is not None
    ):  # a spend cap in force, whatever V was: a pause, not an abort (the run goes on after it)
        cap, s = paused
        action, level, name, count = "abort", "critical", FLEET_SPEND_CAP, s.used
        warning_key, paired, signal = f"spend:{cap.id}:{s.unit}", None, s.id
        message = spend_cap_message(cap, s)
        record = False  # as a blocked call: history and warning memory as they were
        warned = state.warned
    elif action != "block":
        b = fleet.breaker_for(tool, ev.ts) if fleet is not None and fleet.breakers else None
        if b is not None:  # an open breaker: a blocked call, history and warning memory as they were
            action, level, name, count = "block", "critical", FLEET_TOOL_BREAKER, b.runs
            warning_key, paired, signal = f"fleet:{tool}:{b.outcome}", None, b.id
            message = breaker_message(shown_name(ev), b)
            record = False
            warned = state.warned
        elif budgets is not None and v is None:  # 8.4: a budget warning on an allowed call
            due = due_mark(budgets, (state.tokens, state.cost_micros, calls), marks)
            if due is not None:
                i, mark, percent, marks = due
                kind = KINDS[i]
                top = budgets.ceilings()[i]
                assert top is not None  # due_mark names only kinds with a ceiling
                action, level, name, count = "warn", "warning", RUN_BUDGET, percent
                warning_key = f"budget:{kind}:{mark}"
                message = budget_warning_message(kind, (state.tokens, state.cost_micros, calls)[i], top, percent)
    history = state.history
    if record:
        entry = HistoryEntry(tool, sig, ev.tool_call_id)
        n = len(history)
        if n >= cfg.history_size:
            drop = n - cfg.history_size + 1
            history = history[drop:] + (entry,)
            keys = keys[drop * KEY_CHARS :] + key
        else:
            history = history + (entry,)
            keys = keys + key
    shadow = not enforced(cfg, ev.run_id)
    d = _decision(ev, tool, sig, cfg, action, level, name, count, warning_key, paired, message, signal, shadow)
    a = Answer(
        ev.seq,
        d.action,
        level,
        name,
        count,
        warning_key,
        paired,
        message if name in _POLICY else None,
        signal,
        d.shadow_action,
    )
    answers, recent = _remember(state, a)
    return replace(
        state,
        last_seq=ev.seq,
        last_ts=ts,
        history=history,
        history_keys=keys,
        warned=warned,
        answers=answers,
        recent_answers=recent,
        calls=calls,
        budget_marks=marks,
        aborted=aborted,
        abort_by=RUN_BUDGET if aborted else None,
    ), (d,)


_POLICY = frozenset((RUN_BUDGET, FLEET_TOOL_BREAKER, OPERATOR_STOP, FLEET_SPEND_CAP))


def _stopped(
    state: RunState, ev: ToolCall, tool: str, sig: str, cfg: AgentConfig, ts: int | None, order: StopOrder
) -> tuple[RunState, tuple[Decision]]:
    """A call a stop order in force matches: abort, always enforced; the run is aborted
    (keeping the detector of its first abort, if it was aborted before)."""
    key = f"stop:{order.id}"
    message = stop_message(order)
    d = _decision(ev, tool, sig, cfg, "abort", "critical", OPERATOR_STOP, None, key, None, message, order.id)
    a = Answer(ev.seq, "abort", "critical", OPERATOR_STOP, None, key, None, message, order.id)
    answers, recent = _remember(state, a)
    first = state.abort_by if state.aborted else OPERATOR_STOP
    return replace(
        state,
        last_seq=ev.seq,
        last_ts=ts,
        answers=answers,
        recent_answers=recent,
        calls=state.calls + 1,
        aborted=True,
        abort_by=first or ABORT,
    ), (d,)


def _aborted(
    state: RunState, ev: ToolCall, tool: str, sig: str, cfg: AgentConfig, ts: int | None
) -> tuple[RunState, tuple[Decision]]:
    """A call of a run aborted before: abort, by the detector of its first abort."""
    by = state.abort_by or ABORT  # a state stored before abort_by: only the guard aborted then
    message = aborted_message(by, shown_name(ev)) if by in _POLICY else None
    shadow = by != OPERATOR_STOP and not enforced(cfg, ev.run_id)
    d = _decision(ev, tool, sig, cfg, "abort", "critical", by, None, None, None, message, None, shadow)
    a = Answer(ev.seq, d.action, "critical", by, None, None, None, message, None, d.shadow_action)
    answers, recent = _remember(state, a)
    return replace(state, last_seq=ev.seq, last_ts=ts, answers=answers, recent_answers=recent, calls=state.calls + 1), (
        d,
    )


def _on_result(
    state: RunState, ev: ToolResult, cfg: AgentConfig, ts: int | None
) -> tuple[RunState, tuple[Decision, ...]]:
    if state.aborted:
        return replace(state, last_seq=ev.seq, last_ts=ts), _NO_DECISIONS
    tool, sig, rh, unknown = result_facts(ev)
    if rh is None:
        return replace(state, last_seq=ev.seq, last_ts=ts), _NO_DECISIONS
    # A failure (section 12): an error (raw mode), `failed` (either mode), or an error's digest.
    failed = ev.error is not UNSET or ev.failed is True or rh.startswith("error:")
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
            filled = HistoryEntry(tool, sig, r.tool_call_id, rh, unknown, failed)
            if i == last:  # the usual case: the result of the newest call
                history = history[:i] + (filled,)
            else:
                history = history[:i] + (filled,) + history[i + 1 :]
            break
    else:
        history, keys = _append(
            history, keys_of(state), HistoryEntry(tool, sig, want_id, rh, unknown, failed), cfg.history_size
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
            shadow = not enforced(cfg, ev.run_id)
            d = _decision(ev, tool, sig, cfg, "abort", "critical", v.detector.name, v.count, shadow=shadow)
            return replace(
                state,
                last_seq=ev.seq,
                last_ts=ts,
                history=history,
                history_keys=keys,
                guard_left=0,
                guard_window=(),
                aborted=True,
                abort_by=v.detector.name,
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


_MAX_TOTAL = 2**63 - 1  # a run's token and cost totals stop here (what a stored state holds)


def _on_usage(state: RunState, ev: Usage, cfg: AgentConfig, ts: int | None) -> tuple[RunState, tuple[Decision, ...]]:
    """A model call's usage: add it up; abort the run if it spends a budget (section 8)."""
    tokens = min(state.tokens + ev.input_tokens + ev.output_tokens, _MAX_TOTAL)
    cost = min(state.cost_micros + micro_dollars(ev.cost_usd), _MAX_TOTAL) if ev.cost_usd else state.cost_micros
    budgets = cfg.budgets
    spent = None
    if budgets is not None and not state.aborted:
        if budgets.tokens is not None and tokens >= budgets.tokens:
            spent = "tokens", tokens, budgets.tokens
        elif budgets.cost is not None and cost >= budgets.cost:
            spent = "cost", cost, budgets.cost
    if spent is None:
        return replace(state, last_seq=ev.seq, last_ts=ts, tokens=tokens, cost_micros=cost), _NO_DECISIONS
    kind, used, ceiling = spent
    message = budget_abort_message(kind, used, ceiling)
    shadow = not enforced(cfg, ev.run_id)
    d = _decision(
        ev, None, None, cfg, "abort", "critical", RUN_BUDGET, used, f"budget:{kind}", None, message, None, shadow
    )
    return replace(
        state, last_seq=ev.seq, last_ts=ts, tokens=tokens, cost_micros=cost, aborted=True, abort_by=RUN_BUDGET
    ), (d,)


def apply(
    state: RunState | None, ev: Event, config: DetectionConfig, fleet: FleetView | None = None
) -> tuple[RunState | None, tuple[Decision, ...]]:
    """Apply one event to its run's state. A None state is a run with no state yet; a
    None result means the run ended and its state is to be dropped. Raises StaleSeqError
    for a stale tool_call whose decision is no longer remembered.

    `fleet`: the stop orders and breakers a call is judged against (semantics.md section
    9); None, or an empty view, judges by the run alone."""
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
    kind = type(ev)  # (the event types have no subclasses; `is` is cheaper than isinstance)
    if kind is ToolCall:
        return _on_call(state, ev, config.for_agent(ev.agent_id), ts, fleet)  # type: ignore[arg-type]
    if kind is ToolResult:
        return _on_result(state, ev, config.for_agent(ev.agent_id), ts)  # type: ignore[arg-type]
    if isinstance(ev, Usage):
        return _on_usage(state, ev, config.for_agent(ev.agent_id), ts)
    if isinstance(ev, RunEnd):
        return None, _NO_DECISIONS
    assert isinstance(ev, CompactionRetry)
    cfg = config.for_agent(ev.agent_id)
    if cfg.compaction_guard_on:
        return replace(state, last_seq=ev.seq, last_ts=ts, guard_left=cfg.window, guard_window=()), _NO_DECISIONS
    return replace(state, last_seq=ev.seq, last_ts=ts), _NO_DECISIONS
