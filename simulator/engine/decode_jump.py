"""A fast-forwarded decode jump in closed form, and the per-step arrays it stands for.

The server reports a jump whose memory operations it applied in bulk as one
:class:`DecodeJump`: the step clock (linear pieces), the steps at which pages open, the SWA
pages decode eviction frees, and per batch segment the ``#full token`` / ``#swa token`` at its
first step. Building the per-step arrays of one jump takes a dozen small numpy calls, about as
much as the jump's whole scheduling work; an observer that keeps the records can build the
arrays of every jump of a run with :func:`materialize` in one vectorised pass instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from simulator.cost_model import DecodeClock, triangles
from simulator.engine.request import SimRequest


@dataclass(slots=True)
class JumpSegment:
    """Steps ``[first, end)`` of a jump, run by one batch.

    At step ``s`` of the segment ``#full token = full_base + page * (pages opened in [first, s])``
    and ``#swa token = swa_base + page * (opened - freed by decode eviction in [first, s])``.
    """

    first: int
    end: int
    batch: list[SimRequest]
    full_base: int
    swa_base: int


@dataclass(slots=True)
class DecodeJump:
    """``steps`` consecutive decode steps, reported at once (``ServerObserver.on_decode_jump``).

    ``opens`` holds one entry per page opened, at the step that opens it; ``swa_frees`` the
    ``(step, pages)`` decode-time SWA eviction frees before that step's allocation. ``queue`` is
    ``#queue-req`` at the last step (requests that arrived during it); earlier steps saw none.
    """

    clock: DecodeClock
    steps: int
    page_size: int
    opens: list[int]
    swa_frees: list[tuple[int, int]]
    segments: list[JumpSegment]
    queue: int

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(step end times, ``#full token``, ``#swa token``), one entry per step."""
        return materialize([self])

    def step_calls(self) -> Iterator[tuple[np.ndarray, list[SimRequest], np.ndarray, np.ndarray, int]]:
        """The jump as ``on_decode_steps`` arguments: one call per segment, the last step apart
        when it saw a queue."""
        ends, full, swa = self.arrays()
        for seg in self.segments:
            a, b = seg.first, seg.end
            if b == self.steps and self.queue:
                if b - a > 1:
                    yield ends[a : b - 1], seg.batch, full[a : b - 1], swa[a : b - 1], 0
                yield ends[b - 1 : b], seg.batch, full[b - 1 : b], swa[b - 1 : b], self.queue
            else:
                yield ends[a:b], seg.batch, full[a:b], swa[a:b], 0


def materialize(jumps: list[DecodeJump]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The per-step arrays of ``jumps``, concatenated in order, in one vectorised pass.

    Step times repeat :meth:`DecodeClock.ends`'s operations element for element (``tri1 * a``,
    plus ``tri2 * b``, plus ``E``), so they are the same floats.
    """
    steps = np.array([j.steps for j in jumps], dtype=np.int64)
    total = int(steps.sum())
    if total == 0:
        return np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    offsets = np.cumsum(steps) - steps
    # --- step end times, from the clocks' pieces
    pos: list[int] = []
    lengths: list[int] = []
    coeff: list[tuple[float, float, float]] = []
    opens: list[int] = []
    free_pos: list[int] = []
    free_pages: list[int] = []
    seg_first: list[int] = []
    seg_len: list[int] = []
    seg_base: list[tuple[int, int, int]] = []
    for jump, g in zip(jumps, offsets.tolist(), strict=True):
        m = jump.steps
        for start, length, e, alpha, beta in jump.clock.pieces:
            if start >= m:
                break
            pos.append(g + start)
            lengths.append(min(length, m - start))
            coeff.append((e, alpha, beta))
        opens.extend([g + s for s in jump.opens])
        for s, pages in jump.swa_frees:
            free_pos.append(g + s)
            free_pages.append(pages)
        p = jump.page_size
        for seg in jump.segments:
            seg_first.append(g + seg.first)
            seg_len.append(seg.end - seg.first)
            seg_base.append((seg.full_base, seg.swa_base, p))
    lens = np.array(lengths, dtype=np.int64)
    c = np.array(coeff, dtype=np.float64)
    local = np.arange(total, dtype=np.int64) - np.repeat(np.array(pos, dtype=np.int64), lens)
    tri1, tri2 = triangles(int(lens.max()))
    times = tri1[local] * np.repeat(c[:, 1], lens)
    times += tri2[local] * np.repeat(c[:, 2], lens)
    times += np.repeat(c[:, 0], lens)
    # --- #full / #swa token: segment base + pages opened (and freed) since the segment began
    opened = np.bincount(np.array(opens, dtype=np.int64), minlength=total).cumsum()
    freed = np.zeros(total, dtype=np.int64)
    if free_pos:
        np.add.at(freed, np.array(free_pos, dtype=np.int64), np.array(free_pages, dtype=np.int64))
    freed = freed.cumsum()
    first = np.array(seg_first, dtype=np.int64)
    slen = np.array(seg_len, dtype=np.int64)
    base = np.array(seg_base, dtype=np.int64)
    before = first - 1  # the running sums just before each segment's first step (0 at the start)
    opened_before = np.where(before >= 0, opened[np.maximum(before, 0)], 0)
    freed_before = np.where(before >= 0, freed[np.maximum(before, 0)], 0)
    page = np.repeat(base[:, 2], slen)
    grown = page * (opened - np.repeat(opened_before, slen))
    full = np.repeat(base[:, 0], slen) + grown
    swa = np.repeat(base[:, 1], slen) + grown - page * (freed - np.repeat(freed_before, slen))
    return times, full, swa
