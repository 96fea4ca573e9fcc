"""The sweep's progress display: runs done, rate and time left.

On a terminal, a transient rich bar on stderr; elsewhere (a log, CI) a plain line at most every
``interval_s`` seconds and one at the end. Runs found in the store count as done from the start
but not in the rate, which is that of the runs this sweep executes.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO


def _fmt_s(seconds: float) -> str:
    if seconds != seconds or seconds == float("inf"):
        return "?"
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class SweepProgress:
    """Context manager; call :meth:`advance` after each finished run."""

    def __init__(
        self,
        total: int,
        done: int = 0,
        *,
        enabled: bool = True,
        stream: TextIO | None = None,
        interval_s: float = 10.0,
    ) -> None:
        self.total, self.done, self.new = total, done, 0
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.interval_s = interval_s
        self._start = self._last = 0.0
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> SweepProgress:
        self._start = self._last = time.monotonic()
        return self

    def _start_bar(self) -> None:
        try:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
        except ImportError:  # rich is a dependency, but the plain line does without it
            return
        self._bar = Progress(
            TextColumn("sweep"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"),
            console=Console(file=self.stream),
            transient=True,
        )
        self._bar.start()
        self._task = self._bar.add_task("sweep", total=self.total, completed=self.done, status=self.status())

    def status(self) -> str:
        """``1.3 runs/s, 46s left`` (rate of this sweep's own runs)."""
        elapsed = time.monotonic() - self._start
        rate = self.new / elapsed if elapsed > 0 and self.new else float("nan")
        left = (self.total - self.done) / rate if rate == rate and rate > 0 else float("nan")
        rate_text = "?" if rate != rate else f"{rate:.2f}"
        return f"{rate_text} runs/s, {_fmt_s(left)} left, {_fmt_s(elapsed)} elapsed"

    def advance(self) -> None:
        self.done += 1
        self.new += 1
        if not self.enabled:
            return
        if self._bar is None and self.new == 1 and self.stream.isatty():
            # Started at the first result, not before: rich's refresh thread must not be
            # running while a process pool forks its workers.
            self._start_bar()
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done, status=self.status())
        elif time.monotonic() - self._last >= self.interval_s:
            self._line()

    def _line(self) -> None:
        self._last = time.monotonic()
        self.stream.write(f"kvplan sweep: {self.done}/{self.total} runs, {self.status()}\n")
        self.stream.flush()

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.stop()
        elif self.enabled and self.new:
            self._line()
