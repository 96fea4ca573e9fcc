"""The controller's memory decisions as records, while recording: which rows get which pages.

Only :class:`~simulator.radix.cache.SWARadixCache` calls these, and only when the allocator
records (``allocator.recorder is not None``); without recording the controller moves counts.
A request's row (``ReqKV.kv_pages``) is its matched prefix's node values followed by the pages
its allocations handed out, as SGLang's ``req_to_token`` row (in pages).
"""

from __future__ import annotations

import numpy as np

from simulator.kv_allocator import SWAKVAllocator
from simulator.memory_ops import OpKind
from simulator.request_kv import ReqKV

_EMPTY = np.empty(0, dtype=np.int64)


def alloc_extend_ids(cache, reqs: list[ReqKV]) -> None:
    """``alloc_for_extend``'s pages: each request's new pages, in batch order, from one
    ``alloc_extend`` (its merge bound goes on the batch's first allocation)."""
    p = cache.page_size
    a = cache.allocator
    total = sum(-(-r.extend_end // p) - (-(-r.prefix_len // p)) for r in reqs)
    extend = sum(r.extend_end - r.prefix_len for r in reqs)
    bound = extend // p + len(reqs) + 1 if p > 1 else total  # paged.alloc_extend / token.alloc
    for r in reqs:
        start = -(-r.prefix_len // p)
        k = -(-r.extend_end // p) - start
        if r.holds_kv:
            row = r.kv_pages[:start]
        else:
            row = cache.tree.path_values(r.last_node)
            assert len(row) * p == r.prefix_len, (len(row), r.prefix_len)
        if k > 0:
            op = a.apply_op(OpKind.ALLOC, r.rid, count=k, bound=bound)
            bound = 0
            row = np.concatenate([row, op.full])
        r.kv_pages = row


def alloc_decode_ids(
    a: SWAKVAllocator, reqs: list[ReqKV], p: int, steps: list[int], step0: list[int] | None = None
) -> None:
    """Decode allocations of ``steps[i]`` steps of request ``i`` as ONE record: pages in step
    order, then batch order (``alloc_decode``), each tagged with its step when a record spans
    several steps (a fast-forwarded jump). ``step0[i]``: the request's first step's offset
    from the current step (a jump's later segment)."""
    step_of: list[np.ndarray] = []
    owner: list[np.ndarray] = []
    for i, (r, n) in enumerate(zip(reqs, steps, strict=True)):
        first = (-r.kv_allocated_len) % p  # the first step at which the request opens a page
        s = np.arange(first, n, p, dtype=np.int64) + (step0[i] if step0 else 0)
        step_of.append(s)
        owner.append(np.full(len(s), i, dtype=np.int64))
    s = np.concatenate(step_of)
    if len(s) == 0:
        return
    o = np.concatenate(owner)
    order = np.lexsort((o, s))
    s, o = s[order], o[order]
    multi = max(steps) > 1 or bool(step0)
    rec = a.recorder
    op = a.apply_op(
        OpKind.ALLOC,
        reqs[0].rid if len(reqs) == 1 else "decode",
        count=len(s),
        bound=len(reqs) if p > 1 else len(s),
        page_steps=rec.step + s if multi else None,
    )
    for i, r in enumerate(reqs):
        mine = op.full[o == i]
        if len(mine):
            r.kv_pages = np.concatenate([r.kv_pages, mine])


def free_row_ids(a: SWAKVAllocator, req: ReqKV, first: int, n: int, dead_first: int, dead_n: int) -> None:
    """Free row pages ``[first, first + n)``; those of ``[dead_first, dead_first + dead_n)``
    lost their SWA to window eviction and free FULL only (``free_full_segments`` of the dead
    span, then ``free_segments`` of the live ones: ``common.py:_release_kv_segments``)."""
    row = req.kv_pages
    if dead_n:
        a.apply_op(OpKind.FREE_FULL, req.rid, row[dead_first : dead_first + dead_n])
        live = np.concatenate([row[first:dead_first], row[dead_first + dead_n : first + n]])
    else:
        live = row[first : first + n]
    if len(live):
        a.apply_op(OpKind.FREE, req.rid, live)


class _WindowFrees:
    """Stands in for the allocator while a jump's window frees are collected, in order:
    ``(step, request index, lo, hi)`` (the step from the decode position it fired at)."""

    def __init__(self, index: dict[int, int], seq0: list[int]) -> None:
        self.index = index
        self.seq0 = seq0
        self.events: list[tuple[int, int, int, int]] = []

    def record_window_free(self, req: ReqKV, lo: int, hi: int, pre_len: int) -> None:
        i = self.index[id(req)]
        self.events.append((pre_len + 1 - self.seq0[i], i, lo, hi))


def decode_jump_ids(
    a: SWAKVAllocator, reqs: list[ReqKV], ran: list[int], swa_policy, ctx
) -> list[tuple[int, int]]:
    """A decode jump in which no step can evict (request ``i`` runs ``ran[i]`` steps), as
    records in SGLang's per-step order but in bulk: for each step at which window frees fire,
    one allocation record for the pages opened before it (``page_steps`` per page), then
    the frees; then the rest. Advances no request counter. Returns the ``(step, SWA pages)``
    window frees, as the count path's ``run_batch`` does."""
    from policies.swa_eviction import DecodeContext  # policies import the simulator

    p = a.page_size
    seq0 = [r.prompt_len + r.num_outputs for r in reqs]
    frees = _WindowFrees({id(r): i for i, r in enumerate(reqs)}, seq0)
    counted = swa_policy.run_batch(reqs, DecodeContext(ctx.window, p, frees, ctx.forward_iter), ran)
    events = sorted(frees.events)
    done = [0] * len(reqs)  # steps whose pages each request already received
    for t in sorted({e[0] for e in events}) + [max(ran, default=0)]:
        upto = [min(t, n) for n in ran]
        tmp = [r.kv_allocated_len for r in reqs]
        for r, d in zip(reqs, done, strict=True):
            r.kv_allocated_len += d
        alloc_decode_ids(a, reqs, p, [u - d for u, d in zip(upto, done, strict=True)], step0=done)
        for r, k in zip(reqs, tmp, strict=True):
            r.kv_allocated_len = k
        done = upto
        for s, i, lo, hi in events:
            if s == t:
                a.record_window_free(reqs[i], lo, hi, seq0[i] + s - 1)
    return [(s, freed // p) for s, freed in counted]
