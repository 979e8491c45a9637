"""Detection config: OpenClaw's `tools.loopDetection` shape, merged, defaulted, clamped.

`load_config(text)` never refuses a config for its values: a field that is not usable
falls back to its default and is named in `DetectionConfig.warnings` (semantics.md
sections 1 and 6). Only text that is not JSON5, or not an object, is a ConfigError.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import json5
from msgspec import Struct

from .canonical import canon_exact, digest
from .errors import ConfigError
from .rules import CALL_DETECTORS, RESULT_DETECTORS, SWITCHES, CallScan, Detector, GuardScan

DEFAULTS: dict[str, Any] = {
    "historySize": 30,
    "warningThreshold": 10,
    "criticalThreshold": 20,
    "unknownToolThreshold": 10,
    "globalCircuitBreakerThreshold": 30,
}
DEFAULT_WINDOW = 3
DEFAULT_IDLE_TIMEOUT_MS = 24 * 60 * 60 * 1000  # loopwarden.runIdleTimeoutMs (semantics.md section 7)
BUDGET_FIELDS = ("runTokens", "runCostUsd", "runToolCalls")  # loopwarden.budgets (section 8), in rule order
BREAKER_DEFAULTS: dict[str, Any] = {"enabled": False, "minRuns": 20, "windowMs": 300000, "coolDownMs": 120000}
DEFAULT_SPEND_WINDOW_MS = 3600000  # loopwarden.fleet.spendCaps[].windowMs (semantics.md section 11)
SPEND_PER = ("agent", "gateway", "all")


class ToolBreakerConfig(Struct, frozen=True):
    """`loopwarden.fleet.toolBreaker` (semantics.md section 9), global only."""

    enabled: bool = False
    min_runs: int = 20
    window_ms: int = 300000
    cool_down_ms: int = 120000


class Budgets(Struct, frozen=True):
    """An agent's run ceilings (semantics.md section 8), in each kind's unit; None: no
    ceiling. `cost` is in micro-dollars; `cost_usd` the number the config gave."""

    tokens: int | None = None
    cost: int | None = None
    calls: int | None = None
    cost_usd: float | int | None = None

    def ceilings(self) -> tuple[int | None, int | None, int | None]:
        """(tokens, cost, calls): the order budget kinds are taken in."""
        return (self.tokens, self.cost, self.calls)


NO_BUDGETS = Budgets()


class SpendCapConfig(Struct, frozen=True, kw_only=True):
    """One valid entry of `loopwarden.fleet.spendCaps` (semantics.md section 11), global
    only. Ceilings in each kind's unit (None: no ceiling; at least one is set): `cost`
    in micro-dollars, `cost_usd` the number the config gave. `agents`: the ids it is
    limited to, trimmed and lower-cased, in the config's order (None: every event)."""

    id: str
    per: str = "agent"  # one of SPEND_PER
    agents: tuple[str, ...] | None = None
    window_ms: int = DEFAULT_SPEND_WINDOW_MS
    tokens: int | None = None
    cost: int | None = None
    calls: int | None = None
    cost_usd: float | int | None = None
    agent_set: frozenset[str] | None = None  # `agents`, for lookups

    def ceilings(self) -> tuple[int | None, int | None, int | None]:
        """(tokens, cost, calls): the order a cap's kinds are taken in."""
        return (self.tokens, self.cost, self.calls)

    def key_of(self, agent_id: str | None, gateway_id: str) -> str | None:
        """The key an event of this agent and gateway counts under, or None when the cap
        does not match it (an `agents` list without its agent, or an event without one)."""
        agent = agent_id.strip().lower() if agent_id is not None else None
        if self.agent_set is not None and (agent is None or agent not in self.agent_set):
            return None
        per = self.per
        if per == "agent":
            return agent if agent is not None else ""
        if per == "gateway":
            return gateway_id
        return ""

    def window_of(self, ts: int) -> int:
        """The start of the window `ts` falls in: windows are tumbling and aligned to the
        Unix epoch (floor division, so a negative ts falls in the window before 0)."""
        return ts // self.window_ms * self.window_ms

    def shape(self) -> dict[str, Any]:
        """The entry in the hashed shape (wire-format.md, "Config file")."""
        return {
            "id": self.id,
            "per": self.per,
            "agents": list(self.agents) if self.agents is not None else None,
            "windowMs": self.window_ms,
            "tokens": self.tokens,
            "costUsd": self.cost_usd,
            "toolCalls": self.calls,
        }


RULE_DEFAULTS: dict[str, dict[str, int]] = {
    "failureRepeat": {"consecutive": 3},
    "cycles": {"maxPeriod": 6, "laps": 3},
}
"""`loopwarden.rules`' numbers and their defaults, by rule (semantics.md section 12)."""


class Rules(Struct, frozen=True):
    """An agent's `loopwarden.rules` (semantics.md section 12), resolved: each rule off
    unless its `enabled` is true."""

    progress_aware: bool = False
    failure_repeat: bool = False
    consecutive: int = 3
    cycles: bool = False
    max_period: int = 6
    laps: int = 3

    def on(self) -> bool:
        """Whether any of them is on (only then is the hashed shape given `rules`)."""
        return self.progress_aware or self.failure_repeat or self.cycles

    def enabled(self, rule: str) -> bool:
        """Whether the rule entry `rule` (a detector's `rule`) is on."""
        return self.failure_repeat if rule == "failureRepeat" else self.cycles if rule == "cycles" else False

    def shape(self) -> dict[str, Any]:
        """The `rules` object of the hashed shape (wire-format.md, "Config file")."""
        return {
            "progressAware": self.progress_aware,
            "failureRepeat": {"enabled": self.failure_repeat, "consecutive": self.consecutive},
            "cycles": {"enabled": self.cycles, "maxPeriod": self.max_period, "laps": self.laps},
        }


NO_RULES = Rules()


def micro_dollars(usd: float) -> int:
    """`floor(usd * 1000000 + 0.5)`, in IEEE doubles as every language computes it."""
    return math.floor(float(usd) * 1000000.0 + 0.5)


class AgentConfig(Struct, frozen=True):
    """The effective config of one agent (semantics.md section 1), with the detectors it
    runs: `call_detectors` judge each tool_call (none while `rolling_detectors_on` is
    false; `new_call_detectors` a call not in the history yet, `plain_call_detectors` one
    that is not either and follows an entry naming no missing tool), `result_detectors`
    each tool_result while the guard is armed."""

    enabled: bool | None
    history_size: int
    warning: int
    critical: int
    unknown_tool: int
    global_breaker: int
    detectors: frozenset[str]  # the `tools.loopDetection.detectors` switches that are on
    window: int
    config_hash: str
    idle_timeout_ms: int = DEFAULT_IDLE_TIMEOUT_MS
    rolling_detectors_on: bool = False  # `enabled` is true: the detectors of section 4 judge calls
    compaction_guard_on: bool = True  # `enabled` is not false: the post-compaction guard (section 5)
    call_detectors: tuple[Detector[CallScan], ...] = ()
    new_call_detectors: tuple[Detector[CallScan], ...] = ()  # those of call_detectors not `repeats_only`
    plain_call_detectors: tuple[Detector[CallScan], ...] = ()  # those of new_call_detectors not `streak_only`
    result_detectors: tuple[Detector[GuardScan], ...] = ()
    budgets: Budgets | None = None  # None: no ceiling at all (the common case, checked first)
    enforce: bool = True  # false: shadow mode (semantics.md section 10)
    holdout_percent: int = 0  # global: runs held out (section 10)
    # Section 12 (`loopwarden.rules`): what its detectors read (the `Thresholds` protocol).
    progress_aware: bool = False
    consecutive: int = 3
    max_period: int = 6
    laps: int = 3
    # No budget, enforced, none held out: an allowed call needs no policy rule (checked
    # on every call, so one field rather than three).
    plain_policy: bool = True
    spend_caps: tuple[SpendCapConfig, ...] = ()  # global (semantics.md section 11): the fleet's spend caps

    def switched_on(self, switch: str) -> bool:
        """Whether `tools.loopDetection.detectors.<switch>` is on for this agent."""
        return switch in self.detectors


def _positive_int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int) and v > 0:
        return v
    if isinstance(v, float) and v.is_integer() and v > 0:
        return int(v)
    return None


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def _block(obj: Any, where: str, warnings: list[str]) -> dict[str, Any]:
    """The `tools.loopDetection` object under obj, or {} with a warning when malformed."""
    if not isinstance(obj, dict):
        return {}
    tools = obj.get("tools")
    if tools is None:
        return {}
    if not isinstance(tools, dict):
        warnings.append(f"{where}tools: not an object; ignored")
        return {}
    ld = tools.get("loopDetection")
    if ld is None:
        return {}
    if not isinstance(ld, dict):
        warnings.append(f"{where}tools.loopDetection: not an object; ignored")
        return {}
    return ld


def _own_fields(block: dict[str, Any]) -> set[str]:
    out = set()
    for k, v in block.items():
        out.add(k)
        if isinstance(v, dict):
            out.update(f"{k}.{n}" for n in v)
    return out


def _idle_timeout(doc: dict[str, Any], warnings: list[str]) -> int:
    """`loopwarden.runIdleTimeoutMs`: a positive integer, else the default with a warning."""
    block = doc.get("loopwarden")
    if block is None:
        return DEFAULT_IDLE_TIMEOUT_MS
    if not isinstance(block, dict):
        warnings.append("loopwarden: not an object; ignored")
        return DEFAULT_IDLE_TIMEOUT_MS
    raw = block.get("runIdleTimeoutMs")
    if raw is None:
        return DEFAULT_IDLE_TIMEOUT_MS
    val = _positive_int(raw)
    if val is None:
        warnings.append(
            f"loopwarden.runIdleTimeoutMs: {raw!r} is not a positive integer; "
            f"using the default {DEFAULT_IDLE_TIMEOUT_MS}"
        )
        return DEFAULT_IDLE_TIMEOUT_MS
    return val


def resolve(
    merged: dict[str, Any],
    where: str,
    warnings: list[str],
    own: set[str] | None = None,
    idle_timeout_ms: int = DEFAULT_IDLE_TIMEOUT_MS,
    own_policy: AgentPolicy | None = None,
    fleet: FleetPolicy | None = None,
    rules: Rules = NO_RULES,
) -> AgentConfig:
    """Defaults, fallback and clamping over a merged loopDetection block. Warnings name
    only the fields in `own` (those the block at `where` set itself), so a bad global
    value is reported once, not again for every agent that inherits it."""
    p = f"{where}tools.loopDetection."
    found: list[str] = []
    nums = _thresholds(merged, p, found)
    enabled = merged.get("enabled")
    if enabled is not None and not isinstance(enabled, bool):
        found.append(f"{p}enabled: {enabled!r} is not true or false; treated as unset")
        enabled = None
    switches = _switches(merged, p, found)
    window = _guard_window(merged, p, found)
    for w in found:
        field = w[len(p) :].split(":", 1)[0]
        if own is None or field in own:
            warnings.append(w)
    policy = own_policy if own_policy is not None else AgentPolicy()
    fleet = fleet if fleet is not None else FleetPolicy()
    shape = _shape(enabled, nums, switches, window, idle_timeout_ms, policy, fleet, rules)
    rolling, guard = enabled is True, enabled is not False
    on_calls = tuple(d for d in (CALL_DETECTORS if rolling else ()) if _on(d, switches, rules))
    budgets = policy.budgets
    return AgentConfig(
        enabled=enabled,
        history_size=nums["historySize"],
        warning=nums["warningThreshold"],
        critical=nums["criticalThreshold"],
        unknown_tool=nums["unknownToolThreshold"],
        global_breaker=nums["globalCircuitBreakerThreshold"],
        detectors=frozenset(k for k, on in switches.items() if on),
        window=window,
        config_hash=digest(shape),
        idle_timeout_ms=idle_timeout_ms,
        rolling_detectors_on=rolling,
        compaction_guard_on=guard,
        call_detectors=on_calls,
        new_call_detectors=tuple(d for d in on_calls if not d.repeats_only),
        plain_call_detectors=tuple(d for d in on_calls if not (d.repeats_only or d.streak_only)),
        result_detectors=tuple(d for d in RESULT_DETECTORS if d.switch is None or switches[d.switch]) if guard else (),
        budgets=budgets if budgets != NO_BUDGETS else None,
        enforce=policy.enforce,
        holdout_percent=fleet.holdout_percent,
        progress_aware=rules.progress_aware,
        consecutive=rules.consecutive,
        max_period=rules.max_period,
        laps=rules.laps,
        plain_policy=budgets == NO_BUDGETS and policy.enforce and not fleet.holdout_percent,
        spend_caps=fleet.spend_caps,
    )


def _on(d: Detector[Any], switches: dict[str, bool], rules: Rules) -> bool:
    """Whether a detector is switched on (`detectors`) and, if it is a rule of section
    12, enabled (`loopwarden.rules`)."""
    return (d.switch is None or switches[d.switch]) and (d.rule is None or rules.enabled(d.rule))


def _thresholds(merged: dict[str, Any], p: str, warnings: list[str]) -> dict[str, int]:
    """The numbers of section 1.3 (a bad one: its built-in default) clamped as 1.4 says."""
    nums: dict[str, int] = {}
    for name, default in DEFAULTS.items():
        raw = merged.get(name)
        val = _positive_int(raw) if raw is not None else default
        if val is None:
            warnings.append(f"{p}{name}: {raw!r} is not a positive integer; using the default {default}")
            val = default
        nums[name] = val
    if nums["criticalThreshold"] <= nums["warningThreshold"]:
        warnings.append(
            f"{p}criticalThreshold: {nums['criticalThreshold']} is not above warningThreshold "
            f"{nums['warningThreshold']}; clamped to {nums['warningThreshold'] + 1}"
        )
        nums["criticalThreshold"] = nums["warningThreshold"] + 1
    if nums["globalCircuitBreakerThreshold"] <= nums["criticalThreshold"]:
        warnings.append(
            f"{p}globalCircuitBreakerThreshold: {nums['globalCircuitBreakerThreshold']} is not above "
            f"criticalThreshold {nums['criticalThreshold']}; clamped to {nums['criticalThreshold'] + 1}"
        )
        nums["globalCircuitBreakerThreshold"] = nums["criticalThreshold"] + 1
    return nums


def _switches(merged: dict[str, Any], p: str, warnings: list[str]) -> dict[str, bool]:
    """`detectors`: each switch on unless it is false."""
    dets = merged.get("detectors")
    if dets is not None and not isinstance(dets, dict):
        warnings.append(f"{p}detectors: not an object; all detectors on")
        dets = None
    switches = {}
    for name in SWITCHES:
        raw = (dets or {}).get(name)
        if raw is not None and not isinstance(raw, bool):
            warnings.append(f"{p}detectors.{name}: {raw!r} is not true or false; using true")
            raw = None
        switches[name] = True if raw is None else raw
    return switches


def _guard_window(merged: dict[str, Any], p: str, warnings: list[str]) -> int:
    """`postCompactionGuard.windowSize`."""
    guard = merged.get("postCompactionGuard")
    if guard is not None and not isinstance(guard, dict):
        warnings.append(f"{p}postCompactionGuard: not an object; using the default window {DEFAULT_WINDOW}")
        guard = None
    raw = (guard or {}).get("windowSize")
    window = _positive_int(raw) if raw is not None else DEFAULT_WINDOW
    if window is None:
        warnings.append(
            f"{p}postCompactionGuard.windowSize: {raw!r} is not a positive integer; using the default {DEFAULT_WINDOW}"
        )
        window = DEFAULT_WINDOW
    return window


def _shape(
    enabled: bool | None,
    nums: dict[str, int],
    switches: dict[str, bool],
    window: int,
    idle_timeout_ms: int,
    policy: AgentPolicy,
    fleet: FleetPolicy,
    rules: Rules,
) -> dict[str, Any]:
    """The resolved config as its hash sees it (semantics.md section 1, wire-format.md)."""
    budgets, breaker = policy.budgets, fleet.breaker
    lw: dict[str, Any] = {
        "runIdleTimeoutMs": idle_timeout_ms,
        "budgets": {"runTokens": budgets.tokens, "runCostUsd": budgets.cost_usd, "runToolCalls": budgets.calls},
        "enforce": policy.enforce,
        "holdoutPercent": fleet.holdout_percent,
        "fleet": {
            "toolBreaker": {
                "enabled": breaker.enabled,
                "minRuns": breaker.min_runs,
                "windowMs": breaker.window_ms,
                "coolDownMs": breaker.cool_down_ms,
            }
        },
    }
    if fleet.spend_caps:  # only then: configs without caps keep their hash
        lw["fleet"]["spendCaps"] = [cap.shape() for cap in fleet.spend_caps]
    if rules.on():  # only then, likewise
        lw["rules"] = rules.shape()
    shape = {"enabled": enabled, **nums, "detectors": switches, "postCompactionGuard": {"windowSize": window}}
    shape["loopwarden"] = lw
    return shape


class AgentPolicy(Struct, frozen=True):
    """loopwarden's own per-agent fields, resolved: `budgets` and `enforce`."""

    budgets: Budgets = NO_BUDGETS
    enforce: bool = True


class AnomalyConfig(Struct, frozen=True):
    """`loopwarden.fleet.spendAnomaly` (loopwarden's own, alerts only, not in the hashed
    shape): an agent whose spend or call count in a window of `window_ms` is above
    `factor` times the median of its previous `history` windows, and at or above a
    floor, is reported (detectors/anomaly.py). A kind without a floor is not watched;
    fewer than `min_windows` previous windows with any spend are no norm yet."""

    window_ms: int = 3_600_000
    history: int = 24
    factor: float = 3.0
    min_windows: int = 3
    tokens: int | None = None  # the floors, in each kind's unit (cost in micro-dollars)
    cost: int | None = 1_000_000
    calls: int | None = 200

    def floors(self) -> tuple[int | None, int | None, int | None]:
        return (self.tokens, self.cost, self.calls)


ANOMALY_DEFAULTS: dict[str, Any] = {"windowMs": 3_600_000, "history": 24, "minWindows": 3}


class FleetPolicy(Struct, frozen=True):
    """loopwarden's own global-only fields, resolved: `holdoutPercent`, the breaker, the
    spend caps and the spend anomaly watch."""

    holdout_percent: int = 0
    breaker: ToolBreakerConfig = ToolBreakerConfig()
    spend_caps: tuple[SpendCapConfig, ...] = ()
    anomaly: AnomalyConfig | None = None  # None: not watched


def _object(v: Any, where: str, warnings: list[str]) -> dict[str, Any]:
    """v if an object; {} for None; {} with a warning for anything else."""
    if v is None:
        return {}
    if not isinstance(v, dict):
        warnings.append(f"{where}: not an object; ignored")
        return {}
    return v


def _cost_ceiling(v: Any) -> int | None:
    """runCostUsd's micro-dollar value, or None when it is not a usable ceiling."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    if not math.isfinite(v) or v <= 0 or abs(v) > 1e15:
        return None
    micros = micro_dollars(v)
    return micros if micros >= 1 else None


def agent_policy(
    glob: dict[str, Any], mine: dict[str, Any], where: str, warnings: list[str], own: set[str] | None
) -> AgentPolicy:
    """Merge the `loopwarden` block's `budgets` and `enforce`, the agent's over the
    global one field by field, and check each merged field (semantics.md sections 8, 10).
    Warnings name only the fields in `own` (those the block at `where` set itself)."""
    out: list[str] = []
    gb, mb = glob.get("budgets"), mine.get("budgets")
    if own is None and gb is not None and not isinstance(gb, dict):
        warnings.append("loopwarden.budgets: not an object; ignored")
    if own is not None and mb is not None and not isinstance(mb, dict):
        warnings.append(f"{where}loopwarden.budgets: not an object; ignored")
    budgets = {**(gb if isinstance(gb, dict) else {}), **(mb if isinstance(mb, dict) else {})}
    tokens = calls = cost = None
    cost_usd = None
    for name in BUDGET_FIELDS:
        raw = budgets.get(name)
        if raw is None:
            continue
        if name == "runCostUsd":
            cost = _cost_ceiling(raw)
            if cost is None:
                out.append(f"{name}: {raw!r} is not a positive cost of at least one micro-dollar; no ceiling")
            else:
                cost_usd = raw
        else:
            val = _positive_int(raw)
            if val is None:
                out.append(f"{name}: {raw!r} is not a positive integer; no ceiling")
            elif name == "runTokens":
                tokens = val
            else:
                calls = val
    enforce_raw = mine["enforce"] if "enforce" in mine else glob.get("enforce")
    if enforce_raw is not None and not isinstance(enforce_raw, bool):
        out.append(f"enforce: {enforce_raw!r} is not true or false; enforcing")
    for w in out:
        field = w.split(":", 1)[0]
        key = "enforce" if field == "enforce" else f"budgets.{field}"
        if own is None or key in own:
            warnings.append(f"{where}loopwarden.{key}{w[len(field) :]}")
    return AgentPolicy(Budgets(tokens, cost, calls, cost_usd), enforce_raw is not False)


def _paths(block: dict[str, Any], prefix: str = "") -> set[str]:
    """The dotted paths of every field `block` sets, at any depth."""
    out = set()
    for k, v in block.items():
        out.add(prefix + k)
        if isinstance(v, dict):
            out |= _paths(v, f"{prefix}{k}.")
    return out


def agent_rules(glob: dict[str, Any], mine: dict[str, Any] | None, where: str, warnings: list[str]) -> Rules:
    """Merge `loopwarden.rules`, the agent's (`mine`; None: resolving the global block
    alone) over the global one field by field, nested objects too, and check each merged
    field (semantics.md section 12). Warnings name only the fields the block at `where`
    set itself."""
    raw = glob.get("rules") if mine is None else mine.get("rules")
    if raw is not None and not isinstance(raw, dict):
        warnings.append(f"{where}loopwarden.rules: not an object; ignored")
    own = _paths(raw) if mine is not None and isinstance(raw, dict) else None
    g = glob.get("rules")
    merged = g if isinstance(g, dict) else {}
    if mine is not None and isinstance(raw, dict):
        merged = _merge(merged, raw)
    out: list[tuple[str, str]] = []
    flag = merged.get("progressAware")
    if flag is not None and not isinstance(flag, bool):
        out.append(("progressAware", f"{flag!r} is not true or false; off"))
    on: dict[str, bool] = {}
    nums: dict[str, int] = {}
    for rule, defaults in RULE_DEFAULTS.items():
        block = merged.get(rule)
        if block is not None and not isinstance(block, dict):
            out.append((rule, "not an object; ignored"))
            block = None
        block = block or {}
        enabled = block.get("enabled")
        if enabled is not None and not isinstance(enabled, bool):
            out.append((f"{rule}.enabled", f"{enabled!r} is not true or false; off"))
        on[rule] = enabled is True
        for name, default in defaults.items():
            v = block.get(name)
            n = default if v is None else _positive_int(v)
            if n is None:
                out.append((f"{rule}.{name}", f"{v!r} is not a positive integer; using the default {default}"))
                n = default
            nums[name] = n
    for path, text in out:
        if own is None or path in own:
            warnings.append(f"{where}loopwarden.rules.{path}: {text}")
    return Rules(
        flag is True,
        on["failureRepeat"],
        nums["consecutive"],
        on["cycles"],
        nums["maxPeriod"],
        nums["laps"],
    )


def fleet_policy(block: dict[str, Any], warnings: list[str]) -> FleetPolicy:
    """`loopwarden.holdoutPercent` and `loopwarden.fleet.toolBreaker`, global only."""
    raw = block.get("holdoutPercent")
    holdout = 0
    if raw is not None:
        ok = not isinstance(raw, bool) and isinstance(raw, int | float) and float(raw).is_integer()
        if ok and 0 <= raw <= 100:
            holdout = int(raw)
        else:
            warnings.append(f"loopwarden.holdoutPercent: {raw!r} is not an integer from 0 to 100; using 0")
    fleet = _object(block.get("fleet"), "loopwarden.fleet", warnings)
    tb = _object(fleet.get("toolBreaker"), "loopwarden.fleet.toolBreaker", warnings)
    vals: dict[str, Any] = {}
    for name, default in BREAKER_DEFAULTS.items():
        v = tb.get(name)
        if v is None:
            vals[name] = default
        elif name == "enabled":
            if not isinstance(v, bool):
                warnings.append(f"loopwarden.fleet.toolBreaker.enabled: {v!r} is not true or false; using false")
                v = False
            vals[name] = v
        else:
            n = _positive_int(v)
            if n is None:
                warnings.append(
                    f"loopwarden.fleet.toolBreaker.{name}: {v!r} is not a positive integer; using the default {default}"
                )
                n = default
            vals[name] = n
    breaker = ToolBreakerConfig(vals["enabled"], vals["minRuns"], vals["windowMs"], vals["coolDownMs"])
    anomaly = spend_anomaly(fleet.get("spendAnomaly"), warnings)
    return FleetPolicy(holdout, breaker, spend_caps(fleet.get("spendCaps"), warnings), anomaly)


def spend_anomaly(raw: Any, warnings: list[str]) -> AnomalyConfig | None:
    """`loopwarden.fleet.spendAnomaly`: None unless `enabled` is true. A number that
    fails its check falls back to its default, a floor to none (each with a warning)."""
    where = "loopwarden.fleet.spendAnomaly"
    block = _object(raw, where, warnings)
    enabled = block.get("enabled")
    if enabled is not None and not isinstance(enabled, bool):
        warnings.append(f"{where}.enabled: {enabled!r} is not true or false; off")
    if enabled is not True:
        return None
    nums: dict[str, int] = {}
    for name, default in ANOMALY_DEFAULTS.items():
        v = block.get(name)
        n = default if v is None else _positive_int(v)
        if n is None:
            warnings.append(f"{where}.{name}: {v!r} is not a positive integer; using the default {default}")
            n = default
        nums[name] = n
    factor = block.get("factor", 3)
    if isinstance(factor, bool) or not isinstance(factor, int | float) or not math.isfinite(factor) or factor < 1:
        warnings.append(f"{where}.factor: {factor!r} is not a number of at least 1; using 3")
        factor = 3
    floors: dict[str, Any] = {"minTokens": None, "minCostUsd": 1, "minToolCalls": 200}
    for name in floors:
        v = block.get(name, floors[name])
        check = _cost_ceiling if name == "minCostUsd" else _positive_int
        if v is not None and check(v) is None:
            warnings.append(f"{where}.{name}: {v!r} is not a positive amount; no floor, the kind is not watched")
            v = None
        floors[name] = v
    cost = _cost_ceiling(floors["minCostUsd"]) if floors["minCostUsd"] is not None else None
    tokens = _positive_int(floors["minTokens"]) if floors["minTokens"] is not None else None
    calls = _positive_int(floors["minToolCalls"]) if floors["minToolCalls"] is not None else None
    return AnomalyConfig(nums["windowMs"], nums["history"], float(factor), nums["minWindows"], tokens, cost, calls)


def _spend_cap(entry: Any, taken: set[str], fell_back: list[str]) -> SpendCapConfig | str:
    """One entry of `spendCaps`, checked (semantics.md section 11): the cap, or why the
    entry is ignored. `fell_back` gets what a kept entry had to fall back on."""
    if not isinstance(entry, dict):
        return "not an object"
    raw_id = entry.get("id")
    if not isinstance(raw_id, str) or not raw_id.strip():
        return f"id {raw_id!r} is not a string that is not blank"
    cap_id = raw_id.strip()
    if cap_id in taken:
        return f"id {cap_id!r} is taken by an earlier entry"
    per = entry.get("per")
    if per is None:
        per = "agent"
    elif per not in SPEND_PER:
        return f"per {per!r} is not one of {', '.join(repr(p) for p in SPEND_PER)}"
    agents = _cap_agents(entry.get("agents"))
    if isinstance(agents, str):
        return agents
    raw_w = entry.get("windowMs")
    window = DEFAULT_SPEND_WINDOW_MS if raw_w is None else _positive_int(raw_w)
    if window is None:
        fell_back.append(f"windowMs: {raw_w!r} is not a positive integer; using the default {DEFAULT_SPEND_WINDOW_MS}")
        window = DEFAULT_SPEND_WINDOW_MS
    bad_ceilings: list[str] = []
    tokens, cost, calls, cost_usd = _cap_ceilings(entry, bad_ceilings)
    if tokens is None and cost is None and calls is None:
        why = "; ".join(b.rsplit("; ", 1)[0] for b in bad_ceilings)
        return f"no valid ceiling (tokens, costUsd or toolCalls){': ' + why if why else ''}"
    fell_back += bad_ceilings
    return SpendCapConfig(
        id=cap_id,
        per=per,
        agents=agents,
        window_ms=window,
        tokens=tokens,
        cost=cost,
        calls=calls,
        cost_usd=cost_usd,
        agent_set=frozenset(agents) if agents is not None else None,
    )


def _cap_agents(agents: Any) -> tuple[str, ...] | None | str:
    """A cap's `agents`, trimmed and lower-cased (None: absent), or why the entry is ignored."""
    if agents is None:
        return None
    if not isinstance(agents, list):
        return f"agents {agents!r} is not a list of agent ids"
    if not agents:
        return "agents is an empty list: the cap would match no event"
    bad = [a for a in agents if not isinstance(a, str) or not a.strip()]
    if bad:
        return f"agents: {bad[0]!r} is not an agent id (a string that is not blank)"
    return tuple(a.strip().lower() for a in agents)


def _cap_ceilings(entry: dict[str, Any], bad: list[str]) -> tuple[int | None, int | None, int | None, Any]:
    """A cap's (tokens, cost in micro-dollars, calls, costUsd as given); `bad` gets each
    ceiling that fails its check (as section 8 checks a budget's)."""
    tokens = calls = cost = None
    cost_usd = None
    for name in ("tokens", "costUsd", "toolCalls"):
        raw = entry.get(name)
        if raw is None:
            continue
        if name == "costUsd":
            cost = _cost_ceiling(raw)
            if cost is None:
                bad.append(f"{name}: {raw!r} is not a positive cost of at least one micro-dollar; no ceiling")
            else:
                cost_usd = raw
            continue
        val = _positive_int(raw)
        if val is None:
            bad.append(f"{name}: {raw!r} is not a positive integer; no ceiling")
        elif name == "tokens":
            tokens = val
        else:
            calls = val
    return tokens, cost, calls, cost_usd


def spend_caps(raw: Any, warnings: list[str]) -> tuple[SpendCapConfig, ...]:
    """`loopwarden.fleet.spendCaps`, global only (semantics.md section 11): the valid
    entries in list order. An entry that fails a check is ignored, named in one warning;
    a kept entry's `windowMs` or ceiling that is not usable is named in a warning of its
    own (the window falls back to its default, the ceiling is none)."""
    if raw is None:
        return ()
    where = "loopwarden.fleet.spendCaps"
    if not isinstance(raw, list):
        warnings.append(f"{where}: not a list; ignored")
        return ()
    caps: list[SpendCapConfig] = []
    taken: set[str] = set()
    for i, entry in enumerate(raw):
        fell_back: list[str] = []
        cap = _spend_cap(entry, taken, fell_back)
        name = entry.get("id") if isinstance(entry, dict) else None
        named = f"{where}[{i}]" + (f" ({name.strip()!r})" if isinstance(name, str) and name.strip() else "")
        if isinstance(cap, str):
            warnings.append(f"{named}: {cap}; entry ignored")
            continue
        warnings.extend(f"{named}.{w}" for w in fell_back)
        taken.add(cap.id)
        caps.append(cap)
    return tuple(caps)


def _norm_id(v: Any) -> str | None:
    return v.strip().lower() if isinstance(v, str) else None


class DetectionConfig:
    """A loaded config: the resolved config of every listed agent, plus the global one."""

    __slots__ = (
        "_agents",
        "_by_raw_id",
        "_default",
        "document",
        "global_config",
        "holdout_percent",
        "idle_timeout_ms",
        "source",
        "spend_anomaly",
        "spend_caps",
        "tool_breaker",
        "warnings",
    )

    def __init__(self, doc: Any = None, source: str = "<config>") -> None:
        if doc is None:
            doc = {}
        if not isinstance(doc, dict):
            raise ConfigError(f"{source}: the config must be an object, got {type(doc).__name__}")
        self.source = source
        self.document: Any = doc  # the parsed document (streams.admin.config_topic names a config by it)
        warnings: list[str] = []
        # One run-idle timeout for the whole config (a run may change agents mid-way).
        self.idle_timeout_ms = idle = _idle_timeout(doc, warnings)
        lw = doc.get("loopwarden")
        lw = lw if isinstance(lw, dict) else {}  # not an object: _idle_timeout warned
        fleet = fleet_policy(lw, warnings)
        self.holdout_percent = fleet.holdout_percent
        self.tool_breaker: ToolBreakerConfig | None = fleet.breaker if fleet.breaker.enabled else None
        """The fleet's tool breaker (semantics.md section 9); None while it is off."""
        self.spend_caps: tuple[SpendCapConfig, ...] = fleet.spend_caps
        self.spend_anomaly: AnomalyConfig | None = fleet.anomaly  # alerts only (detectors/anomaly.py)
        """The fleet's spend caps (semantics.md section 11), valid entries in list order."""
        base = _block(doc, "", warnings)
        glob_policy = agent_policy(lw, {}, "", warnings, None)
        glob_rules = agent_rules(lw, None, "", warnings)
        self.global_config = resolve(
            base, "", warnings, idle_timeout_ms=idle, own_policy=glob_policy, fleet=fleet, rules=glob_rules
        )
        self._agents: dict[str, AgentConfig] = {}
        self._by_raw_id: dict[str, AgentConfig] = {}
        self._default: AgentConfig = self.global_config
        agents = doc.get("agents")
        entries = agents.get("list") if isinstance(agents, dict) else None
        if entries is not None and not isinstance(entries, list):
            warnings.append("agents.list: not a list; ignored")
            entries = None
        first = main = flagged = None
        for i, entry in enumerate(entries or []):
            if not isinstance(entry, dict):
                warnings.append(f"agents.list[{i}]: not an object; ignored")
                continue
            where = f"agents.list[{i}]."
            block = _block(entry, where, warnings)
            mine = _object(entry.get("loopwarden"), f"{where}loopwarden", warnings)
            for extra in sorted(set(mine) - {"budgets", "enforce", "rules"}):
                warnings.append(
                    f"{where}loopwarden.{extra}: read only at the top level (per agent: budgets, enforce, rules)"
                )
            policy = agent_policy(lw, mine, where, warnings, _own_fields(mine))
            rules = agent_rules(lw, mine, where, warnings)
            resolved = resolve(_merge(base, block), where, warnings, _own_fields(block), idle, policy, fleet, rules)
            aid = _norm_id(entry.get("id"))
            if aid is not None and aid not in self._agents:
                self._agents[aid] = resolved
            first = first or resolved
            if main is None and aid == "main":
                main = resolved
            if flagged is None and entry.get("default") is True:
                flagged = resolved
        self._default = flagged or main or first or self.global_config
        self.warnings: tuple[str, ...] = tuple(warnings)

    def for_agent(self, agent_id: str | None) -> AgentConfig:
        """The effective config for an event's `agent_id` (None: the default agent)."""
        if agent_id is None:
            return self._default
        cfg = self._by_raw_id.get(agent_id)
        if cfg is None:
            cfg = self._agents.get(agent_id.strip().lower(), self.global_config)
            if len(self._by_raw_id) < 4096:  # a bounded memo: ids as events spell them
                self._by_raw_id[agent_id] = cfg
        return cfg

    def agents(self) -> dict[str, AgentConfig]:
        """The listed agents' effective configs, by normalised id (an audit maps the
        `config_hash` a decision carries back to the config that made it)."""
        return dict(self._agents)


def document_id(doc: Any) -> str:
    """A config document's id (the config topic names configs by it): `digest`
    (semantics.md section 2) of the parsed document, so formatting, comments, key order
    and JSON5 syntax do not change it. The exact canonical form is used: a parsed
    document's floats are Python floats, which the wire fast path of `canon` would spell
    as Python does (`1.0`), not as JavaScript does (`1`)."""
    return hashlib.sha256(canon_exact(doc)).hexdigest()


def parse_document(text: str | bytes, source: str = "<config>") -> Any:
    """A config document's value: UTF-8 JSON or JSON5 text parsed, or a ConfigError that
    names `source` and what is wrong. The one place a config document is decoded (a
    file, a config topic record, a scenario)."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"{source}: not UTF-8 text (byte {exc.start} is 0x{text[exc.start]:02x}); "
                "save the config as UTF-8 JSON or JSON5"
            ) from None
    try:
        return json5.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"{source}: not valid JSON or JSON5: {exc}") from None


def load_config(text: str | bytes, source: str = "<config>") -> DetectionConfig:
    """Parse JSON or JSON5 config text (`parse_document`) into a config."""
    return DetectionConfig(parse_document(text, source), source)
