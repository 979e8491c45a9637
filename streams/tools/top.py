"""`loopwarden top`: the operator's live view of a fleet, read from the decisions topic.

Three layers, kept apart so that the first two need no broker:

- `TopState`: the aggregation over a stream of decisions (and dead letters and worker
  lag readings). Every method takes the time it happens at; there is no clock inside.
  `snapshot(now)` is a plain dict, the same one `--once --json` prints.
- `streams/tools/topview.py`: the rendering of a snapshot for a terminal of a given size.
- `Top` and `run_top`: the Kafka consumer (all partitions of the decisions and
  dead-letter topics, no consumer group), the worker /metrics scrape, the refresh loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import signal
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from detectors.fleet import Breaker, StopOrder
from detectors.policy import RUN_BUDGET
from detectors.wire import Decision, decode_decision

from ..admin.fleet_topic import FleetLedger
from ..admin.spend import SpendBoard, read_from, spend_rows, spend_signals, tables_among, topic_names
from ..kafka import ranges
from ..kafka.errors import BrokerError
from ..kafka.settings import Settings

if TYPE_CHECKING:
    from rich.console import Console

ACTIONS = ("allow", "warn", "block", "abort")
FLAGGED = ("warn", "block", "abort")
RATE_WINDOW_S = 10.0  # "per second" figures: the average over the last 10 s
MINUTE_WINDOW_S = 60.0  # "per minute" figures: the last 60 s
FORGET_AFTER_S = 120.0  # a run not flagged for this long is no longer "looping now"
LAG_METRIC = "loopwarden_consumer_lag"
SPEND_ROWS = 10  # the keys nearest to their spend cap a snapshot lists
SPEND_LOOK_S = 10.0  # how often the spend stage's tables are looked for (a worker may make them later)
ERROR_HEADER = "loopwarden.error"


# --- state (pure) ------------------------------------------------------------------------


class PolicyView:
    """What loopwarden's own rules add to the view: what shadow and held-out runs would
    have been told (semantics.md section 10), the runs closest to their budget (section
    8), the fleet topic's open breakers and stop orders (section 9), and the keys nearest
    to their spend cap in the current windows, from the spend stage's tables (section 11)."""

    def __init__(self, max_runs: int = 10_000) -> None:
        self.max_runs = max_runs
        self.shadow: Counter[str] = Counter()  # by shadow_action
        self.shadow_detectors: Counter[str] = Counter()  # their would-be warnings, blocks and aborts
        self.budget_runs: dict[str, dict[str, Any]] = {}  # run -> its budget row, newest last
        self.fleet: FleetLedger | None = None  # None: the fleet topic is not read
        self.spend: SpendBoard | None = None  # None: no spend stage table is read

    def add(self, d: Decision, ts: float) -> None:
        if not d.enforced and d.shadow_action is not None:
            self.shadow[d.shadow_action] += 1
            if d.detector and d.shadow_action in FLAGGED:
                self.shadow_detectors[d.detector] += 1
        if d.detector == RUN_BUDGET:
            self._track_budget(d, ts)

    def _track_budget(self, d: Decision, ts: float) -> None:
        """A run warned or stopped by its budget: its kind and the percent it used."""
        parts = (d.warning_key or "").split(":")  # budget:{kind}:{mark} (warning), budget:{kind} (abort)
        if len(parts) < 2:
            return  # a call after the abort: the run is already listed
        action = d.shadow_action or d.action
        percent = d.count if action == "warn" else 100
        self.budget_runs.pop(d.run_id, None)
        self.budget_runs[d.run_id] = {
            "run_id": d.run_id,
            "agent_id": d.agent_id,
            "gateway_id": d.gateway_id,
            "kind": parts[1],
            "percent": percent,
            "stopped": action == "abort",
            "enforced": d.enforced,
            "last_seen": ts,
        }
        if len(self.budget_runs) > self.max_runs:
            del self.budget_runs[next(iter(self.budget_runs))]

    def watch_fleet(self) -> FleetLedger:
        """The fleet topic is read (so no breaker seen means none, not unknown)."""
        if self.fleet is None:
            self.fleet = FleetLedger()
        return self.fleet

    def watch_spend(self) -> SpendBoard:
        """A spend stage table is read (so no key listed means none near a cap)."""
        if self.spend is None:
            self.spend = SpendBoard(limit=5 * SPEND_ROWS)
        return self.spend

    def _spend_now(self, now: float) -> list[dict[str, Any]] | None:
        """The keys nearest to their spend cap now, reached first (admin/spend.py's rows)."""
        if self.spend is None:
            return None
        ms = int(now * 1000)
        signals = spend_signals(self.fleet.view) if self.fleet is not None else []
        return spend_rows(self.spend.states(ms), signals, ms)[:SPEND_ROWS]

    def _fleet_now(self, now: float) -> dict[str, Any] | None:
        if self.fleet is None:
            return None
        ms = int(now * 1000)  # live, event time is about the wall clock
        breakers = [
            {"id": r.id, "tool_name": r.tool_name, "runs": r.runs, "gateways": r.gateways, "until_ts": r.until_ts}
            for r in self.fleet.records.values()
            if isinstance(r, Breaker) and r.from_ts <= ms < r.until_ts
        ]
        orders = []
        for r in self.fleet.records.values():
            if isinstance(r, StopOrder) and (r.until_ts is None or ms < r.until_ts):
                field, value = r.target()
                orders.append(
                    {"id": r.id, "target": f"{field.removesuffix('_id')} {value}", "reason": r.reason}
                    | {"from_ts": r.from_ts, "until_ts": r.until_ts, "pending": r.from_ts > ms}
                )
        return {"open_breakers": breakers, "stop_orders": orders, "skipped": self.fleet.skipped}

    def snapshot(self, now: float, shadow_rates: dict[str, float]) -> dict[str, Any]:
        closest = sorted(self.budget_runs.values(), key=lambda r: (-r["percent"], -r["last_seen"]))[:10]
        return {
            "shadow": {
                "decisions": sum(self.shadow.values()),
                "would_have": {a: self.shadow[a] for a in ACTIONS},
                "per_minute": shadow_rates,
                "by_detector": dict(sorted(self.shadow_detectors.items())),
            },
            "budget_runs": [
                {k: v for k, v in r.items() if k != "last_seen"} | {"age_s": round(max(0.0, now - r["last_seen"]), 1)}
                for r in closest
            ],
            "fleet": self._fleet_now(now),
            "spend_caps": self._spend_now(now),
        }


class TopState:
    """Aggregates decisions into totals, windowed rates and the runs looping now.

    `start` is when observation began (seconds since the epoch; None: long ago), so that
    rates are not underestimated while less than a window has passed. Times are seconds
    since the epoch; a decision's time is its Kafka record timestamp."""

    def __init__(
        self,
        start: float | None = None,
        forget_after: float = FORGET_AFTER_S,
        max_runs: int = 10_000,
        dedup: int = 200_000,
    ) -> None:
        self.start = start
        self.forget_after = forget_after
        self.max_runs = max_runs
        self.decisions = 0
        self.duplicates = 0  # decisions seen again by event_id (a worker's replay after a crash)
        self.undecodable = 0
        self.actions: Counter[str] = Counter({a: 0 for a in ACTIONS})
        self.detectors: Counter[str] = Counter()
        self.detector_actions: dict[str, Counter[str]] = {}
        self.gateways: dict[str, Counter[str]] = {}
        self.runs: dict[str, dict[str, Any]] = {}
        self.dead_letters: Counter[str] | None = None  # None: the dead-letter topic is not read
        self.workers: dict[str, dict[str, Any]] = {}
        self._buckets: dict[int, Counter[tuple[str, ...]]] = {}  # whole second -> counts of that second
        self._latest = -math.inf
        self._seen: dict[str, None] = {}  # recent event_ids, oldest first
        self._dedup = dedup
        self.policy = PolicyView(max_runs)  # shadow, budgets and the fleet (sections 8 to 10)

    # input

    def add(self, d: Decision, ts: float) -> None:
        """One decision, published at `ts`."""
        if d.event_id in self._seen:
            self.duplicates += 1
            return
        self._seen[d.event_id] = None
        if len(self._seen) > self._dedup:
            del self._seen[next(iter(self._seen))]
        self.decisions += 1
        self.actions[d.action] += 1
        if not d.enforced and d.shadow_action is not None:  # published as allow: counted apart
            self._bucket(ts)["shadow", d.shadow_action] += 1
        self.policy.add(d, ts)
        if d.detector:
            self.detectors[d.detector] += 1
            self.detector_actions.setdefault(d.detector, Counter())[d.action] += 1
        g = self.gateways.setdefault(d.gateway_id, Counter())
        g["decisions"] += 1
        if d.action == "block":
            g["blocks"] += 1
        b = self._bucket(ts)
        b["action", d.action] += 1
        b["gateway", d.gateway_id] += 1
        if d.action == "block":
            b["blocks", d.gateway_id] += 1
        if d.detector and d.action in FLAGGED:
            b["detector", d.detector, d.action] += 1
        self._track_run(d, ts)

    def add_record(self, value: bytes | None, ts: float) -> bool:
        """One record of the decisions topic; False (and counted) when it is not a decision."""
        try:
            d = decode_decision(value or b"")
        except Exception:
            self.undecodable += 1
            return False
        self.add(d, ts)
        return True

    def add_dead_letter(self, reason: str, ts: float) -> None:
        if self.dead_letters is None:
            self.dead_letters = Counter()
        self.dead_letters[reason] += 1
        self._bucket(ts)["dead", reason] += 1

    def watch_dead_letters(self) -> None:
        """The dead-letter topic is read (so none seen means none, not unknown)."""
        if self.dead_letters is None:
            self.dead_letters = Counter()

    def set_worker(self, url: str, lags: dict[int, int] | None, at: float, error: str | None = None) -> None:
        """A scrape of one worker's /metrics: its lag per partition, or None when unreachable."""
        self.workers[url] = {"lags": lags, "at": at, "error": error}

    def _bucket(self, ts: float) -> Counter[tuple[str, ...]]:
        k = math.floor(ts)
        b = self._buckets.get(k)
        if b is None:
            b = self._buckets[k] = Counter()
            if ts > self._latest:
                self._latest = ts
            if len(self._buckets) > 2 * MINUTE_WINDOW_S + 10:  # reading history: keep what a snapshot can use
                self._prune(self._latest)
        elif ts > self._latest:
            self._latest = ts
        return b

    def _prune(self, now: float) -> None:
        oldest = math.floor(now - MINUTE_WINDOW_S) - 1
        for k in [k for k in self._buckets if k < oldest]:
            del self._buckets[k]

    def watch_fleet(self) -> FleetLedger:
        """The fleet topic is read (so no breaker seen means none, not unknown)."""
        return self.policy.watch_fleet()

    def _track_run(self, d: Decision, ts: float) -> None:
        r = self.runs.get(d.run_id)
        if r is not None and d.seq < r["seq"]:
            return  # an older decision of the run, published again
        if d.action in FLAGGED:
            self.runs.pop(d.run_id, None)  # re-inserted: the dict stays in order of last flag
            self.runs[d.run_id] = {
                "run_id": d.run_id,
                "gateway_id": d.gateway_id,
                "agent_id": d.agent_id,
                "tool_name": d.tool_name,
                "paired_tool_name": d.paired_tool_name,
                "action": d.action,
                "level": d.level,
                "detector": d.detector,
                "count": d.count,
                "message": d.message,
                "seq": d.seq,
                "since": r["since"] if r else ts,
                "last_seen": ts,
            }
            if len(self.runs) > self.max_runs:
                del self.runs[next(iter(self.runs))]
        elif r is not None:
            if d.level == "none":
                del self.runs[d.run_id]  # the run moved on: nothing is detected any more
            else:  # a suppressed repeat of a shown warning: still looping
                r.update(count=d.count, seq=d.seq, last_seen=ts, tool_name=d.tool_name)

    # output

    def _window(self, now: float, full: float) -> tuple[int, float]:
        """The first whole second of the window ending at `now`, and the seconds it covers
        (whole seconds from that one to now; less while observation began later)."""
        first = math.floor(now - full)
        begin = first if self.start is None else max(first, self.start)
        return first, max(1.0, now - begin)

    def _sum(self, first: int) -> Counter[tuple[str, ...]]:
        out: Counter[tuple[str, ...]] = Counter()
        for k, b in self._buckets.items():
            if k >= first:
                out.update(b)
        return out

    def looping(self, now: float) -> list[dict[str, Any]]:
        """The runs looping now, newest first (runs not flagged within forget_after are dropped)."""
        for rid in [rid for rid, r in self.runs.items() if now - r["last_seen"] > self.forget_after]:
            del self.runs[rid]
        rows = sorted(self.runs.values(), key=lambda r: r["last_seen"], reverse=True)
        return [
            {
                **{k: v for k, v in r.items() if k not in ("since", "last_seen")},
                "age_s": round(max(0.0, now - r["last_seen"]), 1),
                "looping_for_s": round(max(0.0, r["last_seen"] - r["since"]), 1),
            }
            for r in rows
        ]

    def snapshot(self, now: float) -> dict[str, Any]:
        self._prune(now)
        rate_first, rate_span = self._window(now, RATE_WINDOW_S)
        min_first, min_span = self._window(now, MINUTE_WINDOW_S)
        recent, minute = self._sum(rate_first), self._sum(min_first)
        per_s = {a: round(recent["action", a] / rate_span, 2) for a in ACTIONS}
        per_s["total"] = round(sum(recent["action", a] for a in ACTIONS) / rate_span, 2)
        scale = 60.0 / min_span
        by_det: dict[str, dict[str, float]] = {}
        for key, n in minute.items():
            if key[0] == "detector":
                by_det.setdefault(key[1], {a: 0.0 for a in FLAGGED})[key[2]] = round(n * scale, 2)
        gateways = {
            gw: {
                "decisions": c["decisions"],
                "blocks": c["blocks"],
                "calls_per_s": round(recent["gateway", gw] / rate_span, 2),
                "blocks_per_min": round(minute["blocks", gw] * scale, 2),
            }
            for gw, c in sorted(self.gateways.items())
        }
        dead = None
        if self.dead_letters is not None:
            reasons = {k[1]: round(n * scale, 2) for k, n in minute.items() if k[0] == "dead"}
            dead = {
                "total": sum(self.dead_letters.values()),
                "by_reason": dict(sorted(self.dead_letters.items())),
                "per_minute": round(sum(reasons.values()), 2),
                "per_minute_by_reason": dict(sorted(reasons.items())),
            }
        workers = [_worker_row(url, w, now) for url, w in sorted(self.workers.items())]
        runs = self.looping(now)
        shadow_rates = {a: round(minute["shadow", a] * scale, 2) for a in FLAGGED}
        return {
            "at": round(now, 3),
            "decisions": self.decisions,
            "duplicates": self.duplicates,
            "undecodable": self.undecodable,
            "actions": {a: self.actions[a] for a in sorted(self.actions)},
            "detectors": dict(sorted(self.detectors.items())),
            "detector_actions": {d: {a: c[a] for a in ACTIONS} for d, c in sorted(self.detector_actions.items())},
            "per_second": per_s,
            "per_minute_by_detector": dict(sorted(by_det.items())),
            "looping_runs": runs,
            "gateways": gateways,
            "dead_letters": dead,
            "workers": workers,
            "window_s": {"rate": round(rate_span, 1), "minute": round(min_span, 1)},
            **self.policy.snapshot(now, shadow_rates),
        }


# --- pure helpers ------------------------------------------------------------------------


def _worker_row(url: str, w: dict[str, Any], now: float) -> dict[str, Any]:
    """One worker's line of a snapshot: its lag by partition, or why it is not known."""
    lags = w["lags"]
    return {
        "url": url,
        "reachable": lags is not None,
        "lag": sum(lags.values()) if lags is not None else None,
        "partitions": {str(p): n for p, n in sorted(lags.items())} if lags is not None else None,
        "error": w["error"],
        "age_s": round(max(0.0, now - w["at"]), 1),
    }


def parse_lags(text: str) -> dict[int, int]:
    """`loopwarden_consumer_lag{partition=...}` of one worker's /metrics text."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[int, int] = {}
    for fam in text_string_to_metric_families(text):
        if fam.name != LAG_METRIC:
            continue
        for s in fam.samples:
            try:
                out[int(s.labels["partition"])] = int(s.value)
            except (KeyError, ValueError):
                continue
    return out


def metrics_url(url: str) -> str:
    """host:port or a URL without a path means that worker's /metrics."""
    if "://" not in url:
        url = "http://" + url
    scheme, rest = url.split("://", 1)
    return url if "/" in rest else f"{scheme}://{rest}/metrics"


def dead_letter_reason(headers: Iterable[tuple[str, bytes]] | None) -> str:
    for k, v in headers or ():
        if k == ERROR_HEADER:
            return bytes(v).decode("utf-8", "replace") or "unknown"
    return "unknown"


# --- Kafka and HTTP ----------------------------------------------------------------------


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=1.5) as r:
        body: bytes = r.read()
        return body.decode("utf-8", "replace")


class Top:
    """Reads the decisions and dead-letter topics (every partition, no consumer group),
    the fleet topic and the spend stage's tables into a TopState, and scrapes the
    workers' /metrics."""

    def __init__(
        self,
        settings: Settings,
        start: float | str = "now",
        worker_metrics: Iterable[str] = (),
        forget_after: float = FORGET_AFTER_S,
    ) -> None:
        self.settings = settings
        self.start = start
        self.urls = [metrics_url(u) for u in worker_metrics]
        self.state = TopState(
            None if start == "beginning" else (start if isinstance(start, float) else None), forget_after=forget_after
        )
        self.range: ranges.Range | None = None
        self.assigned: list[Any] = []
        self.deadletters = False
        self.spend_topics: set[str] = set()
        self._missed = False
        self._next_look = 0.0

    @property
    def topic(self) -> str:
        return self.settings.decisions_topic

    async def open(self, require: bool = True) -> bool:
        """Connect and take the topics' partitions. Without the decisions topic: a
        BrokerError when `require`, else False (call `assign` again later)."""
        self.range = await ranges.open_range(self.settings, auto_offset_reset="latest", max_poll_records=5000)
        try:
            ok = await self.assign()
        except BaseException:
            await self.close()
            raise
        if not ok:
            self._missed = True
        if not ok and require:
            await self.close()
            raise BrokerError(
                f"topic {self.topic} does not exist on {self.settings.bootstrap} "
                f"(is --topic-prefix {self.settings.topic_prefix!r} the workers' prefix?)"
            )
        if not self.state.start and self.start == "now":
            self.state.start = time.time()
        return ok

    async def assign(self) -> bool:
        """Follow the decisions topic (and the dead-letter topic) from the start asked
        for, and the fleet topic whole; False while there is no decisions topic."""
        r = self.range
        assert r is not None, "open() first"
        start: ranges.Start
        if self._missed and self.start == "now":
            start = ranges.BEGINNING  # the topic appeared after we began: all of it is new
        elif self.start in ("now", "beginning"):
            start = ranges.END if self.start == "now" else ranges.BEGINNING
        else:
            start = int(float(self.start) * 1000)
        if not await r.add(self.topic, start, follow=True, must_exist=False):
            return False
        if await r.add(self.settings.deadletter_topic, start, follow=True, must_exist=False):
            self.deadletters = True
            self.state.watch_dead_letters()
        # breakers, stop orders and spend caps in force may be older than any start: all of it
        if await r.add(self.settings.fleet_topic, ranges.BEGINNING, partitions=[0], follow=True, must_exist=False):
            self.state.watch_fleet()
        self.assigned = list(r.tps)
        await self.look_for_spend_tables()
        return True

    async def look_for_spend_tables(self, every_s: float = 0.0) -> None:
        """Follow the spend stage's tables not followed yet, each from where its current
        window's states begin (at most once per `every_s`)."""
        if self.range is None or time.monotonic() < self._next_look:
            return
        self._next_look = time.monotonic() + every_s
        now_ms = int(time.time() * 1000)
        for ms, topic in tables_among(await topic_names(self.range, self.settings), self.settings).items():
            if topic in self.spend_topics:
                continue
            if await self.range.add(topic, read_from(ms, now_ms), follow=True, must_exist=False):
                self.spend_topics.add(topic)
                self.state.policy.watch_spend()
        self.assigned = list(self.range.tps)

    async def poll(self, timeout_s: float) -> int:
        """Read what arrives within timeout_s; the number of records."""
        if not self.assigned or self.range is None:
            await asyncio.sleep(timeout_s)
            return 0
        now = time.time()
        records = await self.range.chunk(timeout_ms=int(timeout_s * 1000))
        for m in records:
            ts = m.timestamp / 1000.0 if m.timestamp and m.timestamp > 0 else now
            if m.topic == self.topic:
                self.state.add_record(m.value, ts)
            elif m.topic == self.settings.fleet_topic:
                self.state.watch_fleet().add(m.key, m.value, m.headers or (), f"{m.topic}@{m.offset}")
            elif m.topic in self.spend_topics:
                self.state.policy.watch_spend().add(m.key, m.value, int(now * 1000))
            else:
                self.state.add_dead_letter(dead_letter_reason(m.headers), ts)
        return len(records)

    async def caught_up(self) -> bool:
        """Everything that was on the topics when they were assigned has been read."""
        return bool(self.assigned) and self.range is not None and self.range.caught_up()

    async def scrape(self) -> None:
        async def one(url: str) -> None:
            try:
                text = await asyncio.to_thread(_scrape, url)
                self.state.set_worker(url, parse_lags(text), time.time())
            except Exception as exc:
                self.state.set_worker(url, None, time.time(), error=str(getattr(exc, "reason", exc)))

        await asyncio.gather(*(one(u) for u in self.urls))

    def snapshot(self, now: float | None = None) -> dict[str, Any]:
        snap = self.state.snapshot(time.time() if now is None else now)
        return {
            "topic": self.topic,
            "deadletter_topic": self.settings.deadletter_topic if self.deadletters else None,
            "watching": bool(self.assigned),
            **snap,
        }

    async def close(self) -> None:
        if self.range is not None:
            await self.range.close()
            self.range = None


async def show(
    top: Top,
    stop: asyncio.Event,
    *,
    seconds: float | None = None,
    mode: str = "live",
    screen: bool = False,
    console: Console | None = None,
    refresh_s: float = 1.0,
) -> dict[str, Any]:
    """Refresh the view about once a second until `stop` is set or `seconds` have passed.

    mode: "live" (rich, in place), "plain" (one summary line a refresh, for a pipe) or
    "jsonl" (one snapshot a line). The last snapshot is returned."""
    from .topview import plain_line

    deadline = None if seconds is None else time.monotonic() + seconds
    scraper = None

    async def scrape_loop() -> None:
        while True:
            await top.scrape()
            await asyncio.sleep(2.0)

    if top.urls:
        scraper = asyncio.create_task(scrape_loop())

    def done() -> bool:
        return stop.is_set() or (deadline is not None and time.monotonic() >= deadline)

    read_for = _reader(top, done)
    snap: dict[str, Any] = {}
    try:
        if mode == "live":
            snap = await _live(top, done, read_for, refresh_s, screen, console)
        else:
            while True:
                await read_for(refresh_s)
                snap = top.snapshot()
                line = json.dumps(snap, separators=(",", ":")) if mode == "jsonl" else plain_line(snap)
                print(line, flush=True)
                if done():
                    break
    finally:
        if scraper:
            scraper.cancel()
    return snap


def _reader(top: Top, done: Callable[[], bool]) -> Callable[[float], Awaitable[None]]:
    """`read_for(span)`: read what comes for `span` seconds, until `done()`; while the
    topic is not there, it is looked for every 2 s."""
    next_try = 0.0

    async def read_for(span: float) -> None:
        nonlocal next_try
        until = time.monotonic() + span
        while not done():
            left = until - time.monotonic()
            if left <= 0:
                return
            if not top.assigned and time.monotonic() >= next_try:  # the topic did not exist yet
                next_try = time.monotonic() + 2.0
                with contextlib.suppress(Exception):
                    await top.assign()
            elif top.assigned:  # a spend stage's table made since
                with contextlib.suppress(Exception):
                    await top.look_for_spend_tables(SPEND_LOOK_S)
            await top.poll(min(0.25, left))

    return read_for


async def _live(top: Top, done: Any, read_for: Any, refresh_s: float, screen: bool, console: Any) -> dict[str, Any]:
    """The live view, redrawn in place after each read, until `done()`; the last snapshot."""
    from rich.console import Console
    from rich.live import Live

    from .topview import render

    console = console or Console()
    snap: dict[str, Any] = {}
    live = Live(
        console=console,
        screen=screen,
        auto_refresh=False,
        transient=False,
        redirect_stdout=False,
        redirect_stderr=False,
        vertical_overflow="crop",
    )
    with live:
        while True:
            snap = top.snapshot()
            live.update(render(snap, console.size.width, console.size.height), refresh=True)
            if done():
                return snap
            await read_for(refresh_s)


async def once(top: Top, stop: asyncio.Event, seconds: float | None = None) -> dict[str, Any] | None:
    """Read up to the end offsets found at start (or for `seconds`); one snapshot. None if stopped."""
    await top.open(require=True)
    try:
        if top.urls:
            await top.scrape()
        deadline = None if seconds is None else time.monotonic() + seconds
        while not stop.is_set():
            if deadline is None:
                if await top.caught_up():
                    break
                await top.poll(0.2)
            else:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                await top.poll(min(0.25, left))
        if stop.is_set():
            return None
        if top.urls and seconds:
            await top.scrape()
        return top.snapshot()
    finally:
        await top.close()


@dataclass(frozen=True)
class TopOptions:
    """`loopwarden top`'s command line, as values (parsed in cli.py)."""

    start: float | str = "now"  # seconds since the epoch, "now" or "beginning"
    once: bool = False
    json: bool = False
    seconds: float | None = None
    worker_metrics: tuple[str, ...] = ()
    forget_after: float = FORGET_AFTER_S
    screen: bool = True  # the live view on the terminal's alternate screen


def run_top(settings: Settings, opts: TopOptions) -> int:
    """The `loopwarden top` command."""
    top = Top(settings, opts.start, opts.worker_metrics, forget_after=opts.forget_after)

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            if opts.once:
                snap = await once(top, stop, opts.seconds)
                if snap is None:
                    return 130
                if opts.json:
                    print(json.dumps(snap, indent=2))
                else:
                    from rich.console import Console

                    from .topview import render

                    c = Console()
                    c.print(render(snap, c.size.width, None))
                return 0
            await top.open(require=False)
            try:
                tty = sys.stdout.isatty()
                mode = "jsonl" if opts.json else ("live" if tty else "plain")
                await show(top, stop, seconds=opts.seconds, mode=mode, screen=tty and opts.screen)
            finally:
                await top.close()
            return 0
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

    return asyncio.run(main())
