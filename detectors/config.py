"""Detection config: OpenClaw's `tools.loopDetection` shape, merged, defaulted, clamped.

`load_config(text)` never refuses a config for its values: a field that is not usable
falls back to its default and is named in `DetectionConfig.warnings` (semantics.md
sections 1 and 6). Only text that is not JSON5, or not an object, is a ConfigError.
"""

from __future__ import annotations

from typing import Any

import json5
from msgspec import Struct

from .canonical import digest
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
) -> AgentConfig:
    """Defaults, fallback and clamping over a merged loopDetection block.

    Warnings name only the fields in `own` (those the block at `where` set itself), so
    a bad global value is reported once, not again for every agent that inherits it.
    """
    p = f"{where}tools.loopDetection."
    sink = warnings
    warnings = []
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
    enabled = merged.get("enabled")
    if enabled is not None and not isinstance(enabled, bool):
        warnings.append(f"{p}enabled: {enabled!r} is not true or false; treated as unset")
        enabled = None
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
    guard = merged.get("postCompactionGuard")
    if guard is not None and not isinstance(guard, dict):
        warnings.append(f"{p}postCompactionGuard: not an object; using the default window {DEFAULT_WINDOW}")
        guard = None
    raw_w = (guard or {}).get("windowSize")
    window = _positive_int(raw_w) if raw_w is not None else DEFAULT_WINDOW
    if window is None:
        warnings.append(
            f"{p}postCompactionGuard.windowSize: {raw_w!r} is not a positive integer; "
            f"using the default {DEFAULT_WINDOW}"
        )
        window = DEFAULT_WINDOW
    for w in warnings:
        field = w[len(p) :].split(":", 1)[0]
        if own is None or field in own:
            sink.append(w)
    shape = {
        "enabled": enabled,
        **nums,
        "detectors": switches,
        "postCompactionGuard": {"windowSize": window},
        "loopwarden": {"runIdleTimeoutMs": idle_timeout_ms},
    }
    rolling = enabled is True
    guard = enabled is not False
    on_calls = tuple(d for d in CALL_DETECTORS if d.switch is None or switches[d.switch]) if rolling else ()
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
    )


def _norm_id(v: Any) -> str | None:
    return v.strip().lower() if isinstance(v, str) else None


class DetectionConfig:
    """A loaded config: the resolved config of every listed agent, plus the global one."""

    __slots__ = ("global_config", "_agents", "_default", "warnings", "source", "idle_timeout_ms", "_by_raw_id")

    def __init__(self, doc: Any = None, source: str = "<config>") -> None:
        if doc is None:
            doc = {}
        if not isinstance(doc, dict):
            raise ConfigError(f"{source}: the config must be an object, got {type(doc).__name__}")
        self.source = source
        warnings: list[str] = []
        # One run-idle timeout for the whole config (a run may change agents mid-way).
        self.idle_timeout_ms = idle = _idle_timeout(doc, warnings)
        base = _block(doc, "", warnings)
        self.global_config = resolve(base, "", warnings, idle_timeout_ms=idle)
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
            resolved = resolve(_merge(base, block), where, warnings, _own_fields(block), idle)
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


def load_config(text: str | bytes, source: str = "<config>") -> DetectionConfig:
    """Parse JSON or JSON5 config text."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"{source}: not UTF-8 text (byte {exc.start} is 0x{text[exc.start]:02x}); "
                "save the config as UTF-8 JSON or JSON5"
            ) from None
    try:
        doc = json5.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"{source}: not valid JSON or JSON5: {exc}") from None
    return DetectionConfig(doc, source)
