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

import numpy as np

from simulator.engine.decode_clock import DecodeClock, triangles
from simulator.engine.request import SimRequest


class JumpSegment:
    """Steps ``[first, end)`` of a jump, run by one batch.

    At step ``s`` of the segment ``#full token = full_base + page * (pages opened in [first, s])``
    and ``#swa token = swa_base + page * (opened - freed by decode eviction in [first, s])``.
    The log reads usage after a step's results are processed, so the segment's last step also
    counts the releases of the requests that finish there: ``full_released`` / ``swa_released``
    (what those releases changed the counts by, <= 0). A plain class, not a dataclass, so that
    the compiled build makes it a typed ``cdef class`` (decode_jump.pxd).
    """

    __slots__ = ("first", "end", "batch", "full_base", "swa_base", "full_released", "swa_released")

    def __init__(
        self,
        first: int,
        end: int,
        batch: list[SimRequest],
        full_base: int,
        swa_base: int,
        full_released: int = 0,
        swa_released: int = 0,
    ) -> None:
        self.first, self.end, self.batch = first, end, batch
        self.full_base, self.swa_base = full_base, swa_base
        self.full_released, self.swa_released = full_released, swa_released

    def __repr__(self) -> str:
        return (
            f"JumpSegment(first={self.first}, end={self.end}, batch={self.batch!r}, "
            f"full_base={self.full_base}, swa_base={self.swa_base}, "
            f"full_released={self.full_released}, swa_released={self.swa_released})"
        )


class DecodeJump:
    """``steps`` consecutive decode steps, reported at once (``ServerObserver.on_decode_jump``).

    ``opens`` holds one entry per page opened, at the step that opens it; ``swa_frees`` the
    ``(step, pages)`` decode-time SWA eviction frees before that step's allocation. ``queue`` is
    ``#queue-req`` at the last step (requests that arrived during it); earlier steps saw none.
    ``clock`` is a :class:`DecodeClock` or anything with its ``pieces`` and ``ends``.
    """

    __slots__ = ("clock", "steps", "page_size", "opens", "swa_frees", "segments", "queue")

    def __init__(
        self,
        clock: DecodeClock,
        steps: int,
        page_size: int,
        opens: list[int],
        swa_frees: list[tuple[int, int]],
        segments: list[JumpSegment],
        queue: int,
    ) -> None:
        self.clock, self.steps, self.page_size = clock, steps, page_size
        self.opens, self.swa_frees, self.segments, self.queue = opens, swa_frees, segments, queue

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
    """The per-step arrays of ``jumps``, concatenated in order, in one vectorised pass."""
    cols = JumpColumns()
    for jump in jumps:
        cols.add(jump)
    return cols.arrays()


class JumpColumns:
    """Jumps flattened into columns of numbers as they arrive, turned into step arrays at once.

    A recorder that kept the :class:`DecodeJump` objects would keep tens of thousands of small
    container objects alive, and every full garbage collection walks them all; numbers in a few
    flat lists cost the collector nothing. Step times repeat :meth:`DecodeClock.ends`'s
    operations element for element (``tri1 * a``, plus ``tri2 * b``, plus ``E``), so they are
    the same floats.
    """

    def __init__(self) -> None:
        self.steps = 0  # steps added so far
        self._pieces: list[float] = []  # per piece: first step, steps, E, a, b
        self._opens: list[int] = []  # the step of each page opened
        self._frees: list[int] = []  # per decode-eviction free: step, SWA pages
        self._segs: list[int] = []  # per segment: first step, steps, full_base, swa_base, page
        self._released: list[int] = []  # per segment ending in releases: last step, full, swa

    def add(self, jump: DecodeJump) -> None:
        # one append per number: no tuple is built to extend a column with
        g, m = self.steps, jump.steps
        pieces = self._pieces
        for start, length, e, alpha, beta in jump.clock.pieces:
            if start >= m:  # priced, but the jump was cut short before it
                break
            pieces.append(g + start)
            pieces.append(length if length < m - start else m - start)  # min(length, m - start)
            pieces.append(e)
            pieces.append(alpha)
            pieces.append(beta)
        opens = self._opens
        for s in jump.opens:
            opens.append(g + s)
        frees = self._frees
        for s, pages in jump.swa_frees:
            frees.append(g + s)
            frees.append(pages)
        segs, p = self._segs, jump.page_size
        released = self._released
        for seg in jump.segments:
            segs.append(g + seg.first)
            segs.append(seg.end - seg.first)
            segs.append(seg.full_base)
            segs.append(seg.swa_base)
            segs.append(p)
            if seg.full_released or seg.swa_released:
                released.append(g + seg.end - 1)
                released.append(seg.full_released)
                released.append(seg.swa_released)
        self.steps = g + m

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(step end times, ``#full token``, ``#swa token``) of every step added, in order."""
        full, swa = self.tokens()
        return self.times(), full, swa

    def times(self) -> np.ndarray:
        """The end time of every step added, in order (a frame's column only: the summary
        reads the token counts, so a recorder builds this on demand)."""
        total = self.steps
        if total == 0:
            return np.zeros(0)
        pieces = np.array(self._pieces, dtype=np.float64).reshape(-1, 5)
        lens = pieces[:, 1].astype(np.int64)
        local = np.arange(total, dtype=np.int64) - np.repeat(pieces[:, 0].astype(np.int64), lens)
        tri1, tri2 = triangles(int(lens.max()))
        times = tri1[local] * np.repeat(pieces[:, 3], lens)
        times += tri2[local] * np.repeat(pieces[:, 4], lens)
        times += np.repeat(pieces[:, 2], lens)
        return times

    def tokens(self) -> tuple[np.ndarray, np.ndarray]:
        """(``#full token``, ``#swa token``) of every step added, in order.

        Within a segment ``#full token = page * opened + (full_base - page * opened_before)``
        (``opened``: pages opened up to the step, over the whole run), likewise ``#swa token``
        with ``opened - freed``: one running sum each of per-step increments plus, at each
        segment's first step, the change of that per-segment constant. Integer sums in int64
        (wrapping alike in any order), so the counts equal :meth:`_tokens_general`'s; that one
        serves the cases it needs (segments not back to back, mixed page sizes)."""
        total = self.steps
        if total == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        segs = _int64s(self._segs).reshape(-1, 5)
        first, slen, page = segs[:, 0], segs[:, 1], segs[:, 4]
        p = int(page[0])
        starts = np.cumsum(slen) - slen  # where np.repeat puts each segment's first step
        back_to_back = slen.sum() == total and np.all(slen > 0) and np.array_equal(first, starts)
        if not (back_to_back and np.all(page == p)):
            return self._tokens_general()
        full = np.bincount(_int64s(self._opens), minlength=total)  # pages opened at each step
        if len(full) != total:
            return self._tokens_general()
        per_seg = np.add.reduceat(full, first)
        opened_before = np.cumsum(per_seg) - per_seg  # pages opened before each segment
        freed_before = np.zeros(len(first), dtype=np.int64)
        full *= p
        swa = full.copy()
        if self._frees:  # SWA pages freed at each step, and before each segment
            frees = _int64s(self._frees).reshape(-1, 2)
            np.subtract.at(swa, frees[:, 0], frees[:, 1] * p)
            per_seg = np.zeros(len(first), dtype=np.int64)
            np.add.at(per_seg, np.searchsorted(first, frees[:, 0], side="right") - 1, frees[:, 1])
            freed_before = np.cumsum(per_seg) - per_seg
        base_full = segs[:, 2] - p * opened_before
        base_swa = segs[:, 3] - p * (opened_before - freed_before)
        full[first] += np.diff(base_full, prepend=0)
        swa[first] += np.diff(base_swa, prepend=0)
        np.cumsum(full, out=full)
        np.cumsum(swa, out=swa)
        self._add_released(full, swa)
        return full, swa

    def _add_released(self, full: np.ndarray, swa: np.ndarray) -> None:
        """A segment's last step is read after its finishers' releases."""
        if self._released:
            rel = _int64s(self._released).reshape(-1, 3)
            full[rel[:, 0]] += rel[:, 1]
            swa[rel[:, 0]] += rel[:, 2]

    def _tokens_general(self) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`tokens` for any segments: the per-step arrays repeated segment by segment."""
        total = self.steps
        if total == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        # #full / #swa token: segment base + pages opened (and freed) since the segment began
        opened = np.bincount(np.array(self._opens, dtype=np.int64), minlength=total).cumsum()
        freed = np.zeros(total, dtype=np.int64)
        if self._frees:
            frees = np.array(self._frees, dtype=np.int64).reshape(-1, 2)
            np.add.at(freed, frees[:, 0], frees[:, 1])
        freed = freed.cumsum()
        segs = np.array(self._segs, dtype=np.int64).reshape(-1, 5)
        first, slen = segs[:, 0], segs[:, 1]
        before = first - 1  # the running sums just before each segment's first step (0 at the start)
        opened_before = np.where(before >= 0, opened[np.maximum(before, 0)], 0)
        freed_before = np.where(before >= 0, freed[np.maximum(before, 0)], 0)
        page = np.repeat(segs[:, 4], slen)
        grown = page * (opened - np.repeat(opened_before, slen))
        full = np.repeat(segs[:, 2], slen) + grown
        swa = np.repeat(segs[:, 3], slen) + grown - page * (freed - np.repeat(freed_before, slen))
        self._add_released(full, swa)
        return full, swa


def _int64s(values: list[int]) -> np.ndarray:
    """A list of Python ints as an int64 array (``np.fromiter`` with the count: no type
    discovery pass over the list)."""
    return np.fromiter(values, dtype=np.int64, count=len(values))
