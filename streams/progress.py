"""A progress bar on stderr for long work (replay, audit), shown only on a terminal.

rich comes with the worker extra; without it (a plain install) there is no bar."""

from __future__ import annotations

import sys
from typing import Any


class Progress:
    def __init__(self, what: str, total: int | None, unit: str = "events") -> None:
        """`unit` "bytes" shows sizes; anything else shows counts and a rate per second."""
        self._bar: Any = None
        if not total or not sys.stderr.isatty():
            return
        try:
            from rich import progress as p
            from rich.console import Console
            from rich.text import Text
        except ModuleNotFoundError:
            return

        class Rate(p.ProgressColumn):
            """Items per second; blank until rich has two samples (its speed is None)."""

            def render(self, task: Any) -> Text:
                speed = task.speed
                shown = f"{speed:>8.0f}" if speed is not None else " " * 8
                return Text(f"{shown} {unit}/s", style="progress.data.speed")

        if unit == "bytes":
            columns: tuple[Any, ...] = (p.BarColumn(), p.DownloadColumn())
        else:
            columns = (p.BarColumn(), p.MofNCompleteColumn(), Rate())
        self._bar = p.Progress(
            "[progress.description]{task.description}",
            *columns,
            p.TimeRemainingColumn(),
            console=Console(file=sys.stderr),  # stdout may carry the output (--json)
            transient=True,
        )
        self._bar.start()
        self._task = self._bar.add_task(what, total=total)

    @property
    def shown(self) -> bool:
        return self._bar is not None

    def update(self, done: int) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=done)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
