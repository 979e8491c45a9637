"""The audit's logic, without Kafka: replay events through the one fold, and join each
replayed decision with the one recorded on the decisions topic by `event_id`.

The reader (command.py) feeds `Audit` two streams: recorded decisions (`recorded`) and
events in chunks (`events`). It keeps the decisions a grace period ahead of the events
in message time, so that when an event is folded, the decision recorded for it is
already in the join (join.py): the event is replayed under the config that decision
names (its `config_hash`), and compared with it at once. Memory holds the open runs'
states, the decisions recorded within the grace period and not matched yet, and
counters; never the events read.

`Audit` wires its parts, each with its own state: the join (recorded decisions by
event_id), the replayer (the fold and the runs' states), the tally (the counts),
what-if (a second fold under another config) and the timelines (the `--html` report's
runs). What it reports is in report.py; runs whose start the look-back did not reach
are partial, and their decisions are not compared (their state would differ from the
worker's).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Iterator
from itertools import chain, islice
from operator import attrgetter
from typing import Any

from detectors import DetectionConfig, Folded, SetAside, fold
from detectors.policy import FLEET_SPEND_CAP, RUN_BUDGET
from detectors.wire import Decision, Event

from ..admin.fleet_topic import FleetLedger
from ..kafka.compat import Msg
from .fleet import FleetCounts, Signals
from .join import Join, Recorded, whole
from .options import ALL_RUNS, WHOLE, Scope, Window
from .report import Totals, report, summary
from .shadow import Shadow
from .tally import ACTIONS, Tally
from .timelines import Timelines, diff_line
from .whatif import WhatIf, WhatIfCounts

__all__ = ["ACTIONS", "Audit", "ConfigBook", "Msg", "Replayer", "agent_hashes"]


def agent_hashes(config: DetectionConfig) -> dict[str, str]:
    """Each agent's resolved config hash ('(default)' for events without agent_id,
    '(global)' for agents not listed): the hashes decisions carry."""
    out = {"(default)": config.for_agent(None).config_hash, "(global)": config.global_config.config_hash}
    for name, resolved in config.agents().items():
        out[name] = resolved.config_hash
    return out


class ConfigBook:
    """The configs decisions may have been made under, by the resolved hash they carry."""

    def __init__(self, current: DetectionConfig) -> None:
        self.current = current
        self.by_hash: dict[str, DetectionConfig] = {}
        self.listed: list[dict[str, Any]] = []
        self.add(current, "current", None)

    def add(self, config: DetectionConfig, source: str, text: str | None) -> None:
        hashes = agent_hashes(config)
        for h in hashes.values():
            self.by_hash.setdefault(h, config)
        self.listed.append({"config_hash": hashes["(default)"], "source": source, "text": text or "", "agents": hashes})

    def get(self, config_hash: str | None) -> DetectionConfig | None:
        return self.by_hash.get(config_hash) if config_hash else None


_KEY = attrgetter("key")
_VALUE = attrgetter("value")


class Replayer:
    """The audit's fold: each event replayed under the config its recorded decision
    names (a known one), else under the one its run's last such decision named, else
    the current config.

    One fold runs over every chunk of the audit, so it keeps the runs' states itself:
    `feed` gives it a chunk's messages, and the iterator `start` returns yields one
    result per message fed (it is never asked for more, so it never finds its source
    empty).

    The recorded decision is looked up once per event, in `_config_for`, right before
    the fold applies the event (with one config in the book, by `Audit.events` once the
    event is folded): it is where whatever else a call was judged with joins the
    replay. With the fleet (semantics.md section 9), a decision's `fleet_signal`
    names the breaker or stop order the worker applied: the fold is then given
    (`fleet_for`) a FleetView holding just that record (read from the fleet topic, by
    id), so a fleet-blocked call replays as it was decided; the calls the event-time rule
    would have judged otherwise are counted apart (fleet.py)."""

    def __init__(
        self, configs: ConfigBook, join: Join, max_event_bytes: int = 1 << 20, signals: Signals | None = None
    ) -> None:
        self.configs = configs
        self.signals = signals  # the fleet topic's records, when there are any (fleet.py)
        self.pending = join.pending  # recorded decisions by run_id, then seq
        self.run_configs: dict[str, DetectionConfig] = {}  # open runs' last named config
        self.unknown_configs: Counter[str] = Counter()  # hashes recorded decisions named, not in the book
        # The last event `_config_for` was asked about, and the recorded decision it
        # found for it: the fold yields that event next, and its decision is then taken
        # from the join without a second lookup (none at all when nothing was found).
        self.found_for: Event | None = None
        self.found: Recorded | None = None
        # Each chunk's (message, key, value) iterator, in turn: the fold reads through
        # them in C (no tuple kept per message, no deque step per message).
        self._fed: deque[Iterator[tuple[Msg, bytes | None, bytes | None]]] = deque()
        self._max_event_bytes = max_event_bytes
        self.one_config = False  # set by `start`
        self._book_size = 0

    def start(self) -> Iterator[Folded | SetAside]:
        """The fold's results, one per message fed, over the configs in the book now.

        With one config in the book, every event is replayed under it, whatever its
        recorded decision names: the fold is then given no `config_for` (a Python call
        per event), and `Audit.events` looks the recorded decision up itself (the
        callback's share of an audit's time: benchmarks.audit's profile)."""
        configs = self.configs
        self.one_config = all(c is configs.current for c in configs.by_hash.values())
        self._book_size = len(configs.listed)
        return fold(
            chain.from_iterable(iter(self._fed.popleft, None)),  # (never asked past its end: IndexError if it were)
            configs.current,
            max_event_bytes=self._max_event_bytes,
            config_for=None if self.one_config else self._config_for,
            fleet_for=self.signals.view_for if self.signals is not None else None,
            encode=False,  # the replayed decisions are compared by `whole`, not written
        )

    def check_book(self) -> None:
        """The book is as it was when the fold started (a config added since would not be
        used: `start` chose the fold's configs)."""
        if len(self.configs.listed) != self._book_size:
            raise RuntimeError("a config was added to the audit's book after its events began")

    def feed(self, source: Iterator[tuple[Msg, bytes | None, bytes | None]], n: int) -> int:
        """`n` messages for the fold, (message, key, value) each: how many results it
        owes (each feed's are all taken before the next feed)."""
        self._fed.append(source)
        return n

    def _config_for(self, ev: Event) -> DetectionConfig:
        run_id = ev.run_id
        p = self.pending.get(run_id)  # (`Join.find`, without a call)
        rec = p.get(ev.seq) if p is not None else None
        self.found_for, self.found = ev, rec  # `Audit.events` settles the event with it
        if rec is not None:
            cfg: DetectionConfig | None = rec.config
            if cfg is not None:
                self.run_configs[run_id] = cfg
                return cfg
            self.unknown_configs[rec.decision.config_hash] += 1
        return self.run_configs.get(run_id, self.configs.current)

    def config_of(self, run_id: str) -> DetectionConfig:
        return self.run_configs.get(run_id, self.configs.current)


class _Run:
    """What the audit keeps of an open run."""

    __slots__ = ("in_range", "partial")

    def __init__(self, partial: bool) -> None:
        self.partial = partial
        self.in_range = False


def source_of(chunk: list[Msg], runs: Any) -> tuple[Iterator[tuple[Msg, bytes | None, bytes | None]], int]:
    """(message, key, value) of each event of the chunk, of the chosen `runs` only (all
    when none are chosen), and how many."""
    if not runs:
        return zip(chunk, map(_KEY, chunk), map(_VALUE, chunk), strict=True), len(chunk)
    chosen = [(m, m.key, m.value) for m in chunk if m.key is not None and m.key.decode("utf-8", "replace") in runs]
    return iter(chosen), len(chosen)


def pair_status(rec: Recorded | None, replayed: Decision | None) -> str:
    """What a recorded and a replayed decision came to (equal: the same fingerprint,
    `whole`); a recorded one is marked settled with it."""
    if rec is None:
        return "missing"
    if rec.conflict:
        status = "conflicting"
    elif replayed is None:
        status = "unexpected"
    elif rec.whole == whole(replayed):
        status = "matched"
    else:
        status = "mismatched"
    rec.whole = 0  # a settled decision, held a while for late records, keeps none
    rec.status = status
    return status


def count_replayed(tally: Tally, shadow: Shadow, fleet_counts: FleetCounts, ev: Event, d: Decision, mt: int) -> None:
    """A replayed decision in the counts: flagged, shadow and budget, paused by a cap."""
    if d.action != "allow":
        tally.flagged(d, ev.ts if ev.ts is not None else mt)
    if not d.enforced or d.detector == RUN_BUDGET:
        shadow.decision(ev, d)
    if d.detector == FLEET_SPEND_CAP and d.warning_key is not None:
        fleet_counts.paused[d.warning_key[6:].rsplit(":", 1)[0]] += 1  # spend:{cap}:{kind}


class Audit:
    """One audit, or one shard of one (`scope.owns`): folds some of the events topic's
    partitions, joins their decisions with those recorded, and counts."""

    def __init__(
        self,
        configs: ConfigBook,
        window: Window = WHOLE,
        *,
        scope: Scope = ALL_RUNS,
        complete: Callable[[int], bool] = lambda partition: False,
        what_if: DetectionConfig | None = None,
        max_event_bytes: int = 1 << 20,
        diff: Callable[[dict[str, Any]], None] | None = None,
        timelines: bool = False,
        fleet: FleetLedger | None = None,
    ) -> None:
        """`complete(partition)`: the partition is read from its very first record.
        `diff` is given each mismatch, missing, unexpected or conflicting decision and
        each what-if change as a line; `timelines` keeps the runs for `--html`."""
        self.configs = configs
        self.window = window
        self.scope = scope
        self.complete = complete
        self.diff = diff
        self.join = Join(window.grace_ms, scope, configs.by_hash.get)
        self.fleet_counts = FleetCounts()
        has = fleet is not None and bool(fleet.records)
        self.signals = Signals(fleet, self.join.find, self.fleet_counts) if has else None  # type: ignore[arg-type]
        self.spend_on = False  # some config has caps: known with the first events (`_fold_results`)
        self.replayer = Replayer(configs, self.join, max_event_bytes, self.signals)
        self.tally = Tally()
        self.what_if = WhatIf(what_if) if what_if is not None else None
        self._results: Iterator[Any] | None = None  # one result per event fed (`_fold_results`)
        self.timelines = Timelines(what_if is not None) if timelines else None
        self.shadow = Shadow(configs.get)
        self.open: dict[str, _Run] = {}
        self.ended: set[str] = set()  # runs whose run_end was read: a later event starts a new one
        self._low, self._high = window.low, window.high

    # -- recorded decisions -------------------------------------------------------------

    def recorded(self, records: list[Msg]) -> None:
        """Records of the decisions topic."""
        offer = self.join.offer
        for m in records:
            rec = offer(m)
            if rec is not None:  # counted as matched or mismatched, now recorded with another verdict
                self.tally.recount_as_conflict(rec.status)
                rec.status = "conflicting"
                run_id, seq = rec.eid
                self._diff("conflicting", f"{run_id}:{seq}", run_id, rec.decision, None, None)

    def expire(self, horizon_ms: int) -> None:
        """Events are folded up to `horizon_ms` of message time in every partition."""
        for rec in self.join.expire(horizon_ms):
            self._unexpected(rec)

    def _unexpected(self, rec: Recorded) -> None:
        if self._low <= rec.time <= self._high:
            self.tally.unexpected()
            run_id, seq = rec.eid
            self._diff("unexpected", f"{run_id}:{seq}", run_id, rec.decision, None, None)

    # -- events -------------------------------------------------------------------------

    def events(self, chunk: list[Msg]) -> None:  # noqa: C901 (the per-event loop, in one function: benchmarks.audit)
        """Fold a chunk of events, each partition's in offset order, and settle each one
        against its recorded decision (`_pair`); the pairs are counted at the end of the
        chunk, in bulk (`Tally.add`)."""
        replayer = self.replayer
        results = islice(self._fold_results(), replayer.feed(*source_of(chunk, self.scope.runs)))
        what_if, spend_on, fleet_counts = self.what_if, self.spend_on, self.fleet_counts
        settle, find, tally, runs = self.join.settle, self.join.find, self.tally, self.open
        run_configs, one_config, unknown = replayer.run_configs, replayer.one_config, replayer.unknown_configs
        pending = self.join.pending
        low, high, gateways, timelines = self._low, self._high, self.scope.gateways, self.timelines
        watching, shadow = self.shadow.watching, self.shadow
        statuses: list[str] = []  # what each pair counted came to
        counted: list[Decision] = []  # the replayed decisions among them
        inside_n = 0  # events in the range
        for x in results:
            f: Folded | SetAside = x if what_if is None else x.position
            m: Msg = f.position
            mt = m.timestamp
            inside = low <= mt <= high
            if type(f) is not Folded:  # set aside: a dead letter
                if inside:
                    tally.c["dead_letters"] += 1
                continue
            ev = f.event
            run_id = ev.run_id
            after = f.after
            if after is None:  # the run ended: its config goes (the fold drops its state)
                run_configs.pop(run_id, None)
            wi = what_if.decision(x) if what_if is not None else None
            if gateways and ev.gateway_id not in gateways:
                continue
            run = runs.get(run_id) or self._start(ev, m)
            replayed = f.decisions[0] if f.decisions else None
            if one_config:  # (`Join.find`, without a call)
                p = pending.get(run_id)
                rec = p.get(ev.seq) if p is not None else None
                if rec is not None and rec.config is None:  # (as `_config_for` counts them)
                    unknown[rec.decision.config_hash] += 1
            else:
                rec = replayer.found if replayer.found_for is ev else find(run_id, ev.seq)
            if rec is not None or replayed is not None:
                settle(rec, run_id, ev.seq, mt, replayed is not None)
            status, changed = None, False
            if inside:
                inside_n += 1
                if not run.in_range:
                    self._entered(run_id, run)
                if spend_on and after is not f.before:  # applied, not a duplicate: it counts (section 11)
                    fleet_counts.count_spend(replayer.config_of(run_id).spend_caps, ev)
                if watching and run_id in watching:
                    shadow.event(ev)  # after the run's first call that would have been stopped
                if not run.partial and (replayed is not None or rec is not None):
                    status, changed = self._pair(ev, mt, rec, replayed, wi, statuses, counted)
                if timelines is not None:
                    timelines.add(ev, status, rec.decision if rec is not None else None, replayed, wi, changed)
            if after is None:
                self._ended(run_id)
        tally.events += inside_n
        tally.add(statuses, counted)

    def _fold_results(self) -> Iterator[Any]:
        """One result per event fed to the replayer: its fold's, or the what-if fold's
        over those (each carrying the first fold's result as its position); started with
        the first events, once the book holds every config (`Replayer.start`)."""
        if self._results is None:
            self.spend_on = any(c.spend_caps for c in self.configs.by_hash.values())
            folded = self.replayer.start()
            self._results = folded if self.what_if is None else self.what_if.fold(folded)
        else:
            self.replayer.check_book()
        return self._results

    def _pair(
        self,
        ev: Event,
        mt: int,
        rec: Recorded | None,
        replayed: Decision | None,
        wi: Decision | None,
        statuses: list[str],
        counted: list[Decision],
    ) -> tuple[str, bool]:
        """Count a recorded and a replayed decision: (their status, whether the what-if
        decision changes what was decided)."""
        status = pair_status(rec, replayed)
        statuses.append(status)
        if replayed is not None:
            counted.append(replayed)
            count_replayed(self.tally, self.shadow, self.fleet_counts, ev, replayed, mt)
        if status != "matched":
            recorded = rec.decision if rec is not None else None
            self._diff(status, f"{ev.run_id}:{ev.seq}", ev.run_id, recorded, replayed, None)
        changed = self._what_if(ev, rec, replayed, wi) if self.what_if is not None else False
        if self.signals is not None:
            cfg = rec.config if rec is not None and rec.config is not None else self.replayer.config_of(ev.run_id)
            self.signals.lag(ev, rec.decision if rec is not None else None, cfg.spend_caps)
        return status, changed

    def _start(self, ev: Event, m: Msg) -> _Run:
        """A run's first event read: its start if it came after the run's end, on a
        partition read from its very beginning, or with a full idle timeout read before
        it and nothing of the run in it (semantics.md section 7: it started there)."""
        run_id = ev.run_id
        scan = self.window.scan_start_ms
        started = (
            run_id in self.ended
            or self.complete(m.partition)
            or (scan is not None and m.timestamp - scan > self.replayer.config_of(run_id).idle_timeout_ms)
        )
        run = self.open[run_id] = _Run(not started)
        owns = self.scope.owns
        if owns is not None and not owns(run_id):
            self.tally.misrouted += 1  # its decisions went to another shard
        if self.timelines is not None:
            self.timelines.start(run_id, ev.gateway_id, ev.agent_id, run.partial)
        return run

    def _ended(self, run_id: str) -> None:
        """The run's run_end was read: a later event of its id starts a new run."""
        self.ended.add(run_id)
        del self.open[run_id]
        if self.timelines is not None:
            self.timelines.close(run_id)

    def _entered(self, run_id: str, run: _Run) -> None:
        """The run's first event in the range."""
        run.in_range = True
        self.tally.run_ids.add(run_id)
        if run.partial:
            self.tally.partial_ids.add(run_id)

    def _what_if(self, ev: Event, rec: Recorded | None, replayed: Decision | None, what_if: Decision | None) -> bool:
        """Whether the what-if decision changes what was decided (counted, and a diff
        line for each change)."""
        assert self.what_if is not None
        decided = rec.decision if rec is not None else replayed
        found = self.what_if.compare(decided, what_if)
        if found:
            self._diff("what_if", f"{ev.run_id}:{ev.seq}", ev.run_id, decided, None, what_if, found)
        return bool(found)

    def _diff(self, *line: Any) -> None:
        """A line for `--diff`, if it is written: `diff_line`'s arguments."""
        if self.diff is not None:
            self.diff(diff_line(*line))

    # -- the end --------------------------------------------------------------------------

    def finish(self) -> None:
        """Every stream read to its end: what still waits is unexpected; open runs close."""
        for rec in self.join.finish():
            self._unexpected(rec)
        if self.timelines is not None:
            self.timelines.finish()
        self.shadow.finish()
        self.open.clear()

    def totals(self) -> Totals:
        """What the summary and the report need (no run state): picklable, for the
        parent process of shards to add up."""
        return Totals(
            self.tally,
            self.join.counts,
            self.replayer.unknown_configs,
            self.what_if.counts if self.what_if is not None else WhatIfCounts(),
            self.timelines.flagged if self.timelines is not None else [],
            self.shadow.counts,
            self.fleet_counts,
        )

    def summary(self, seconds: float) -> dict[str, Any]:
        return summary(self.totals(), self.what_if.config if self.what_if is not None else None, seconds)

    def report(self, seconds: float, range_: dict[str, Any]) -> dict[str, Any]:
        what_if = self.what_if.config if self.what_if is not None else None
        return report(self.totals(), what_if, self.configs.listed, seconds, range_)

    def clean(self) -> bool:
        return self.tally.clean()
