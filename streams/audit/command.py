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
from datetime import UTC, datetime
from multiprocessing import connection as mp_connection
from pathlib import Path
from typing import Any, NamedTuple, TextIO

from detectors import DetectionConfig
from detectors.errors import LoopwardenError

from ..gateway.errors import SettingsError
from ..gateway.partitioner import partition_for
from ..gateway.settings import Settings, read_detection_config
from ..progress import Progress
from ..times import parse_duration, parse_from
from .core import Audit, ConfigBook
from .read import TopicRange, partitions_of

GC_THRESHOLD = 70_000  # allocations between young collections (Python's default: 700)
AUTO_JOBS_FROM = 200_000  # events in the range from which --jobs defaults to one process per core


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _time_ms(text: str | None, option: str, now: float) -> int | None:
    if text is None:
        return None
    t = parse_from(text, now, option)
    if t == "beginning":
        return None
    if t == "now":
        return int(now * 1000)
    return int(float(t) * 1000)


async def _configs(settings: Settings, args: Any) -> ConfigBook:
    """The configs decisions may have been made under: those on the config topic (the
    current one is used for events whose decision names no known config), and those
    given with --worker-config (workers pinned with --config)."""
    current: DetectionConfig | None = None
    texts: list[tuple[DetectionConfig, str, str]] = []
    try:
        from ..admin.config_topic import read_configs
    except ImportError:  # the config topic is not built in this version
        read_configs = None
    if read_configs is not None:
        history = await read_configs(settings)
        for cid, (text, cfg) in history.configs.items():
            texts.append((cfg, f"{settings.config_topic}:{cid[:12]}", text.decode("utf-8", "replace")))
            if cid == history.current:
                current = cfg
    for path in args.worker_config or []:
        cfg = read_detection_config(path, warn=lambda p, w: print(f"warning: {p}: {w}", file=sys.stderr))
        texts.append((cfg, path, Path(path).read_text(errors="replace")))
        if current is None:
            current = cfg
    book = ConfigBook(current if current is not None else DetectionConfig({}))
    for cfg, source, text in texts:
        book.add(cfg, source, text)
    return book


class Plan(NamedTuple):
    """What every shard of one audit shares, fixed before any reads (relative times are
    resolved once)."""

    from_ms: int | None
    to_ms: int | None
    lookback_ms: int
    grace_ms: int
    what_if: DetectionConfig | None
    book: ConfigBook
    partitions: list[int]  # of the events topic: all, or those of --run
    partition_count: int  # of the events topic
    total: int  # events in the range, for the progress bar

    @property
    def scan_start(self) -> int | None:
        return None if self.from_ms is None else self.from_ms - self.lookback_ms


async def _plan(settings: Settings, args: Any) -> Plan:
    now = time.time()
    from_ms = _time_ms(args.start, "--from", now)
    to_ms = _time_ms(args.end, "--to", now)
    lookback_ms = int(parse_duration(args.lookback, "--lookback") * 1000)
    grace_ms = int(parse_duration(args.grace, "--grace") * 1000)
    if from_ms is not None and to_ms is not None and to_ms < from_ms:
        raise SettingsError(f"--to ({_iso(to_ms)}) is before --from ({_iso(from_ms)})")
    what_if = (
        read_detection_config(args.config, warn=lambda p, w: print(f"warning: {p}: {w}", file=sys.stderr))
        if args.config
        else None
    )
    book = await _configs(settings, args)
    scan_start = None if from_ms is None else from_ms - lookback_ms
    events = TopicRange(settings, settings.events_topic)
    try:
        await events.open(scan_start, to_ms)
        count = len(events.ends)
        parts = partitions_of(args.run, count) if args.run else sorted(events.ends)
        total = sum(max(0, events.ends[p] - events.starts[p]) for p in parts)
    finally:
        await events.close()
    return Plan(from_ms, to_ms, lookback_ms, grace_ms, what_if, book, parts, count, total)


async def audit_partitions(
    settings: Settings,
    args: Any,
    plan: Plan,
    partitions: list[int],
    *,
    diff: str | None,
    progress: Callable[[int], None],
    owns: Callable[[str], bool] | None = None,
    first: bool = True,
) -> Audit:
    """Audit these partitions of the events topic against every partition of the
    decisions topic (or those of --gateway); write the diff lines to the file `diff`."""
    grace_ms = plan.grace_ms
    events = TopicRange(settings, settings.events_topic)
    decisions = TopicRange(settings, settings.decisions_topic)
    diff_file = open(diff, "w") if diff else None  # noqa: SIM115 (closed below)
    try:
        gw_parts = partitions_of(args.gateway, settings.partitions) if args.gateway else None
        await events.open(plan.scan_start, plan.to_ms, partitions)
        to = plan.to_ms
        await decisions.open(plan.scan_start, None if to is None else to + grace_ms, gw_parts)
        a = Audit(
            plan.book,
            from_ms=plan.from_ms,
            to_ms=to,
            scan_start_ms=plan.scan_start,
            grace_ms=grace_ms,
            complete=events.complete,
            what_if=plan.what_if,
            runs=args.run or (),
            gateways=args.gateway or (),
            max_event_bytes=settings.max_event_bytes,
            diff=(lambda line: diff_file.write(json.dumps(line, ensure_ascii=False) + "\n")) if diff_file else None,
            timelines=bool(args.html),
            owns=owns,
            count_unreadable=first,
        )
        while not events.finished:
            chunk = await events.chunk()
            if not chunk:
                continue
            # The decisions recorded up to a grace period after these events are read
            # first, so each event is replayed under its recorded decision's config.
            need = max(m.timestamp for m in chunk) + grace_ms
            while not decisions.finished:
                h = decisions.horizon()
                if h is not None and h >= need:
                    break
                for m in await decisions.chunk():
                    a.recorded(m)
            for i in range(0, len(chunk), 2000):
                a.events(chunk[i : i + 2000])
                await asyncio.sleep(0)  # the consumer fetches the next records meanwhile
            h = events.horizon()
            if h is not None:
                a.expire(h)
            progress(events.read)
        while not decisions.finished:
            for m in await decisions.chunk():
                a.recorded(m)
        a.finish()
    finally:
        await events.close()
        await decisions.close()
        if diff_file is not None:
            diff_file.close()
    return a


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


def _jobs(args: Any, plan: Plan) -> int:
    if args.jobs is not None:
        return max(1, min(args.jobs, len(plan.partitions)))
    if plan.total < AUTO_JOBS_FROM:
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, len(plan.partitions)))


def _shard(
    conn: Any, settings: Settings, args: Any, plan: Plan, k: int, jobs: int, read: Any, diff: str | None
) -> None:
    """A child process: audit every `jobs`-th partition from the `k`-th, send the tally."""
    try:
        parts = plan.partitions[k::jobs]
        a = asyncio.run(
            audit_partitions(
                settings,
                args,
                plan,
                parts,
                diff=diff,
                progress=lambda n: read.__setitem__(k, n),
                owns=_Owner(parts, plan.partition_count),
                first=k == 0,
            )
        )
        conn.send(("ok", a.tally()))
    except BaseException as exc:  # sent to the parent, which raises it
        try:
            conn.send(("error", exc))
        except Exception:
            conn.send(("error", LoopwardenError(f"{type(exc).__name__}: {exc}")))
    finally:
        conn.close()


def _sharded(settings: Settings, args: Any, plan: Plan, jobs: int, a: Audit) -> None:
    """Audit in `jobs` child processes, each some of the events topic's partitions
    (and the recorded decisions of their runs), and add up their tallies in `a`."""
    ctx = multiprocessing.get_context("fork")  # the children share the parsed configs
    read = ctx.Array("q", jobs, lock=False)
    diffs = [f"{args.diff}.{k}.part" for k in range(jobs)] if args.diff else [None] * jobs
    children = []
    try:
        for k in range(jobs):
            recv, send = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_shard, args=(send, settings, args, plan, k, jobs, read, diffs[k]), daemon=True)
            p.start()
            send.close()
            children.append((p, recv))
        progress = Progress("auditing", plan.total)
        try:
            results: dict[int, tuple[str, Any]] = {}
            waiting = {recv: k for k, (_, recv) in enumerate(children)}
            while waiting:
                for ready in mp_connection.wait(list(waiting), timeout=0.2):
                    k = waiting.pop(ready)  # type: ignore[call-overload]
                    try:
                        results[k] = ready.recv()  # type: ignore[union-attr]
                    except EOFError:
                        child = children[k][0]
                        child.join()
                        results[k] = ("error", LoopwardenError(f"audit shard {k} died (exit code {child.exitcode})"))
                progress.update(sum(read))
        finally:
            progress.close()
        for k in range(jobs):
            kind, got = results[k]
            if kind == "error":
                raise got
            a.absorb(got)
        if args.diff:
            with open(args.diff, "wb") as out:
                for part in diffs:
                    with open(part, "rb") as f:  # type: ignore[arg-type]
                        shutil.copyfileobj(f, out)
    finally:
        for p, recv in children:
            if p.is_alive():
                p.terminate()
            p.join()
            recv.close()
        for part in diffs:
            if part is not None:
                Path(part).unlink(missing_ok=True)


def audit(settings: Settings, args: Any, out: TextIO) -> int:
    plan = asyncio.run(_plan(settings, args))
    jobs = _jobs(args, plan)
    started = time.perf_counter()
    if jobs > 1:
        a = Audit(  # the shards' counts, added up
            plan.book,
            from_ms=plan.from_ms,
            to_ms=plan.to_ms,
            scan_start_ms=plan.scan_start,
            grace_ms=plan.grace_ms,
            what_if=plan.what_if,
        )
        _sharded(settings, args, plan, jobs, a)
        if a.misrouted:
            print(
                f"note: {a.misrouted} runs' events are not on the partition Kafka's default partitioner "
                "gives their run_id, so the shards could not pair them with their decisions; auditing again "
                "in one process",
                file=sys.stderr,
            )
            jobs = 1
    if jobs == 1:
        progress = Progress("auditing", plan.total)
        try:
            a = asyncio.run(
                audit_partitions(settings, args, plan, plan.partitions, diff=args.diff, progress=progress.update)
            )
        finally:
            progress.close()
    seconds = time.perf_counter() - started
    summary = a.summary(seconds)
    if args.html:
        from .html import render

        report = a.report(
            seconds,
            {
                "from": _iso(plan.from_ms),
                "to": _iso(plan.to_ms),
                "lookback_s": plan.lookback_ms / 1000,
                "topics": {"events": settings.events_topic, "decisions": settings.decisions_topic},
                "generated_at": _iso(int(time.time() * 1000)),
            },
        )
        Path(args.html).write_text(render(report), encoding="utf-8")
    if args.json:
        print(json.dumps(summary), file=out)
    else:
        _print_summary(summary, out)
    return 0 if a.clean() else 2


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
        w = s["what_if"]
        print(
            "what if: "
            + ", ".join(
                f"{k} {w[k]}"
                for k in (
                    "newly_warned",
                    "newly_blocked",
                    "no_longer_warned",
                    "no_longer_blocked",
                    "aborts_gained",
                    "aborts_lost",
                )
            ),
            file=out,
        )
    if s["unknown_configs"]:
        print(
            f"decisions under configs not known here (replayed under the current one): {s['unknown_configs']}; "
            "name them with --worker-config",
            file=out,
        )


def run_audit(settings: Settings, args: Any) -> int:
    # An audit holds what it read for a grace period: many container objects alive for
    # seconds, which the cycle collector would walk again at every collection (about a
    # quarter of a 1M-event audit's time). Nothing it builds needs prompt collection:
    # what was imported is frozen, and collections come 100x less often.
    gc.collect()
    gc.freeze()
    thresholds = gc.get_threshold()
    gc.set_threshold(GC_THRESHOLD, *thresholds[1:])
    try:
        return audit(settings, args, sys.stdout)
    except OSError as exc:
        raise LoopwardenError(f"cannot write {exc.filename}: {exc.strerror}") from None
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
