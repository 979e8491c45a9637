"""`loopwarden replay`: the offline fold over a JSONL file of events."""

from __future__ import annotations

import json
import os
from collections import Counter
from typing import BinaryIO, TextIO

from detectors import DetectionConfig
from detectors.ingest import DEFAULT_MAX_EVENT_BYTES, SetAside, fold

from .progress import Progress


class ReplayReport:
    """What a replay saw: counts by action and detector, and the lines it set aside."""

    def __init__(self) -> None:
        self.events = 0
        self.decisions = 0
        self.bad = 0
        self.stale = 0
        self.actions: Counter[str] = Counter()
        self.detectors: Counter[str] = Counter()

    def as_dict(self) -> dict:
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
    src: BinaryIO,
    dst: BinaryIO,
    errors: TextIO,
    dead_letter: BinaryIO | None = None,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    total_bytes: int | None = None,
) -> ReplayReport:
    """Fold every line of `src` and write the decisions to `dst` as JSONL."""
    report = ReplayReport()
    progress = Progress("replaying", total_bytes, unit="bytes")
    out: list[bytes] = []
    seen = 0

    def set_aside(lineno: int, line: bytes, reason: str, detail: str) -> None:
        detail = detail.encode("utf-8", "backslashreplace").decode("utf-8")
        errors.write(f"line {lineno}: {reason}: {detail}\n")
        if dead_letter is not None:
            record = {"line": lineno, "error": reason, "detail": detail, "value": line.decode("utf-8", "replace")}
            dead_letter.write(json.dumps(record, ensure_ascii=False).encode() + b"\n")

    events = decisions_n = 0
    actions = report.actions
    detectors = report.detectors
    write = dst.write

    def lines():
        nonlocal seen, events
        for lineno, line in enumerate(src, 1):
            seen += len(line)
            if not lineno & 8191:
                progress.update(seen)
                write(b"".join(out))
                out.clear()
            events += 1
            yield lineno, None, line.rstrip(b"\r\n")

    try:
        # The worker's fold (detectors.ingest): a blank line is an empty message, a bad
        # event there; a file has no keys to check.
        for folded in fold(lines(), config, max_event_bytes=max_event_bytes, keyed=False):
            if type(folded) is SetAside:
                reason = folded.error.reason
                if reason == "stale_seq":
                    report.stale += 1
                else:
                    report.bad += 1
                set_aside(folded.position, folded.value or b"", reason, str(folded.error))
                continue
            for d, raw in zip(folded.decisions, folded.encoded, strict=True):
                out.append(raw)
                out.append(b"\n")
                decisions_n += 1
                actions[d.action] += 1
                if d.detector:
                    detectors[d.detector] += 1
    finally:
        # Whatever happened, what was decided is written out.
        write(b"".join(out))
        dst.flush()
        report.events = events
        report.decisions = decisions_n
        progress.close()
    return report


def file_size(path: str) -> int | None:
    try:
        return os.path.getsize(path)
    except OSError:
        return None
