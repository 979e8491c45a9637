"""The one interface every detector has, and the facts it judges.

A detector is a small stateless unit, like a window aggregator: a `name` (the decision's
`detector` value), an optional `switch` (its key under `tools.loopDetection.detectors`),
the event it judges (`judges`), an `evaluate` that turns the facts of that event into a
`Verdict` or None, and the `message` a decision of it carries. The facts are computed
once per event by the engine (`scan_history`, `GuardScan`) and shared by every detector,
so adding one costs nothing to the others.
"""

from __future__ import annotations

from typing import ClassVar, Generic, Literal, NamedTuple, Protocol, TypeVar

from ..state import GuardEntry, HistoryEntry


class Thresholds(Protocol):
    """What a detector reads of its agent's effective config (`config.AgentConfig` has
    these): the thresholds of semantics.md section 1, the guard's window, and the
    settings of section 12's rules (`loopwarden.rules`). A protocol,
    so the rules need nothing of the config module, which builds on them."""

    @property
    def warning(self) -> int: ...
    @property
    def critical(self) -> int: ...
    @property
    def unknown_tool(self) -> int: ...
    @property
    def global_breaker(self) -> int: ...
    @property
    def window(self) -> int: ...
    @property
    def progress_aware(self) -> bool: ...
    @property
    def consecutive(self) -> int: ...
    @property
    def max_period(self) -> int: ...
    @property
    def laps(self) -> int: ...


class CallScan:
    """What the rolling detectors read about a call about to run, from one pass over the
    run's history (semantics.md section 4): the unknown-tool streak, the repeat count and
    the no-progress streak of this exact call, and whether its signature is in the
    history at all (`seen`)."""

    __slots__ = (
        "history",
        "known_poll",
        "latest",
        "missing",
        "no_progress",
        "repeats",
        "seen",
        "sig",
        "tool",
        "unknown_streak",
    )

    def __init__(
        self, history: tuple[HistoryEntry, ...], tool: str, sig: str, known_poll: bool, new: bool = False
    ) -> None:
        """`new`: the caller knows the signature is nowhere in the history (from the
        run's history keys), so the repeat scan is skipped."""
        self.history = history
        self.tool = tool
        self.sig = sig
        self.known_poll = known_poll
        # Unknown-tool streak: contiguous newest-first entries of this tool naming one missing tool.
        streak = 0
        missing: str | None = None
        for r in reversed(history):
            u = r.unknown_tool_name
            if not u or r.tool_name != tool or (missing is not None and u != missing):
                break
            missing = u
            streak += 1
        self.unknown_streak = streak
        self.missing = missing
        if new:
            self.seen = False
            self.repeats = self.no_progress = 0
            self.latest = None
            return
        # Repeat count and no-progress streak over the entries of this exact call.
        seen = False
        repeats = 0
        no_progress = 0
        latest: str | None = None
        counting = True
        for r in reversed(history):
            if r.args_hash != sig:
                continue
            seen = True
            if r.tool_name != tool:
                continue
            repeats += 1
            if counting:
                rh = r.result_hash
                if not rh:
                    continue
                if latest is None:
                    latest = rh
                    no_progress = 1
                elif rh == latest:
                    no_progress += 1
                else:
                    counting = False
        self.seen = seen
        self.repeats = repeats
        self.no_progress = no_progress
        self.latest = latest


class GuardScan(NamedTuple):
    """What the post-compaction guard reads about a result: the armed window with this
    outcome appended, and how many of its entries are this outcome."""

    window: tuple[GuardEntry, ...]
    entry: GuardEntry
    same: int


class Verdict:
    """A detector that fired. `level` "critical" blocks a call (aborts on a result);
    "warning" warns, subject to warning suppression."""

    __slots__ = ("count", "detector", "level", "paired_tool_name", "warning_key")

    def __init__(
        self,
        level: Literal["warning", "critical"],
        detector: Detector[CallScan] | Detector[GuardScan],
        count: int,
        warning_key: str | None,
        paired_tool_name: str | None = None,
    ) -> None:
        self.level = level
        self.detector = detector
        self.count = count
        self.warning_key = warning_key
        self.paired_tool_name = paired_tool_name

    def __repr__(self) -> str:
        return (
            f"Verdict({self.level!r}, {self.detector.name!r}, {self.count}, {self.warning_key!r}, "
            f"{self.paired_tool_name!r})"
        )


ScanT = TypeVar("ScanT", CallScan, GuardScan)


class Detector(Generic[ScanT]):
    """The interface of a detector; a subclass sets the class attributes and both methods."""

    name: ClassVar[str]
    """The decision's `detector` value."""
    switch: ClassVar[str | None] = None
    """Its switch under `tools.loopDetection.detectors`; None: on whenever its kind is."""
    rule: ClassVar[str | None] = None
    """Its entry under `loopwarden.rules` (semantics.md section 12), whose `enabled` must
    be true for it to run; None: not one of those rules."""
    judges: ClassVar[Literal["tool_call", "tool_result"]]
    """"tool_call": a rolling detector (a CallScan; on only when `enabled` is true);
    "tool_result": the post-compaction guard (a GuardScan; on unless `enabled` is false)."""
    repeats_only: ClassVar[bool] = False
    """True: it can fire only on a call whose signature is already in the run's history,
    so the engine does not ask it about a new call (most calls)."""
    streak_only: ClassVar[bool] = False
    """True: it can fire only when the run's newest history entry names a missing tool
    (an unknown-tool streak of at least one), so the engine does not ask it about a new
    call after any other entry."""

    def evaluate(self, scan: ScanT, cfg: Thresholds) -> Verdict | None:
        raise NotImplementedError

    def message(self, action: str, tool: str, count: int | None, paired: str | None) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<detector {self.name}>"
