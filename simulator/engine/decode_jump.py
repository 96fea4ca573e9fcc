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
from itertools import chain

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
    # --- step end times, from the clocks' pieces (those a jump cut short are cut here too)
    n_pieces = [len(j.clock.pieces) for j in jumps]
    flat = chain.from_iterable(pc for j in jumps for pc in j.clock.pieces)
    pieces = np.fromiter(flat, dtype=np.float64, count=5 * sum(n_pieces)).reshape(-1, 5)
    owner = np.repeat(np.arange(len(jumps)), n_pieces)
    start = pieces[:, 0].astype(np.int64)
    keep = start < steps[owner]
    owner, start, pieces = owner[keep], start[keep], pieces[keep]
    lens = np.minimum(pieces[:, 1].astype(np.int64), steps[owner] - start)
    local = np.arange(total, dtype=np.int64) - np.repeat(offsets[owner] + start, lens)
    tri1, tri2 = triangles(int(lens.max()))
    times = tri1[local] * np.repeat(pieces[:, 3], lens)
    times += tri2[local] * np.repeat(pieces[:, 4], lens)
    times += np.repeat(pieces[:, 2], lens)
    # --- #full / #swa token: segment base + pages opened (and freed) since the segment began
    n_opens = [len(j.opens) for j in jumps]
    opens = np.fromiter(chain.from_iterable(j.opens for j in jumps), dtype=np.int64, count=sum(n_opens))
    opened = np.bincount(opens + np.repeat(offsets, n_opens), minlength=total).cumsum()
    freed = np.zeros(total, dtype=np.int64)
    n_frees = [len(j.swa_frees) for j in jumps]
    if any(n_frees):
        frees = np.array([f for j in jumps for f in j.swa_frees], dtype=np.int64).reshape(-1, 2)
        np.add.at(freed, frees[:, 0] + np.repeat(offsets, n_frees), frees[:, 1])
    freed = freed.cumsum()
    n_segs = [len(j.segments) for j in jumps]
    flat = chain.from_iterable((s.first, s.end, s.full_base, s.swa_base) for j in jumps for s in j.segments)
    segs = np.fromiter(flat, dtype=np.int64, count=4 * sum(n_segs)).reshape(-1, 4)
    first = segs[:, 0] + np.repeat(offsets, n_segs)
    slen = segs[:, 1] - segs[:, 0]
    before = first - 1  # the running sums just before each segment's first step (0 at the start)
    opened_before = np.where(before >= 0, opened[np.maximum(before, 0)], 0)
    freed_before = np.where(before >= 0, freed[np.maximum(before, 0)], 0)
    page = np.repeat(np.repeat(np.array([j.page_size for j in jumps], dtype=np.int64), n_segs), slen)
    grown = page * (opened - np.repeat(opened_before, slen))
    full = np.repeat(segs[:, 2], slen) + grown
    swa = np.repeat(segs[:, 3], slen) + grown - page * (freed - np.repeat(freed_before, slen))
    return times, full, swa
