"""The fleet in an audit (semantics.md section 9): each call replayed with the signal
its recorded decision names, and the calls the event-time rule would have judged
otherwise (the fleet's propagation lag).

A worker decides a call with the breakers and stop orders it has received when it folds
the call, and names what it applied in `fleet_signal`. The audit reads the fleet topic
whole (`FleetLedger`), and:

- `Signals.view_for(event)`: the fleet view a call is replayed against holds just the
  record its recorded decision names (none for a decision that names none, or for an
  event no decision was recorded for yet), so a fleet-blocked or stopped call replays
  as it was decided, and a call decided before its worker had received a signal
  replays without it;
- `Signals.lag(event, recorded)`: the event-time rule over every signal on the topic
  (the stop order in force at the call's ts, else the breaker whose interval holds it);
  where that names a signal the recorded decision does not, the call is counted as
  judged late, with its delay (the call's ts less the signal's start).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from detectors.fingerprint import call_key
from detectors.fleet import FleetRecord, FleetView, StopOrder
from detectors.wire import Decision, Event, ToolCall

from ..admin.fleet_topic import FleetLedger
from .join import Verdict

MAX_DELAYS = 10_000  # delays kept for the percentiles (the counts are exact)


class FleetCounts:
    """Picklable counts: calls replayed with each kind of signal, and those judged late."""

    def __init__(self) -> None:
        self.applied: Counter[str] = Counter()  # by kind: stop, breaker
        self.late = 0
        self.late_by_signal: Counter[str] = Counter()
        self.delays_ms: list[int] = []

    def merge(self, other: FleetCounts) -> None:
        self.applied.update(other.applied)
        self.late += other.late
        self.late_by_signal.update(other.late_by_signal)
        self.delays_ms.extend(other.delays_ms[: max(0, MAX_DELAYS - len(self.delays_ms))])

    def summary(self) -> dict[str, Any]:
        d = sorted(self.delays_ms)

        def at(p: float) -> int | None:
            return d[min(len(d) - 1, int(p * len(d)))] if d else None

        return {
            "fleet": {
                "signals_applied": dict(sorted(self.applied.items())),
                "judged_late": self.late,
                "judged_late_by_signal": dict(self.late_by_signal.most_common(20)),
                "lag_ms": {"p50": at(0.5), "p90": at(0.9), "max": d[-1] if d else None},
            }
        }


class Signals:
    """The fleet topic's records, for the replay and the lag."""

    def __init__(self, ledger: FleetLedger, recorded: Any) -> None:
        self.records = ledger.records
        self.full = ledger.view
        self.recorded = recorded  # (run_id, seq) -> a Recorded, or None (`Join.find`)
        self.counts = FleetCounts()
        self._views: dict[str, FleetView] = {}

    def view_for(self, ev: Event) -> FleetView | None:
        if type(ev) is not ToolCall:
            return None
        rec = self.recorded(ev.run_id, ev.seq)
        sig = rec.decision.fleet_signal if rec is not None else None
        if sig is None:
            return None
        view = self._views.get(sig)
        if view is None:
            record = self.records.get(sig)
            if record is None:
                return None  # not on the topic (any more): replayed without it, and it shows
            view = self._views[sig] = FleetView([record])
        return view

    def event_time(self, ev: ToolCall) -> FleetRecord | None:
        """The signal the event-time rule gives the call (semantics.md section 9)."""
        order = self.full.stop_for(ev)
        if order is not None:
            return order
        tool, _sig = call_key(ev)
        return self.full.breaker_for(tool, ev.ts)

    def lag(self, ev: Event, recorded: Decision | Verdict | None) -> None:
        if type(ev) is not ToolCall or recorded is None or ev.ts is None:
            return
        if recorded.fleet_signal is not None:
            rec = self.records.get(recorded.fleet_signal)
            self.counts.applied["stop" if isinstance(rec, StopOrder) else "breaker"] += 1
        due = self.event_time(ev)
        if due is None or due.id == recorded.fleet_signal:
            return
        if recorded.fleet_signal is None and recorded.action == "abort" and recorded.detector == "operator_stop":
            return  # a later call of a stopped run: the order already took it
        self.counts.late += 1
        self.counts.late_by_signal[due.id] += 1
        if len(self.counts.delays_ms) < MAX_DELAYS:
            self.counts.delays_ms.append(ev.ts - due.from_ts)
