"""The fleet in an audit (semantics.md sections 9 and 11): each call replayed with the
signal its recorded decision names, the calls the event-time rule would have judged
otherwise (the fleet's propagation lag), and what was spent per spend cap and key.

A worker decides a call with the breakers, stop orders and spend cap signals it has
received when it folds the call, and names what it applied in `fleet_signal`. The
audit reads the fleet topic whole (`FleetLedger`), and:

- `Signals.view_for(event)`: the fleet view a call is replayed against holds just the
  record its recorded decision names (none for a decision that names none, or for an
  event no decision was recorded for yet), so a fleet-blocked, stopped or paused call
  replays as it was decided, and a call decided before its worker had received a
  signal replays without it. A spend cap signal is replayed as the spend stage first
  published it, up to its window's end: the decision says the worker applied it, so
  a lift on the topic now reached that worker after the call;
- `Signals.lag(event, recorded, caps)`: the event-time rule over every signal on the
  topic (the stop order in force at the call's ts, else the spend cap signal in force
  for its key, else the breaker whose interval holds it); where that names a signal the
  recorded decision does not, the call is counted as judged late, with its delay (the
  call's ts less the signal's start). A call at the very millisecond a cap was reached
  is not counted: the call that reached it is not paused by it, and the topic does not
  say which event reached it.

`FleetCounts.spend` adds up what the audited events spent on each cap, per key
(`detectors.spend.spend_of`, the workers' own arithmetic), and `paused` the calls each
cap paused.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import msgspec

from detectors.config import SpendCapConfig
from detectors.fingerprint import call_key
from detectors.fleet import FleetRecord, FleetView, SpendCapSignal, StopOrder
from detectors.policy import OPERATOR_STOP, RUN_BUDGET
from detectors.rules import COMPACTION_GUARD
from detectors.spend import spend_of
from detectors.wire import Decision, Event, ToolCall

from ..admin.fleet_topic import FleetLedger
from .join import Verdict

MAX_DELAYS = 10_000  # delays kept for the percentiles (the counts are exact)
TOP_KEYS = 20  # per cap, the keys the summary lists (the totals count every key)


def _kind(rec: FleetRecord | None) -> str:
    if isinstance(rec, StopOrder):
        return "stop"
    return "spend_cap" if isinstance(rec, SpendCapSignal) else "breaker"


class FleetCounts:
    """Picklable counts: calls replayed with each kind of signal, those judged late, what
    was spent per spend cap and key, and the calls each cap paused."""

    def __init__(self) -> None:
        self.applied: Counter[str] = Counter()  # by kind: stop, breaker, spend_cap
        self.late = 0
        self.late_by_signal: Counter[str] = Counter()
        self.delays_ms: list[int] = []
        self.spend: dict[tuple[str, str], list[int]] = {}  # (cap, key) -> [tokens, micro-dollars, calls]
        self.paused: Counter[str] = Counter()  # by cap: the decisions fleet_spend_cap gave (shadow ones too)

    def merge(self, other: FleetCounts) -> None:
        self.applied.update(other.applied)
        self.late += other.late
        self.late_by_signal.update(other.late_by_signal)
        self.delays_ms.extend(other.delays_ms[: max(0, MAX_DELAYS - len(self.delays_ms))])
        for where, (tokens, cost, calls) in other.spend.items():
            mine = self.spend.setdefault(where, [0, 0, 0])
            mine[0] += tokens
            mine[1] += cost
            mine[2] += calls
        self.paused.update(other.paused)

    def count_spend(self, caps: tuple[SpendCapConfig, ...], ev: Event) -> None:
        """What an applied, non-duplicate event spent on each of `caps` it matches."""
        for rec in spend_of(caps, ev):
            mine = self.spend.get((rec.cap, rec.key))
            if mine is None:
                mine = self.spend[(rec.cap, rec.key)] = [0, 0, 0]
            mine[0] += rec.tokens
            mine[1] += rec.cost_micros
            mine[2] += rec.calls

    def spend_summary(self) -> dict[str, Any]:
        """Per cap: what its keys spent together, how many keys, the calls it paused, and
        the keys that spent most (by cost, then tokens, then calls)."""
        caps: dict[str, dict[str, Any]] = {}
        for (cap, key), (tokens, cost, calls) in sorted(self.spend.items()):
            c = caps.setdefault(cap, {"keys": 0, "tokens": 0, "cost_usd": 0, "calls": 0, "top_keys": []})
            c["keys"] += 1
            c["tokens"] += tokens
            c["cost_usd"] += cost
            c["calls"] += calls
            c["top_keys"].append({"key": key, "tokens": tokens, "cost_usd": cost, "calls": calls})
        for cap in self.paused:
            caps.setdefault(cap, {"keys": 0, "tokens": 0, "cost_usd": 0, "calls": 0, "top_keys": []})
        for cap, c in caps.items():
            c["cost_usd"] /= 1_000_000
            c["paused_calls"] = self.paused[cap]
            top = sorted(c["top_keys"], key=lambda k: (-k["cost_usd"], -k["tokens"], -k["calls"], k["key"]))
            for k in top[:TOP_KEYS]:
                k["cost_usd"] /= 1_000_000
            c["top_keys"] = top[:TOP_KEYS]
        return dict(sorted(caps.items()))

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
                "spend_caps": self.spend_summary(),
            }
        }


class Signals:
    """The fleet topic's records, for the replay and the lag."""

    def __init__(self, ledger: FleetLedger, recorded: Any, counts: FleetCounts | None = None) -> None:
        self.records = ledger.records
        self.full = ledger.view
        self.recorded = recorded  # (run_id, seq) -> a Recorded, or None (`Join.find`)
        self.counts = counts if counts is not None else FleetCounts()
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
            if isinstance(record, SpendCapSignal):
                record = msgspec.structs.replace(record, until_ts=record.window_end)  # as applied (see the module)
            view = self._views[sig] = FleetView([record])
        return view

    def event_time(self, ev: ToolCall, caps: tuple[SpendCapConfig, ...] = ()) -> FleetRecord | None:
        """The signal the event-time rule gives the call (semantics.md sections 9 and 11),
        under `caps`, the spend caps of the config it was decided under."""
        order = self.full.stop_for(ev)
        if order is not None:
            return order
        if caps:
            paused = self.full.spend_for(caps, ev)
            if paused is not None:
                return paused[1]
        tool, _sig = call_key(ev)
        return self.full.breaker_for(tool, ev.ts)

    def lag(self, ev: Event, recorded: Decision | Verdict | None, caps: tuple[SpendCapConfig, ...] = ()) -> None:
        if type(ev) is not ToolCall or recorded is None or ev.ts is None:
            return
        if recorded.fleet_signal is not None:
            rec = self.records.get(recorded.fleet_signal)
            self.counts.applied[_kind(rec)] += 1
        due = self.event_time(ev, caps)
        if due is None or due.id == recorded.fleet_signal:
            return
        if recorded.fleet_signal is None and recorded.action == "abort" and recorded.detector == "operator_stop":
            return  # a later call of a stopped run: the order already took it
        if isinstance(due, SpendCapSignal) and recorded.fleet_signal is None:
            if _aborted_run(recorded):
                return  # a rule above the pause took the call (the run was aborted, or its budget spent)
            if ev.ts == due.from_ts:
                return  # perhaps the call that reached the cap, which it does not pause: not told apart
        self.counts.late += 1
        self.counts.late_by_signal[due.id] += 1
        if len(self.counts.delays_ms) < MAX_DELAYS:
            self.counts.delays_ms.append(ev.ts - due.from_ts)


_ABORTS = frozenset((RUN_BUDGET, OPERATOR_STOP, COMPACTION_GUARD.name))  # the detectors that abort a run


def _aborted_run(recorded: Decision | Verdict) -> bool:
    """Whether a decision aborts (enforced or in shadow: its level says so either way) by
    a rule above a spend cap's pause in section 9's order: the run aborted before, by
    whichever detector, or its budget spent now."""
    return recorded.level == "critical" and recorded.detector in _ABORTS
