"""Per-step timing of the replay's memory operations: CUDA events on a GPU, the wall clock on CPU.

On CUDA each timed span records an event pair on the current stream; the times are read (one
synchronize) every ``sync_every`` steps and at the end, so timing adds no per-step sync. The
transfer kernels order their side streams against the current one, so a span covers them.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

import torch

__all__ = ["StepTimer"]


class StepTimer:
    """Adds each span's seconds to ``getattr(row, field)`` (and appends them to the list
    ``getattr(row, each)`` where ``each`` is named)."""

    def __init__(self, device: str) -> None:
        self.cuda = str(device).startswith("cuda")
        self._pending: list[tuple[object, str, str | None, torch.cuda.Event, torch.cuda.Event]] = []

    @contextmanager
    def span(self, row: object, field: str, each: str | None = None):
        if self.cuda:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            yield
            end.record()
            self._pending.append((row, field, each, start, end))
        else:
            t0 = time.perf_counter()
            yield
            _add(row, field, each, time.perf_counter() - t0)

    def harvest(self) -> None:
        """Wait for the recorded spans and add their times to their rows."""
        if not self._pending:
            return
        self._pending[-1][4].synchronize()
        for row, field, each, start, end in self._pending:
            _add(row, field, each, start.elapsed_time(end) / 1e3)
        self._pending.clear()


def _add(row: object, field: str, each: str | None, seconds: float) -> None:
    setattr(row, field, getattr(row, field) + seconds)
    if each is not None:
        getattr(row, each).append(seconds)
