"""`loopwarden audit`: replay the topics and compare with what was decided."""

from __future__ import annotations

import asyncio
import gc
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from detectors import DetectionConfig
from detectors.errors import LoopwardenError

from ..errors import SettingsError
from ..progress import Progress
from ..settings import Settings, read_detection_config
from ..times import parse_duration, parse_from
from .core import Audit, ConfigBook
from .read import TopicRange, partitions_of

GC_THRESHOLD = 70_000  # allocations between young collections (Python's default: 700)


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
        from ..configs import read_configs
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


async def audit(settings: Settings, args: Any, out: TextIO) -> int:
    now = time.time()
    from_ms = _time_ms(args.start, "--from", now)
    to_ms = _time_ms(args.end, "--to", now)
    lookback_ms = int(parse_duration(args.lookback, "--lookback") * 1000)
    grace_ms = int(parse_duration(args.grace, "--grace") * 1000)
    if from_ms is not None and to_ms is not None and to_ms < from_ms:
        raise SettingsError(f"--to ({_iso(to_ms)}) is before --from ({_iso(from_ms)})")
    scan_start = None if from_ms is None else from_ms - lookback_ms
    what_if = (
        read_detection_config(args.config, warn=lambda p, w: print(f"warning: {p}: {w}", file=sys.stderr))
        if args.config
        else None
    )
    book = await _configs(settings, args)
    diff_file = open(args.diff, "w") if args.diff else None  # noqa: SIM115 (closed below)
    events = TopicRange(settings, settings.events_topic)
    decisions = TopicRange(settings, settings.decisions_topic)
    started = time.perf_counter()
    progress = None
    try:
        run_parts = partitions_of(args.run, settings.partitions) if args.run else None
        gw_parts = partitions_of(args.gateway, settings.partitions) if args.gateway else None
        await events.open(scan_start, to_ms, run_parts)
        await decisions.open(scan_start, None if to_ms is None else to_ms + grace_ms, gw_parts)
        a = Audit(
            book,
            from_ms=from_ms,
            to_ms=to_ms,
            scan_start_ms=scan_start,
            grace_ms=grace_ms,
            complete=events.complete,
            what_if=what_if,
            runs=args.run or (),
            gateways=args.gateway or (),
            max_event_bytes=settings.max_event_bytes,
            diff=(lambda line: diff_file.write(json.dumps(line, ensure_ascii=False) + "\n")) if diff_file else None,
            timelines=bool(args.html),
        )
        progress = Progress("auditing", events.total)
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
            progress.update(events.read)
        while not decisions.finished:
            for m in await decisions.chunk():
                a.recorded(m)
        a.finish()
    finally:
        if progress is not None:
            progress.close()
        await events.close()
        await decisions.close()
        if diff_file is not None:
            diff_file.close()
    seconds = time.perf_counter() - started
    summary = a.summary(seconds)
    if args.html:
        from .html import render

        report = a.report(
            seconds,
            {
                "from": _iso(from_ms),
                "to": _iso(to_ms),
                "lookback_s": lookback_ms / 1000,
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
        return asyncio.run(audit(settings, args, sys.stdout))
    except OSError as exc:
        raise LoopwardenError(f"cannot write {exc.filename}: {exc.strerror}") from None
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
