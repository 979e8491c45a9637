"""What-if: the same events folded again under another config (`--config`), each of its
decisions compared with what was decided (recorded, or replayed when nothing was).

The second fold runs beside the audit's: it folds the events the first one folded, in
the same order, and each of its results carries the first one's as its position, so the
two are paired without any state outside the folds.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from detectors import DetectionConfig, Folded, SetAside, fold
from detectors.wire import Decision

from .join import Verdict

CHANGES = ("newly_warned", "newly_blocked", "no_longer_warned", "no_longer_blocked", "aborts_gained", "aborts_lost")


_GAINED = {"warn": "newly_warned", "block": "newly_blocked", "abort": "aborts_gained"}
_LOST = {"warn": "no_longer_warned", "block": "no_longer_blocked", "abort": "aborts_lost"}


def changes(before: str | None, after: str | None) -> list[str]:
    """How a verdict changed from action `before` to `after` (None: no decision), in
    the order of CHANGES."""
    if before == after:
        return []
    found = (_GAINED.get(after or ""), _LOST.get(before or ""))
    return [k for k in CHANGES if k in found]


class WhatIfCounts:
    """The changes counted, and by the detector that made them: small, picklable, and
    shards' counts add up."""

    def __init__(self) -> None:
        self.changes: Counter[str] = Counter()
        self.by_detector: Counter[str] = Counter()

    def merge(self, other: WhatIfCounts) -> None:
        self.changes.update(other.changes)
        self.by_detector.update(other.by_detector)

    def summary(self, config: DetectionConfig) -> dict[str, Any]:
        return {
            "config_hash": config.for_agent(None).config_hash,
            **{k: self.changes[k] for k in CHANGES},
            "by_detector": dict(sorted(self.by_detector.items())),
        }


class WhatIf:
    """The second fold (it keeps its runs' states), and its counts."""

    def __init__(self, config: DetectionConfig) -> None:
        self.config = config
        self.counts = WhatIfCounts()

    def fold(self, folded: Iterable[Folded | SetAside]) -> Iterator[Folded | SetAside]:
        """Fold again what the first fold folded; each result's position is the first
        fold's result for the same message (a message it set aside is set aside here too)."""
        source = ((f, None, f.event if type(f) is Folded else b"") for f in folded)
        return fold(source, self.config, keyed=False, encode=False)  # compared, not written

    @staticmethod
    def decision(g: Folded | SetAside) -> Decision | None:
        """The decision of a result of this fold, if any."""
        return g.decisions[0] if type(g) is Folded and g.decisions else None

    def compare(self, decided: Decision | Verdict | None, what_if: Decision | None) -> list[str]:
        """Count what changes from what was decided to the what-if decision."""
        before = decided.action if decided is not None else None
        found = changes(before, what_if.action if what_if is not None else None)
        if not found:
            return found
        for k in found:
            self.counts.changes[k] += 1
        det = (what_if.detector if what_if is not None and what_if.detector else None) or (
            decided.detector if decided is not None and decided.detector else "none"
        )
        self.counts.by_detector[det] += 1
        return found
