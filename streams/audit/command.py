"""`loopwarden audit`: replay the topics and compare with what was decided."""

from __future__ import annotations

import asyncio
import gc
import json
import multiprocessing
import os
import shutil
import sys
import time
from collections.abc import Callable
from multiprocessing import connection as mp_connection
from multiprocessing.connection import Connection
from operator import attrgetter
from pathlib import Path
from typing import Any, NamedTuple, TextIO

from detectors import DetectionConfig
from detectors.errors import LoopwardenError

from ..admin.config_topic import read_configs
from ..admin.fleet_topic import FleetLedger, read_fleet
from ..kafka.partitioner import partition_for
from ..kafka.settings import Settings, read_detection_config
from ..progress import Progress
from .core import Audit, ConfigBook
from .options import AuditOptions, iso
from .read import TopicRange, partitions_of
from .report import Totals, report, summary
from .shadow import BUDGET_COUNTS
from .timelines import MAX_RUNS
from .whatif import CHANGES

GC_THRESHOLD = 70_000  # allocations between young collections (Python's default: 700)
AUTO_JOBS_FROM = 200_000  # events in the range from which --jobs defaults to one process per core
CHUNK = 2000  # events folded between two chances for the consumers to fetch
_TIME = attrgetter("timestamp")


def _warn(path: str, warning: str) -> None:
    print(f"warning: {path}: {warning}", file=sys.stderr)


async def _configs(settings: Settings, options: AuditOptions) -> ConfigBook:
    """The configs decisions may have been made under: those on the config topic (the
    current one is used for events whose decision names no known config), and those
    given with --worker-config (workers pinned with --config)."""
    current: DetectionConfig | None = None
    texts: list[tuple[DetectionConfig, str, str]] = []
    history = await read_configs(settings)
    for cid, (raw, cfg) in history.configs.items():
        texts.append((cfg, f"{settings.config_topic}:{cid[:12]}", raw.decode("utf-8", "replace")))
        if cid == history.current:
            current = cfg
    for path in options.worker_configs:
        cfg = read_detection_config(path, warn=_warn)
        texts.append((cfg, path, Path(path).read_text(errors="replace")))
        if current is None:
            current = cfg
    book = ConfigBook(current if current is not None else DetectionConfig({}))
    for cfg, source, text in texts:
        book.add(cfg, source, text)
    return book


class Plan(NamedTuple):
    """What every shard of one audit shares, fixed before any reads."""

    options: AuditOptions
    what_if: DetectionConfig | None
    book: ConfigBook
    partitions: list[int]  # of the events topic: all, or those of --run
    partition_count: int  # of the events topic
    total: int  # events in the range, for the progress bar
    fleet: FleetLedger  # the fleet topic's breakers and stop orders (fleet.py)


async def _plan(settings: Settings, options: AuditOptions) -> Plan:
    what_if = read_detection_config(options.what_if, warn=_warn) if options.what_if else None
    book = await _configs(settings, options)
    events = TopicRange(settings, settings.events_topic)
    try:
        await events.open(options.scan_start_ms, options.to_ms)
        count = len(events.ends)
        parts = partitions_of(list(options.runs), count) if options.runs else sorted(events.ends)
        total = sum(max(0, events.ends[p] - events.starts[p]) for p in parts)
    finally:
        await events.close()
    return Plan(options, what_if, book, parts, count, total, await read_fleet(settings))


async def _read(
    a: Audit, events: TopicRange, decisions: TopicRange, grace_ms: int, progress: Callable[[int], None]
) -> None:
    """Feed the audit both topics: before each chunk of events, the decisions recorded
    up to a grace period after them, so each event is replayed under its recorded
    decision's config."""
    while not events.finished:
        chunk = await events.chunk()
        if not chunk:
            continue
        need = max(map(_TIME, chunk)) + grace_ms
        while not decisions.finished:
            h = decisions.horizon()
            if h is not None and h >= need:
                break
            a.recorded(await decisions.chunk())
        for i in range(0, len(chunk), CHUNK):
            a.events(chunk[i : i + CHUNK])
            await asyncio.sleep(0)  # the consumer fetches the next records meanwhile
        h = events.horizon()
        if h is not None:
            a.expire(h)
        progress(events.read)
    while not decisions.finished:
        a.recorded(await decisions.chunk())
    a.finish()


async def audit_partitions(
    settings: Settings,
    plan: Plan,
    partitions: list[int],
    *,
    diff: str | None,
    progress: Callable[[int], None],
    owns: Callable[[str], bool] | None = None,
    first: bool = True,
) -> Totals:
    """Audit these partitions of the events topic against every partition of the
    decisions topic (or those of --gateway); write the diff lines to the file `diff`."""
    options = plan.options
    window = options.window
    events = TopicRange(settings, settings.events_topic)
    decisions = TopicRange(settings, settings.decisions_topic)
    diff_file = open(diff, "w") if diff else None  # noqa: SIM115 (closed below)

    def write(line: dict[str, Any]) -> None:
        assert diff_file is not None
        diff_file.write(json.dumps(line, ensure_ascii=False) + "\n")

    try:
        gw_parts = partitions_of(list(options.gateways), settings.partitions) if options.gateways else None
        await events.open(window.scan_start_ms, window.to_ms, partitions)
        to = window.to_ms
        await decisions.open(window.scan_start_ms, None if to is None else to + window.grace_ms, gw_parts)
        a = Audit(
            plan.book,
            window,
            scope=options.scope(owns, first),
            complete=events.complete,
            what_if=plan.what_if,
            max_event_bytes=settings.max_event_bytes,
            diff=write if diff_file is not None else None,
            timelines=options.html is not None,
            fleet=plan.fleet,
        )
        await _read(a, events, decisions, window.grace_ms, progress)
    finally:
        await events.close()
        await decisions.close()
        if diff_file is not None:
            diff_file.close()
    return a.totals()


class _Owner:
    """Whether a run_id is on one of `parts` by Kafka's default partitioner (as gateways
    key events), remembered for the runs seen lately."""

    def __init__(self, parts: list[int], count: int) -> None:
        self.parts = frozenset(parts)
        self.count = count
        self.memo: dict[str, bool] = {}

    def __call__(self, run_id: str) -> bool:
        got = self.memo.get(run_id)
        if got is None:
            if len(self.memo) >= 100_000:
                self.memo.clear()
            got = self.memo[run_id] = partition_for.__wrapped__(run_id.encode(), self.count) in self.parts
        return got


def _jobs(plan: Plan) -> int:
    jobs = plan.options.jobs
    if jobs is not None:
        return max(1, min(jobs, len(plan.partitions)))
    if plan.total < AUTO_JOBS_FROM:
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, len(plan.partitions)))


def _shard(conn: Any, settings: Settings, plan: Plan, k: int, jobs: int, read: Any, diff: str | None) -> None:
    """A child process: audit every `jobs`-th partition from the `k`-th, send the totals."""
    try:
        parts = plan.partitions[k::jobs]
        totals = asyncio.run(
            audit_partitions(
                settings,
                plan,
                parts,
                diff=diff,
                progress=lambda n: read.__setitem__(k, n),
                owns=_Owner(parts, plan.partition_count),
                first=k == 0,
            )
        )
        conn.send(("ok", totals))
    except BaseException as exc:  # sent to the parent, which raises it
        try:
            conn.send(("error", exc))
        except Exception:
            conn.send(("error", LoopwardenError(f"{type(exc).__name__}: {exc}")))
    finally:
        conn.close()


def _gather(children: list[tuple[Any, Connection]], read: Any, total: int) -> dict[int, tuple[str, Any]]:
    """Each child's answer, by its number, with the progress of all of them shown."""
    progress = Progress("auditing", total)
    try:
        results: dict[int, tuple[str, Any]] = {}
        waiting = {recv: k for k, (_, recv) in enumerate(children)}
        while waiting:
            for ready in mp_connection.wait(list(waiting), timeout=0.2):
                assert isinstance(ready, Connection)
                k = waiting.pop(ready)
                try:
                    results[k] = ready.recv()
                except EOFError:
                    child = children[k][0]
                    child.join()
                    results[k] = ("error", LoopwardenError(f"audit shard {k} died (exit code {child.exitcode})"))
            progress.update(sum(read))
    finally:
        progress.close()
    return results


def _sharded(settings: Settings, plan: Plan, jobs: int) -> Totals:
    """Audit in `jobs` child processes, each some of the events topic's partitions
    (and the recorded decisions of their runs), and add up their totals."""
    ctx = multiprocessing.get_context("fork")  # the children share the parsed configs
    read = ctx.Array("q", jobs, lock=False)
    diff = plan.options.diff
    diffs = [f"{diff}.{k}.part" for k in range(jobs)] if diff else [None] * jobs
    children = []
    try:
        for k in range(jobs):
            recv, send = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_shard, args=(send, settings, plan, k, jobs, read, diffs[k]), daemon=True)
            p.start()
            send.close()
            children.append((p, recv))
        results = _gather(children, read, plan.total)
        totals = Totals.empty()
        for k in range(jobs):
            kind, got = results[k]
            if kind == "error":
                raise got
            totals.merge(got, MAX_RUNS)
        if diff:
            with open(diff, "wb") as out:
                for part in diffs:
                    with open(part, "rb") as f:  # type: ignore[arg-type]
                        shutil.copyfileobj(f, out)
        return totals
    finally:
        for p, recv in children:
            if p.is_alive():
                p.terminate()
            p.join()
            recv.close()
        for part in diffs:
            if part is not None:
                Path(part).unlink(missing_ok=True)


def _audit_all(settings: Settings, plan: Plan) -> Totals:
    """The audit's totals: in shards when there are several jobs, else (or when runs are
    found off their partition) in this process."""
    jobs = _jobs(plan)
    if jobs > 1:
        totals = _sharded(settings, plan, jobs)
        if not totals.tally.misrouted:
            return totals
        print(
            f"note: {totals.tally.misrouted} runs' events are not on the partition Kafka's default partitioner "
            "gives their run_id, so the shards could not pair them with their decisions; auditing again "
            "in one process",
            file=sys.stderr,
        )
    progress = Progress("auditing", plan.total)
    try:
        return asyncio.run(
            audit_partitions(settings, plan, plan.partitions, diff=plan.options.diff, progress=progress.update)
        )
    finally:
        progress.close()


def audit(settings: Settings, options: AuditOptions, out: TextIO) -> int:
    plan = asyncio.run(_plan(settings, options))
    started = time.perf_counter()
    totals = _audit_all(settings, plan)
    seconds = time.perf_counter() - started
    if options.html:
        from .html import render

        range_ = {
            "from": iso(options.from_ms),
            "to": iso(options.to_ms),
            "lookback_s": options.lookback_ms / 1000,
            "topics": {"events": settings.events_topic, "decisions": settings.decisions_topic},
            "generated_at": iso(int(time.time() * 1000)),
        }
        page = render(report(totals, plan.what_if, plan.book.listed, seconds, range_))
        Path(options.html).write_text(page, encoding="utf-8")
    s = summary(totals, plan.what_if, seconds)
    if options.json:
        print(json.dumps(s), file=out)
    else:
        _print_summary(s, out)
    return 0 if totals.clean() else 2


def _print_summary(s: dict[str, Any], out: TextIO) -> None:
    print(
        f"{s['events']} events, {s['runs']} runs ({s['partial_runs']} partial: start not found), "
        f"{s['seconds']} s ({s['events_per_s']} events/s)",
        file=out,
    )
    print(
        f"decisions: {s['decisions_recorded']} recorded, {s['decisions_replayed']} replayed; "
        f"{s['matched']} matched, {s['mismatched']} mismatched, {s['missing']} missing, "
        f"{s['unexpected']} unexpected, {s['conflicting']} conflicting",
        file=out,
    )
    print("by action: " + ", ".join(f"{k} {v}" for k, v in s["by_action"].items()), file=out)
    if s["by_detector"]:
        print("by detector: " + ", ".join(f"{k} {v}" for k, v in s["by_detector"].items()), file=out)
    if s["what_if"]:
        print("what if: " + ", ".join(f"{k} {s['what_if'][k]}" for k in CHANGES), file=out)
    _print_policy(s, out)
    if s["unknown_configs"]:
        print(
            f"decisions under configs not known here (replayed under the current one): {s['unknown_configs']}; "
            "name them with --worker-config",
            file=out,
        )


def _print_policy(s: dict[str, Any], out: TextIO) -> None:
    """The budgets and shadow lines of the summary, when there is anything to say."""
    b, sh = s["budgets"], s["shadow"]
    if any(b[k] for k in BUDGET_COUNTS):
        print(
            f"budgets: {b['warnings']} warnings, {b['aborts']} aborts ({b['aborts_on_usage']} on usage events), "
            f"{b['calls_after_abort']} calls after an abort; {b['not_enforced']} of them not enforced",
            file=out,
        )
    if sh["decisions"]:
        w = sh["would_stop"]
        print(
            f"not enforced: {sh['decisions']} decisions of {sh['runs']} runs ({sh['held_out_runs']} held out, "
            "the others in shadow mode); they would have been told "
            + ", ".join(f"{k} {v}" for k, v in sh["by_shadow_action"].items()),
            file=out,
        )
        print(
            f"  {w['runs']} runs would have been stopped, {w['ended_by_themselves']} of them ended by themselves; "
            f"after that point: calls median {w['calls_after']['median']}, p90 {w['calls_after']['p90']}; "
            f"tokens median {w['tokens_after']['median']}, p90 {w['tokens_after']['p90']}",
            file=out,
        )


def run_audit(settings: Settings, options: AuditOptions) -> int:
    # An audit holds what it read for a grace period: many container objects alive for
    # seconds, which the cycle collector would walk again at every collection (a large
    # share of an audit's time, benchmarks.audit). Nothing it builds needs prompt
    # collection: what was imported is frozen, and collections come far less often.
    gc.collect()
    gc.freeze()
    thresholds = gc.get_threshold()
    gc.set_threshold(GC_THRESHOLD, *thresholds[1:])
    try:
        return audit(settings, options, sys.stdout)
    except OSError as exc:
        raise LoopwardenError(f"cannot write {exc.filename}: {exc.strerror}") from None
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
