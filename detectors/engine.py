"""The fold of one event: `apply(state, event, config) -> (state, decisions)`.

The detectors themselves live in `rules/`; this module keeps a run's history, asks the
agent's detectors in order (the first verdict wins), applies warning suppression, and
builds the decision. It runs once per event on every reader, so it is written for speed:
one new state per event, no work beyond the decision for a call nothing fires on.
"""

from __future__ import annotations

from typing import NamedTuple

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
    # Most calls are new to the history, after a record naming no missing tool: with the
    # default detectors none can fire then, and none is asked (`_verdict` checks again).
    if cfg.call_detectors and (key in keys or cfg.plain_call_detectors or (history and history[-1].unknown_tool_name)):
        v = _verdict(history, keys, key, tool, sig, poll, cfg)
    if v is not None or not cfg.plain_policy or (fleet is not None and (fleet.breakers or fleet.spend)):
        return _judged(state, ev, tool, sig, key, keys, cfg, ts, v, fleet)
    return _allowed(state, ev, tool, sig, key, keys, cfg, ts)


def _verdict(
    history: tuple[HistoryEntry, ...], keys: str, key: str, tool: str, sig: str, poll: bool, cfg: AgentConfig
) -> Verdict | None:
    """The first of the agent's detectors that fires on the call, or None."""
    detectors = cfg.call_detectors
    new = key not in keys
    if new:  # most calls: only detectors that need no repeat can fire
        # after an unknown-tool record, a streak may grow; else (with the defaults) no detector at all
        unknown = bool(history) and bool(history[-1].unknown_tool_name)
        detectors = cfg.new_call_detectors if unknown else cfg.plain_call_detectors
        if not detectors:
            return None
    scan = CallScan(history, tool, sig, poll, new)
    if not (new or scan.seen):  # its key, but another signature's: not a repeat after all
        detectors = cfg.new_call_detectors
    for detector in detectors:
        v = detector.evaluate(scan, cfg)
        if v is not None:
            return v
    return None


# allow and no detector: the fields of the common decision between its ids and its args_hash
_ALLOW_FIELDS = ("allow", "none", None, None, None, None, None)


def _allowed(
    state: RunState, ev: ToolCall, tool: str, sig: str, key: str, keys: str, cfg: AgentConfig, ts: int | None
) -> tuple[RunState, tuple[Decision]]:
    """The common case: allowed, enforced, no budget, no breaker nor cap; the call recorded."""
    seq, run, call_id = ev.seq, ev.run_id, ev.tool_call_id
    d = Decision(
        run, seq, ev.gateway_id, ev.agent_id, call_id, tool, ev.ts, f"{run}:{seq}", *_ALLOW_FIELDS,
        sig, cfg.config_hash, None, True, None,
    )  # fmt: skip
    history = state.history
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


class _Said(NamedTuple):
    """What a judged call is told: its decision's fields but the ids."""

    action: str
    level: str
    name: str | None = None
    n: int | None = None  # the decision's count
    warning_key: str | None = None
    paired: str | None = None
    message: str | None = None
    signal: str | None = None


_ALLOWED = _Said("allow", "none")


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
    section 9's list from "a budget exhausted" on (`_policy`), then enforcement (section
    10). A blocked or paused call is not recorded: the block stays in force."""
    calls = state.calls + 1
    warned = state.warned
    said = _ALLOWED
    if v is not None:
        action = "block"
        if v.level != "critical":
            action, warned = _warn(warned, v)
        level = "critical" if action == "block" else "warning"
        said = _Said(action, level, v.detector.name, v.count, v.warning_key, v.paired_tool_name)
    over, marks = _policy(state, ev, tool, cfg, fleet, calls, said.action == "block", v is None)
    if over is not None:  # the policy's verdict: history and warning memory as they were
        said, warned = over, state.warned
    aborted = said.name == RUN_BUDGET and said.action == "abort"
    history = state.history
    if said.action not in ("block", "abort"):
        history, keys = _append(history, keys, HistoryEntry(tool, sig, ev.tool_call_id), cfg.history_size)
    shadow = not enforced(cfg, ev.run_id)
    d = _decision(ev, tool, sig, cfg, *said, shadow)
    message = said.message if said.name in _POLICY else None
    a = Answer(
        ev.seq, d.action, said.level, said.name, said.n, said.warning_key, said.paired, message, said.signal,
        d.shadow_action,
    )  # fmt: skip
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


def _policy(
    state: RunState,
    ev: ToolCall,
    tool: str,
    cfg: AgentConfig,
    fleet: FleetView | None,
    calls: int,
    blocked: bool,
    allowed: bool,
) -> tuple[_Said | None, tuple[int, int, int]]:
    """Section 9's list from "a budget exhausted" on: a budget exhausted (8.3), a spend
    cap in force (11), then, unless V is a block, an open breaker, and, if V allowed the
    call, a budget warning (8.4). (What it says, or None; the budget marks warned.)"""
    budgets = cfg.budgets
    marks = state.budget_marks
    spent = exhausted(budgets, state.tokens, state.cost_micros, calls) if budgets is not None else None
    if spent is not None:  # abort, whatever V was (a V of abort was answered before)
        kind, used, _ = spent
        return _Said("abort", "critical", RUN_BUDGET, used, f"budget:{kind}", None, budget_abort_message(*spent)), marks
    if fleet is not None and fleet.spend and cfg.spend_caps:
        paused = fleet.spend_for(cfg.spend_caps, ev)
        if paused is not None:  # a pause, not an abort: the run goes on after it
            cap, sig = paused
            message = spend_cap_message(cap, sig)
            return _Said(
                "abort", "critical", FLEET_SPEND_CAP, sig.used, f"spend:{cap.id}:{sig.unit}", None, message, sig.id
            ), marks
    if blocked:
        return None, marks
    b = fleet.breaker_for(tool, ev.ts) if fleet is not None and fleet.breakers else None
    if b is not None:
        message = breaker_message(shown_name(ev), b)
        return _Said(
            "block", "critical", FLEET_TOOL_BREAKER, b.runs, f"fleet:{tool}:{b.outcome}", None, message, b.id
        ), marks
    due = due_mark(budgets, (state.tokens, state.cost_micros, calls), marks) if budgets and allowed else None
    if due is None:
        return None, marks
    i, mark, percent, marks = due
    top = budgets.ceilings()[i]  # type: ignore[union-attr]  # due_mark is asked only with budgets
    assert top is not None  # due_mark names only kinds with a ceiling
    used = (state.tokens, state.cost_micros, calls)[i]
    message = budget_warning_message(KINDS[i], used, top, percent)
    return _Said("warn", "warning", RUN_BUDGET, percent, f"budget:{KINDS[i]}:{mark}", None, message), marks


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
            # the usual case: the result of the newest call
            history = history[:i] + (filled,) if i == last else history[:i] + (filled,) + history[i + 1 :]
            break
    else:
        history, keys = _append(
            history, keys_of(state), HistoryEntry(tool, sig, want_id, rh, unknown, failed), cfg.history_size
        )
    if state.guard_left <= 0 or not cfg.result_detectors:
        return replace(state, last_seq=ev.seq, last_ts=ts, history=history, history_keys=keys), _NO_DECISIONS
    return _guarded(replace(state, history=history, history_keys=keys), ev, tool, sig, rh, cfg, ts)


def _guarded(
    state: RunState, ev: ToolResult, tool: str, sig: str, rh: str, cfg: AgentConfig, ts: int | None
) -> tuple[RunState, tuple[Decision, ...]]:
    """A result while the post-compaction guard is armed (section 5): one attempt used;
    the run aborted when the window holds `windowSize` identical outcomes."""
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
                guard_left=0,
                guard_window=(),
                aborted=True,
                abort_by=v.detector.name,
            ), (d,)
    left = state.guard_left - 1
    return replace(state, last_seq=ev.seq, last_ts=ts, guard_left=left, guard_window=window if left else ()), (
        _NO_DECISIONS
    )


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


def _duplicate(state: RunState, ev: Event, config: DetectionConfig) -> tuple[Decision, ...]:
    """An event already applied (section 6): a tool_call is answered again with its
    remembered decision; StaleSeqError when it is no longer remembered."""
    if not isinstance(ev, ToolCall):
        return _NO_DECISIONS
    for a in reversed(remembered(state)):
        if a.seq == ev.seq:
            return (_answer_again(ev, a, config),)
    raise StaleSeqError(f"stale tool_call: seq {ev.seq} <= last applied seq {state.last_seq} of run {ev.run_id!r}")


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
        return state, _duplicate(state, ev, config)
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
