"""The round a batch of requests belongs to, for the decode-step and prefill-batch records.

:class:`~simulator.engine.metrics.Recorder` labels every decode step and prefill batch with the
most common round among its requests (bench_multiturn's per-round metrics group by it). Typed in
the compiled build (rounds.pxd): a request is a SimRequest read as C struct fields.
"""

from __future__ import annotations

from collections.abc import Iterable

from simulator.engine.decode_jump import DecodeJump
from simulator.engine.request import SimRequest


def majority_round(batch: Iterable[SimRequest]) -> tuple[int, float]:
    """(the most common round among the batch's non-heartbeat requests, its share of them).

    A step belongs to this round (ties go to the lower round); a batch of heartbeats only belongs
    to no round (-1). Under bench_multiturn's round barrier every batch holds one round only.
    (A request is read through ``req``, a typed SimRequest in the compiled build, metrics.pxd;
    any other object with ``round`` and ``heartbeat`` is read by name.)
    """
    one = _single_round(batch)
    return one if one is not None else _mixed_rounds(batch)


def _single_round(batch: Iterable[SimRequest]) -> tuple[int, float] | None:
    """:func:`majority_round` of a batch whose non-heartbeat requests all share one round (or of
    heartbeats only), found in one pass without building lists (the common case); None when
    the batch holds several rounds."""
    first = None
    for r in batch:
        if type(r) is SimRequest:
            req = r
            heartbeat, rnd = req.heartbeat, req.round
        else:
            heartbeat, rnd = r.heartbeat, r.round
        if heartbeat:
            continue
        if first is None:
            first = rnd
        elif rnd != first:
            return None
    return (-1, 0.0) if first is None else (first, 1.0)


def _mixed_rounds(batch: Iterable[SimRequest]) -> tuple[int, float]:
    """:func:`majority_round` of a batch of several rounds: the count of each round (a dict, not
    ``np.bincount`` of a fresh array: the same counts, the same lowest most common round and
    the same share, an int over an int)."""
    counts, n = _round_counts(batch)
    return _top_round(counts, n)


def _round_counts(batch: Iterable[SimRequest]) -> tuple[dict, int]:
    """(requests per round, their number) among the batch's non-heartbeat requests."""
    counts: dict = {}
    n = 0
    for r in batch:
        if type(r) is SimRequest:
            req = r
            heartbeat, rnd = req.heartbeat, req.round
        else:
            heartbeat, rnd = r.heartbeat, r.round
        if not heartbeat:
            counts[rnd] = counts.get(rnd, 0) + 1
            n += 1
    return counts, n


def _top_round(counts: dict, n: int) -> tuple[int, float]:
    """The lowest most common round of ``counts`` and its share of the ``n`` requests counted
    (-1 and 0.0 when none is)."""
    if n == 0:
        return -1, 0.0
    top, best = -1, 0
    for rnd, c in counts.items():
        if c > best or (c == best and rnd < top):
            top, best = rnd, c
    return int(top), best / n


def _count_rounds(batch: list) -> tuple:
    """``(majority_round(batch), counts, n)``: the round counts behind the label when the batch
    holds several rounds (else None and 0), for the segments after it."""
    one = _single_round(batch)
    if one is not None:
        return one, None, 0
    counts, n = _round_counts(batch)
    return _top_round(counts, n), counts, n


def jump_constants(const: list, jump: DecodeJump) -> None:
    """Append ``jump``'s per-call constants ``(steps, running, queue, round, share)`` to
    ``const``, the last step apart when it saw a queue (as :meth:`DecodeJump.step_calls`).
    A segment whose batch is a subsequence of the previous one's (a jump's requests only
    leave) is labelled from the previous label, or from the previous round counts less the
    requests that left, without a count of its own."""
    steps, queue = jump.steps, jump.queue
    prev, rnd, share = None, -1, 0.0
    counts = None  # the round counts of prev's batch when it held several rounds
    n = 0
    for seg in jump.segments:
        batch = seg.batch
        running = len(batch)
        known = None if prev is None else _round_of_subset(batch, prev, rnd, share)
        if known is None and counts is not None:
            n = _drop_leavers(batch, prev, counts, n)
            if n >= 0:
                known = _top_round(counts, n)
        if known is None:
            known, counts, n = _count_rounds(batch)
        rnd, share = known
        if share == 0.0 or share == 1.0:
            counts = None  # one round (or none): _round_of_subset labels its subsequences
        prev, k = batch, seg.end - seg.first
        if seg.end == steps and queue:  # the last step saw a queue
            if k > 1:
                const.append((k - 1, running, 0, rnd, share))
            const.append((1, running, queue, rnd, share))
        else:
            const.append((k, running, 0, rnd, share))


def _drop_leavers(batch: list, prev: list, counts: dict, n: int) -> int:
    """Take the requests of ``prev`` that ``batch`` no longer holds out of ``counts`` (of ``n``
    requests): the count left, or -1 when ``batch`` is not a subsequence of ``prev`` (then
    ``counts`` is spoilt: count again)."""
    nb, j = len(batch), 0
    for r in prev:
        if j < nb and batch[j] is r:
            j += 1
            continue
        if type(r) is SimRequest:
            req = r
            heartbeat, rnd = req.heartbeat, req.round
        else:
            heartbeat, rnd = r.heartbeat, r.round
        if not heartbeat:
            c = counts[rnd] - 1
            if c:
                counts[rnd] = c
            else:
                del counts[rnd]
            n -= 1
    return n if j == nb else -1


def _round_of_subset(batch: list, prev: list, rnd: int, share: float) -> tuple[int, float] | None:
    """:func:`majority_round` of ``batch`` from ``(rnd, share)``, that of ``prev``, without a
    count where ``batch`` is a subsequence of ``prev`` (a jump's requests only leave) whose
    non-heartbeat requests are all of one round, or none; else None."""
    if share != 0.0 and share != 1.0:
        return None  # several rounds: count again
    n, j = len(prev), 0
    for r in batch:
        while j < n and prev[j] is not r:
            j += 1
        if j == n:
            return None  # not a subsequence
        j += 1
    if share == 0.0:
        return -1, 0.0  # heartbeats only, as in prev
    for r in batch:
        if type(r) is SimRequest:
            req = r
            if not req.heartbeat:
                return rnd, 1.0
        elif not r.heartbeat:
            return rnd, 1.0
    return -1, 0.0
