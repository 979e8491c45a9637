"""What the tests expect a resolved config to hash: its shape, as wire-format.md gives it."""

from __future__ import annotations

# OpenClaw's default loop detection settings, as a config document or a hashed shape spells them
OPENCLAW_DEFAULTS = {
    "enabled": True,
    "historySize": 30,
    "warningThreshold": 10,
    "criticalThreshold": 20,
    "unknownToolThreshold": 10,
    "globalCircuitBreakerThreshold": 30,
}


def default_shape(spend_caps: list | None = None) -> dict:
    """The hashed shape (wire-format.md, "Config file") of a config with every
    OpenClaw default on and nothing of loopwarden's set; `spend_caps`: the resolved caps,
    when there is one."""
    fleet: dict = {"toolBreaker": {"enabled": False, "minRuns": 20, "windowMs": 300000, "coolDownMs": 120000}}
    if spend_caps is not None:
        fleet["spendCaps"] = spend_caps
    return {
        **OPENCLAW_DEFAULTS,
        "detectors": {"genericRepeat": True, "knownPollNoProgress": True, "pingPong": True},
        "postCompactionGuard": {"windowSize": 3},
        "loopwarden": {
            "runIdleTimeoutMs": 86400000,
            "budgets": {"runTokens": None, "runCostUsd": None, "runToolCalls": None},
            "enforce": True,
            "holdoutPercent": 0,
            "fleet": fleet,
        },
    }
