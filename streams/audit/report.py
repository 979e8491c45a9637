"""What an audit reports: its parts' counts gathered (`Totals`, which the shards of one
audit send to the parent and which add up), the `--json` summary and the `--html`
report built from them."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Any, NamedTuple

from detectors import DetectionConfig

from .fleet import FleetCounts
from .shadow import ShadowCounts
from .tally import Tally
from .whatif import WhatIfCounts


def _minute(ms: int) -> str:
    return datetime.fromtimestamp(ms // 60000 * 60, UTC).strftime("%Y-%m-%dT%H:%MZ")


class Totals(NamedTuple):
    """Everything a finished audit (or shard) reports, and no run state: small and
    picklable."""

    tally: Tally
    join: Counter[str]  # duplicates, late, unreadable_decisions
    unknown_configs: Counter[str]  # config hashes decisions named, not known here
    what_if: WhatIfCounts
    flagged: list[dict[str, Any]]  # the runs the HTML report shows
    shadow: ShadowCounts  # budgets and runs not enforced
    fleet: FleetCounts  # fleet signals applied, calls judged late

    @classmethod
    def empty(cls) -> Totals:
        return cls(Tally(), Counter(), Counter(), WhatIfCounts(), [], ShadowCounts(), FleetCounts())

    def merge(self, other: Totals, max_runs: int) -> None:
        """Add a shard's totals (shards own disjoint runs: nothing is counted twice)."""
        self.tally.merge(other.tally)
        self.join.update(other.join)
        self.unknown_configs.update(other.unknown_configs)
        self.what_if.merge(other.what_if)
        self.shadow.merge(other.shadow)
        self.fleet.merge(other.fleet)
        room = max_runs - len(self.flagged)
        self.flagged.extend(other.flagged[: max(0, room)])

    def clean(self) -> bool:
        return self.tally.clean()


def summary(t: Totals, what_if: DetectionConfig | None, seconds: float) -> dict[str, Any]:
    """The `--json` summary."""
    tally = t.tally
    c = tally.c
    return {
        "events": tally.events,
        "runs": len(tally.run_ids),
        "partial_runs": len(tally.partial_ids),
        "decisions_recorded": c["decisions_recorded"],
        "decisions_replayed": sum(tally.combos.values()),
        "matched": c["matched"],
        "mismatched": c["mismatched"],
        "missing": c["missing"],
        "unexpected": c["unexpected"],
        "conflicting": c["conflicting"],
        "duplicates": t.join["duplicates"],
        "dead_letters": c["dead_letters"],
        "unknown_configs": dict(t.unknown_configs),
        "by_action": tally.by(2),
        "by_detector": dict(sorted(tally.by_detector.items())),
        "what_if": t.what_if.summary(what_if) if what_if is not None else None,
        **t.shadow.summary(),
        **t.fleet.summary(),
        "seconds": round(seconds, 3),
        "events_per_s": round(tally.events / seconds) if seconds > 0 else None,
    }


def report(
    t: Totals, what_if: DetectionConfig | None, configs: list[dict[str, Any]], seconds: float, range_: dict[str, Any]
) -> dict[str, Any]:
    """What the `--html` page shows (streams/audit/html.py)."""
    tally = t.tally
    return {
        "summary": summary(t, what_if, seconds),
        "range": range_,
        "by_agent": tally.by(0),
        "by_tool": tally.by(1),
        "per_minute": [
            {"minute": _minute(k * 60000), "warn": v["warn"], "block": v["block"], "abort": v["abort"]}
            for k, v in sorted(tally.per_minute.items())
        ],
        "runs": t.flagged,
        "configs": configs,
    }
