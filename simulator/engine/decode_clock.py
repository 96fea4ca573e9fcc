"""The decode-jump clock: end times of a fast-forwarded run of decode steps as linear pieces.

The engine's fast-forward prices up to a thousand decode steps at once with it; the step-time
coefficients come from :meth:`simulator.cost.CostModel.decode_terms`.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["DecodeClock", "segment_sums", "segment_sums_from", "triangles"]


class DecodeClock:
    """End times of the consecutive decode steps of one jump, held as linear pieces.

    ``segments`` are ``(steps, C, bs, x0, y0, g)``: ``steps`` steps of one batch whose step
    ``t`` costs ``C + max(fa*x, fb*(x+bs)) + max(sa*y, sb*(y+bs))`` with ``x = x0 + bs*t``,
    ``y = y0 + g*t`` (:meth:`CostModel.decode_terms`). Each max switches branch at most once,
    so a segment is at most three pieces whose step times are linear in ``j``; step ``j`` of a
    piece ends at ``E + a*(j+1) + b*j*(j+1)/2``. Pricing a jump is Python arithmetic on a few
    pieces; the per-step array is built only for the steps that ran (an arrival usually cuts a
    jump short), and :meth:`end` gives one step's end bit for bit equal to :meth:`ends`.
    """

    __slots__ = ("_starts", "_pieces", "steps", "_e", "_coeffs")

    def __init__(
        self,
        now: float,
        segments: list[tuple[int, float, int, int, int, int]],
        fa: float,
        fb: float,
        sa: float,
        sb: float,
    ) -> None:
        self._starts: list[int] = []
        self._pieces: list[tuple[int, int, float, float, float]] = []  # (start, length, E, a, b)
        self._e = now  # when the last step priced so far ends
        self._coeffs = (fa, fb, sa, sb)
        self.steps = 0
        for seg in segments:
            self.add(*seg)

    def add(self, steps: int, c: float, n: int, x0: int, y0: int, g: int) -> None:
        """Price one more segment (see the class docstring) after the steps priced so far."""
        fa, fb, sa, sb = self._coeffs
        # full term: max(a1 + b1*t, a2 + b2*t) with a1 = fa*x0, b1 = fa*n, a2 = fb*(x0+n),
        # b2 = fb*n; SWA term likewise (a3, b3, a4, b4) with y0 and g
        a1, b1, a2, b2 = fa * x0, fa * n, fb * (x0 + n), fb * n
        a3, b3, a4, b4 = sa * y0, sa * g, sb * (y0 + n), sb * g
        lo = hi = -1  # the steps where a max switches branch inside the segment (-1: none)
        if b1 != b2:
            t_c = (a2 - a1) / (b1 - b2)  # where the two lines cross
            if 0 < t_c < steps:
                lo = math.ceil(t_c)
        if b3 != b4:
            t_c = (a4 - a3) / (b3 - b4)
            if 0 < t_c < steps:
                hi = math.ceil(t_c)
        if lo > hi:
            lo, hi = hi, lo
        # the pieces [0, lo), [lo, hi), [hi, steps), empty ones skipped
        u = 0
        if lo > u:
            self._piece(u, lo, c, a1, b1, a2, b2, a3, b3, a4, b4)
            u = lo
        if hi > u:
            self._piece(u, hi, c, a1, b1, a2, b2, a3, b3, a4, b4)
            u = hi
        if steps > u:
            self._piece(u, steps, c, a1, b1, a2, b2, a3, b3, a4, b4)

    def _piece(
        self,
        u: int,
        v: int,
        c: float,
        a1: float,
        b1: float,
        a2: float,
        b2: float,
        a3: float,
        b3: float,
        a4: float,
        b4: float,
    ) -> None:
        """Steps ``[u, v)`` of the segment :meth:`add` prices, one linear piece after the
        steps priced so far."""
        mid = (u + v - 1) * 0.5  # both branches are linear: the one on top at mid is on top
        if a1 + b1 * mid >= a2 + b2 * mid:
            alpha, beta = c + a1, b1
        else:
            alpha, beta = c + a2, b2
        if a3 + b3 * mid >= a4 + b4 * mid:
            alpha += a3
            beta += b3
        else:
            alpha += a4
            beta += b4
        length = v - u
        alpha += beta * u  # step times of the piece: alpha + beta*j, j = 0..length-1
        e, pos = self._e, self.steps
        self._starts.append(pos)
        self._pieces.append((pos, length, e, alpha, beta))
        self._e = e + (alpha * length + beta * (length - 1) * length * 0.5)
        self.steps = pos + length

    @property
    def last_end(self) -> float:
        """When the last step priced so far ends (the start time before any step)."""
        return self.priced_end()

    def priced_end(self) -> float:
        """:attr:`last_end` as a method: a C call from the compiled jump's loops."""
        return self.end(self.steps - 1) if self.steps else self._e

    @property
    def pieces(self) -> list[tuple[int, int, float, float, float]]:
        """``(first step, steps, E, a, b)`` per piece: step ``first + j`` ends at
        ``(j+1)*a + j*(j+1)/2*b + E`` (operations in that order)."""
        return self._pieces

    def end(self, step: int) -> float:
        """When step ``step`` (0-based) ends; the same float as ``ends()[step]``."""
        starts = self._starts
        i = len(starts) - 1  # the last piece starting at or before ``step`` (bisect_right - 1)
        while i >= 0 and starts[i] > step:
            i -= 1
        if i < 0:
            i = len(starts) - 1  # none: bisect's -1, the last piece
        start, _, e, alpha, beta = self._pieces[i]
        j = float(step - start)
        v = (j + 1.0) * alpha  # the operations of ends(), in its order
        if beta:
            v += j * (j + 1.0) * 0.5 * beta
        return v + e

    def steps_ended_by(self, t: float) -> int:
        """How many steps have ended at time ``t`` (``ends().searchsorted(t, "right")``).

        Finds the piece, estimates the step from the piece's quadratic, then settles the answer
        with exact :meth:`end` comparisons (end times increase: every step takes time)."""
        pieces = self._pieces
        i = 0
        while i + 1 < len(pieces) and pieces[i + 1][2] <= t:  # a piece's E = the end before it
            i += 1
        start, length, e, alpha, beta = pieces[i]
        # steps of this piece ended by t: the largest n with alpha*n + beta*n*(n-1)/2 <= t - e
        d = t - e
        if beta:
            b = alpha - beta * 0.5
            disc = b * b + 2.0 * beta * d
            guess = (math.sqrt(disc) - b) / beta if disc > 0 else 0.0
        else:
            guess = d / alpha if alpha > 0 else float(length)
        n = start + min(max(int(guess), 0), length)
        # settle across piece borders too: E is summed, not evaluated, so it may differ by an ulp
        while n > 0 and self.end(n - 1) > t:
            n -= 1
        while n < self.steps and self.end(n) <= t:
            n += 1
        return n

    def ends(self, steps: int | None = None) -> np.ndarray:
        """End times of the first ``steps`` steps (all by default), as one array."""
        total = self.steps if steps is None else steps
        out_all = np.empty(total, dtype=np.float64)
        tri1, tri2 = triangles(total)
        for start, length, e, alpha, beta in self._pieces:
            if start >= total:
                break
            length = min(length, total - start)
            out = out_all[start : start + length]
            np.multiply(tri1[:length], alpha, out=out)
            if beta:
                out += tri2[:length] * beta
            out += e
        return out_all


def segment_sums(seqs: list[int], last: list[int], a: int, w: int) -> tuple[list[int], int, int, int]:
    """The batch of a jump segment that starts at step ``a`` and the context sums that price it:
    ``(members, x0, y0, below)``. Members are the requests whose last step ``last[i]`` is at or
    after ``a``; at step ``a`` request ``i`` attends over ``x = seqs[i] + 1 + a`` FULL tokens (its
    new token too) and ``min(x, w)`` SWA tokens; ``below`` counts those still under the window
    ``w``, whose SWA context grows with each step. (Integer sums: the compiled build types them,
    decode_clock.pxd.)"""
    members: list[int] = []
    x0 = y0 = below = 0
    for i in range(len(last)):
        if last[i] >= a:
            members.append(i)
            x = seqs[i] + 1 + a
            x0 += x
            if x < w:
                y0 += x
                below += 1
            else:
                y0 += w
    return members, x0, y0, below


def segment_sums_from(
    seqs: list[int], last: list[int], prev: list[int], a: int, w: int
) -> tuple[list[int], int, int, int]:
    """:func:`segment_sums` of the segment at step ``a`` given ``prev``, the members of an
    earlier segment (those of later segments are among them: requests only leave a jump), so
    that only they are visited; the same members in the same order, the same sums."""
    members: list[int] = []
    x0 = y0 = below = 0
    for i in prev:
        if last[i] >= a:
            members.append(i)
            x = seqs[i] + 1 + a
            x0 += x
            if x < w:
                y0 += x
                below += 1
            else:
                y0 += w
    return members, x0, y0, below


def triangles(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(j + 1, j*(j+1)/2)`` for ``j < n``. Built per call (no module-level memo): the callers
    (:meth:`DecodeClock.ends`, ``JumpColumns.arrays``) run once per report, not per step."""
    j = np.arange(n, dtype=np.float64)
    return j + 1.0, j * (j + 1.0) * 0.5
