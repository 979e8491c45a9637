"""Spend anomalies: an agent whose spend or call count in a window is far above its own
recent norm (loopwarden's own; alerts only, no decision changes).

The rule (`anomalous`): for each kind with a floor in `AnomalyConfig` (tokens, cost in
micro-dollars, tool calls, in that order), the window's count is at or above the floor
and above `factor` times the median of the agent's previous `history` windows from its
first with spend on (a window with nothing after that counts as 0), given at least
`min_windows` of them had any spend. The first kind that holds is reported, once per
agent and window.

What it counts is what a spend cap counts (semantics.md section 11: `spend_of`): the
workers forward each applied event's amounts under a cap of their own, `ANOMALY_CAP`
(per agent, in the watch's windows, without a ceiling), and the spend stage keeps the
windows. `AnomalyFold` is the same rule over records in order, for tests and tools.
"""

from __future__ import annotations

from statistics import median

from msgspec import Struct

from .config import AnomalyConfig, SpendCapConfig
from .spend import NOTHING, SpendCount, SpendRecord, add_spend

ANOMALY_CAP = "@anomaly"  # the cap id the anomaly watch's records carry (not a valid config id: no ceiling)
KINDS = ("tokens", "cost", "calls")


class Anomaly(Struct, frozen=True):
    """A window far above its agent's norm: the kind, the count (in its unit), the
    median of the previous windows and the windows that median was taken over."""

    key: str
    window_start: int
    kind: str
    used: int
    norm: float
    windows: int


def anomaly_cap(cfg: AnomalyConfig) -> SpendCapConfig:
    """The pseudo-cap under which workers forward what every agent spends."""
    return SpendCapConfig(id=ANOMALY_CAP, per="agent", window_ms=cfg.window_ms)


def counts(c: SpendCount) -> tuple[int, int, int]:
    return (c.tokens, c.cost_micros, c.calls)


def anomalous(
    cfg: AnomalyConfig, key: str, window_start: int, current: SpendCount, previous: list[SpendCount]
) -> Anomaly | None:
    """The anomaly of `current` against the `previous` windows, oldest first (the newest
    `history` of them are looked at), or None. The norm is taken from the agent's first
    window with spend among them on: a window with nothing before it says nothing of the
    agent's norm (a new agent's first windows would otherwise give a median of 0), one
    after it counts as 0 (the agent was quiet then)."""
    seen = previous[-cfg.history :]
    first = next((i for i, p in enumerate(seen) if p != NOTHING), len(seen))
    norm_of = [counts(p) for p in seen[first:]]
    if sum(1 for p in seen[first:] if p != NOTHING) < cfg.min_windows:
        return None  # no norm yet
    now = counts(current)
    for i, floor in enumerate(cfg.floors()):
        if floor is None or now[i] < floor:
            continue
        norm = median(p[i] for p in norm_of)
        if now[i] > cfg.factor * norm:
            return Anomaly(key, window_start, KINDS[i], now[i], float(norm), len(norm_of))
    return None


class AnomalyFold:
    """The rule over records of `ANOMALY_CAP` in order: each window's count per agent,
    the newest `history + 1` windows kept, an anomaly reported once per agent and window."""

    def __init__(self, cfg: AnomalyConfig) -> None:
        self.cfg = cfg
        self.cap = anomaly_cap(cfg)
        self._windows: dict[str, dict[int, SpendCount]] = {}
        self._reported: set[tuple[str, int]] = set()

    def add(self, rec: SpendRecord) -> Anomaly | None:
        windows = self._windows.setdefault(rec.key, {})
        start = rec.window_start
        new, _ = add_spend(self.cap, windows.get(start, NOTHING), rec)
        windows[start] = new
        for old in sorted(windows)[: -(self.cfg.history + 1)]:
            del windows[old]
        if (rec.key, start) in self._reported:
            return None
        w = self.cfg.window_ms
        previous = [windows.get(start - k * w, NOTHING) for k in range(self.cfg.history, 0, -1)]
        found = anomalous(self.cfg, rec.key, start, new, previous)
        if found is not None:
            self._reported.add((rec.key, start))
        return found
