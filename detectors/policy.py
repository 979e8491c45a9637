"""loopwarden's own rules on top of the detectors: run budgets (semantics.md section 8),
the fleet's verdicts (sections 9 and 11) and shadow mode and holdout (section 10).

The detectors of `rules/` judge a run by its history; these judge what the run spent,
what the fleet says, and whether a verdict is enforced at all. The engine applies them
in the order of section 9's list; this module holds their arithmetic and their messages.
"""

from __future__ import annotations

import hashlib

from .config import AgentConfig, Budgets, SpendCapConfig
from .fleet import Breaker, SpendCapSignal, StopOrder

RUN_BUDGET = "run_budget"
FLEET_TOOL_BREAKER = "fleet_tool_breaker"
OPERATOR_STOP = "operator_stop"
FLEET_SPEND_CAP = "fleet_spend_cap"
POLICY_NAMES: tuple[str, ...] = (RUN_BUDGET, FLEET_TOOL_BREAKER, OPERATOR_STOP, FLEET_SPEND_CAP)
"""The `detector` values of these rules (beside `rules.NAMES`, the detectors')."""

KINDS = ("tokens", "cost", "calls")  # the order budget kinds are taken in
MARKS = (80, 95)  # the warning marks, in percent
_UNITS = {"tokens": "tokens", "cost": "micro-dollars", "calls": "tool calls"}


def exhausted(budgets: Budgets, tokens: int, cost: int, calls: int) -> tuple[str, int, int] | None:
    """The first exhausted kind as (kind, used, ceiling), or None (section 8)."""
    t, c, n = budgets.tokens, budgets.cost, budgets.calls
    if t is not None and tokens >= t:
        return "tokens", tokens, t
    if c is not None and cost >= c:
        return "cost", cost, c
    if n is not None and calls > n:
        return "calls", calls, n
    return None


def due_mark(
    budgets: Budgets, used: tuple[int, int, int], marks: tuple[int, int, int]
) -> tuple[int, int, int, tuple[int, int, int]] | None:
    """The budget warning due now, as (kind index, mark, percent, new marks), or None:
    the first kind, in order, that reached a mark higher than the one it was warned of;
    the highest such mark is warned, and it and every lower one count as warned."""
    for i, ceiling in enumerate(budgets.ceilings()):
        if ceiling is None:
            continue
        u = used[i]
        reached = 0
        for mark in MARKS:
            if u * 100 >= mark * ceiling:
                reached = mark
        if reached > marks[i]:
            new = list(marks)
            new[i] = reached
            return i, reached, u * 100 // ceiling, (new[0], new[1], new[2])
    return None


def _amount(kind: str, v: int) -> str:
    if kind == "cost":
        return f"${v / 1_000_000:.6f}".rstrip("0").rstrip(".")
    return f"{v} {_UNITS[kind]}"


def budget_abort_message(kind: str, used: int, ceiling: int) -> str:
    return (
        f"Run aborted: its {kind} budget is spent ({_amount(kind, used)} used of {_amount(kind, ceiling)}); "
        "the run may not make further tool calls."
    )


def budget_warning_message(kind: str, used: int, ceiling: int, percent: int) -> str:
    return (
        f"Warning: this run has used {percent}% of its {kind} budget ({_amount(kind, used)} of "
        f"{_amount(kind, ceiling)}); it will be stopped when the budget is spent."
    )


def breaker_message(tool: str, b: Breaker) -> str:
    return (
        f"Blocked: {tool} is failing across the fleet ({b.runs} runs on {b.gateways} gateways hit the same error "
        f"within {b.window_ms // 1000} s); calls of {tool} are paused until the breaker closes. Do not retry it now."
    )


def utc_text(ms: int) -> str:
    """`ms` since the Unix epoch as an ISO 8601 UTC time (`2026-05-28T21:00:00Z`, with
    milliseconds only when there are some), computed from the number alone: the core
    reads no clock and no time zone (the proleptic Gregorian calendar, days to civil
    date by whole 400-year eras)."""
    secs, millis = divmod(ms, 1000)
    days, secs = divmod(secs, 86400)
    z = days + 719468  # days since 0000-03-01
    era = z // 146097
    doe = z - era * 146097  # day of the era, 0 to 146096
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)  # day of the year starting in March
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (month <= 2)
    hh, rest = divmod(secs, 3600)
    mm, ss = divmod(rest, 60)
    frac = f".{millis:03d}" if millis else ""
    return f"{year:04d}-{month:02d}-{day:02d}T{hh:02d}:{mm:02d}:{ss:02d}{frac}Z"


def spend_cap_message(cap: SpendCapConfig, s: SpendCapSignal) -> str:
    """The message of a call a spend cap pauses: the cap, the key, the kind, used and
    ceiling, and when the window ends (semantics.md section 11)."""
    if cap.per == "agent":
        who = f"agent {s.key}" if s.key else "calls without an agent id"
    elif cap.per == "gateway":
        who = f"gateway {s.key}"
    else:
        who = "all its agents together"
    return (
        f"Paused: the fleet spend cap {cap.id} is reached for {who} ({s.unit}: {_amount(s.unit, s.used)} used of "
        f"{_amount(s.unit, s.ceiling)} in its window); tool calls are paused until the window ends at "
        f"{utc_text(s.window_end)}, unless an operator lifts the cap sooner. The run is not aborted."
    )


def aborted_message(detector: str, tool: str) -> str:
    """The message of a call made after the run was aborted by one of these rules."""
    if detector == RUN_BUDGET:
        return f"Run aborted: {tool} was called after the run's budget was spent."
    return f"Run aborted: {tool} was called after an operator stopped the run."


def stop_message(order: StopOrder) -> str:
    return order.reason or f"Run stopped by operator order {order.id}."


def held_out(run_id: str, percent: int) -> bool:
    """Whether a run is held out at `holdoutPercent` P (section 10): the first 8 hex
    digits of sha256 of the run id's UTF-8 bytes, as a number, mod 100, below P."""
    if percent <= 0:
        return False
    digest = hashlib.sha256(run_id.encode("utf-8", "surrogatepass")).hexdigest()
    return int(digest[:8], 16) % 100 < percent


def enforced(cfg: AgentConfig, run_id: str) -> bool:
    """Whether decisions of this run and agent are enforced (section 10; stop orders aside)."""
    return cfg.enforce and not (cfg.holdout_percent and held_out(run_id, cfg.holdout_percent))
