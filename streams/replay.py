"""`loopwarden replay`: the offline fold over a JSONL file of events."""

from __future__ import annotations

import contextlib
import json
import os
from collections import Counter
from itertools import count, repeat
from operator import attrgetter, methodcaller
from typing import IO, Any, TextIO

from detectors import Decision, DetectionConfig
from detectors.errors import DecodeError, LoopwardenError
from detectors.fleet import FleetRecord, decode_fleet_record
from detectors.ingest import DEFAULT_MAX_EVENT_BYTES, Folded, SetAside, fold, offline_fleet, offline_spend

from .progress import Progress

_ACTION = attrgetter("action")
_DETECTOR = attrgetter("detector")
_strip_newline = methodcaller("rstrip", b"\r\n")


class ReplayReport:
    """What a replay saw: counts by action and detector, and the lines it set aside."""

    def __init__(self) -> None:
        self.events = 0
        self.decisions = 0
        self.bad = 0
        self.stale = 0
        self.actions: Counter[str] = Counter()
        self.detectors: Counter[str] = Counter()

    def as_dict(self) -> dict[str, Any]:
        return {
            "events": self.events,
            "decisions": self.decisions,
            "bad_lines": self.bad,
            "stale_seq": self.stale,
            "actions": dict(sorted(self.actions.items())),
            "detectors": dict(sorted(self.detectors.items())),
        }


def run_replay(
    config: DetectionConfig,
    src: IO[bytes],
    dst: IO[bytes],
    errors: TextIO,
    dead_letter: IO[bytes] | None = None,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    total_bytes: int | None = None,
    fleet_records: tuple[FleetRecord, ...] = (),
) -> ReplayReport:
    """Fold every line of `src` and write the decisions to `dst` as JSONL. Calls are
    judged against `fleet_records` (stop orders) and the breakers and spend caps the
    input reaches (the spend cap records of `fleet_records` lift those)."""
    w = _Written(src, dst, errors, dead_letter, Progress("replaying", total_bytes, unit="bytes"))
    out, decided = w.out, w.decided
    # (line number, no key, the line): a source made of C iterators, as this loop runs
    # once per event. The worker's fold (detectors.ingest): a blank line is an empty
    # message, a bad event there; a file has no keys to check.
    lines = zip(count(1), repeat(None), map(_strip_newline, src))
    lineno = 0
    try:
        fleet, rule = offline_fleet(config, fleet_records)
        folds = fold(
            lines,
            config,
            max_event_bytes=max_event_bytes,
            keyed=False,
            fleet=fleet,
            breakers=rule,
            spend=offline_spend(config),
        )
        for folded in folds:
            lineno = folded.position
            if type(folded) is Folded:  # (`type() is`: cheaper than isinstance, once per event)
                out += folded.encoded
                decided += folded.decisions
            else:
                assert isinstance(folded, SetAside)
                w.set_aside(lineno, folded)
            if not lineno & 255:
                # Counted often, written seldom: decisions held for thousands of events keep
                # their memory from being reused while it is in the caches (benchmarks.replay;
                # benchmarks/RESULTS.md); their encoded bytes cost nothing held.
                w.count()
                if not lineno & 8191:
                    w.flush()
    finally:
        # Whatever happened, what was decided is written out.
        w.flush()
        dst.flush()
        w.report.events = lineno
        w.progress.close()
    return w.report


class _Written:
    """What a replay writes: the decisions (kept and written in chunks), the lines set
    aside (named on `errors`, kept in `dead_letter`), the counts and the progress."""

    def __init__(
        self, src: IO[bytes], dst: IO[bytes], errors: TextIO, dead_letter: IO[bytes] | None, progress: Progress
    ) -> None:
        self.src, self.dst, self.errors, self.dead_letter, self.progress = src, dst, errors, dead_letter, progress
        self.report = ReplayReport()
        self.out: list[bytes] = []  # decisions' JSON not yet written
        self.decided: list[Decision] = []  # their decisions, not yet counted

    def set_aside(self, lineno: int, folded: SetAside) -> None:
        reason = folded.error.reason
        if reason == "stale_seq":
            self.report.stale += 1
        else:
            self.report.bad += 1
        detail = str(folded.error).encode("utf-8", "backslashreplace").decode("utf-8")
        self.errors.write(f"line {lineno}: {reason}: {detail}\n")
        if self.dead_letter is not None:
            line = (folded.value or b"").decode("utf-8", "replace")
            record = {"line": lineno, "error": reason, "detail": detail, "value": line}
            self.dead_letter.write(json.dumps(record, ensure_ascii=False).encode() + b"\n")

    def count(self) -> None:
        """The decisions folded since the last count, into the report's counts."""
        decided, report = self.decided, self.report
        report.decisions += len(decided)
        report.actions.update(map(_ACTION, decided))
        report.detectors.update(filter(None, map(_DETECTOR, decided)))
        decided.clear()

    def flush(self) -> None:
        out = self.out
        if out:
            self.dst.write(b"\n".join(out))
            self.dst.write(b"\n")
            out.clear()
        self.count()
        if self.progress.shown:
            with contextlib.suppress(OSError, ValueError):  # a pipe: no position to show
                self.progress.update(self.src.tell())


def file_size(path: str) -> int | None:
    try:
        return os.path.getsize(path)
    except OSError:
        return None


def read_fleet_file(path: str) -> tuple[FleetRecord, ...]:
    """The fleet records of a JSONL file (`replay --fleet`), in order: stop orders and
    spend cap lifts. A line that is not one is an error naming the line (an order or a
    lift silently skipped would change decisions)."""
    records = []
    try:
        with open(path, "rb") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    records.append(decode_fleet_record(line))
                except DecodeError as exc:
                    raise LoopwardenError(f"{path} line {lineno}: {exc}") from None
    except OSError as exc:
        raise LoopwardenError(f"cannot read fleet records {path}: {exc.strerror}") from None
    return tuple(records)
