"""The audit's options, parsed once from the command line into typed values: times and
durations in milliseconds (a relative `--from -2h` resolved against one `now`), lists as
tuples. Everything below the command takes these, never the argparse namespace."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from ..kafka.errors import SettingsError
from ..times import parse_duration, parse_from


def iso(ms: int | None) -> str | None:
    """A time in ms since the epoch as ISO-8601 UTC, to the second (None stays None)."""
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


FOREVER = 1 << 62  # ms: beyond any message time


@dataclass(frozen=True)
class Window:
    """The message-time range one audit counts, `[from_ms, to_ms]` (None: open), the
    time its reads start from to find the start of runs under way at `from_ms`, and how
    long after an event its decision may be recorded."""

    from_ms: int | None = None
    to_ms: int | None = None
    scan_start_ms: int | None = None
    grace_ms: int = 300_000

    @property
    def low(self) -> int:
        """The first message time counted (an int either way: compared per event)."""
        return -FOREVER if self.from_ms is None else self.from_ms

    @property
    def high(self) -> int:
        return FOREVER if self.to_ms is None else self.to_ms


WHOLE = Window()  # every record, from the beginning


@dataclass(frozen=True)
class Scope:
    """The runs one audit looks at: all, or those of `runs` / `gateways`; a shard of
    several (`--jobs`) owns only the runs `owns` says, and only the first shard counts
    the decisions it cannot read (every shard reads all of them)."""

    runs: frozenset[str] = frozenset()
    gateways: frozenset[str] = frozenset()
    owns: Callable[[str], bool] | None = None
    first: bool = True


ALL_RUNS = Scope()


@dataclass(frozen=True)
class AuditOptions:
    """`loopwarden audit`'s command line (streams/cli.py), as values."""

    from_ms: int | None
    to_ms: int | None
    lookback_ms: int
    grace_ms: int
    runs: tuple[str, ...] = ()
    gateways: tuple[str, ...] = ()
    what_if: str | None = None  # --config: a config file to replay under as well
    worker_configs: tuple[str, ...] = ()
    jobs: int | None = None
    json: bool = False
    diff: str | None = None
    html: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace, now: float) -> AuditOptions:
        """The namespace of `loopwarden audit`, parsed; SettingsError names a bad value."""
        from_ms = _time_ms(args.start, "--from", now)
        to_ms = _time_ms(args.end, "--to", now)
        lookback_ms = int(parse_duration(args.lookback, "--lookback") * 1000)
        grace_ms = int(parse_duration(args.grace, "--grace") * 1000)
        if from_ms is not None and to_ms is not None and to_ms < from_ms:
            raise SettingsError(f"--to ({iso(to_ms)}) is before --from ({iso(from_ms)})")
        return cls(
            from_ms=from_ms,
            to_ms=to_ms,
            lookback_ms=lookback_ms,
            grace_ms=grace_ms,
            runs=tuple(args.run or ()),
            gateways=tuple(args.gateway or ()),
            what_if=args.config,
            worker_configs=tuple(args.worker_config or ()),
            jobs=args.jobs,
            json=bool(args.json),
            diff=args.diff,
            html=args.html,
        )

    @property
    def scan_start_ms(self) -> int | None:
        return None if self.from_ms is None else self.from_ms - self.lookback_ms

    @property
    def window(self) -> Window:
        return Window(self.from_ms, self.to_ms, self.scan_start_ms, self.grace_ms)

    def scope(self, owns: Callable[[str], bool] | None = None, first: bool = True) -> Scope:
        return Scope(frozenset(self.runs), frozenset(self.gateways), owns, first)
