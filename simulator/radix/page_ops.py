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


def alloc_decode_ids(a: SWAKVAllocator, reqs: list[ReqKV], p: int, steps: list[int]) -> None:
    """Decode allocations of ``steps[i]`` steps of request ``i`` as ONE record: pages in step
    order, then batch order (``alloc_decode``), each tagged with its step when a record spans
    several steps (a fast-forwarded jump)."""
    step_of: list[np.ndarray] = []
    owner: list[np.ndarray] = []
    for i, (r, n) in enumerate(zip(reqs, steps, strict=True)):
        first = (-r.kv_allocated_len) % p  # the first step at which the request opens a page
        s = np.arange(first, n, p, dtype=np.int64)
        step_of.append(s)
        owner.append(np.full(len(s), i, dtype=np.int64))
    s = np.concatenate(step_of)
    if len(s) == 0:
        return
    o = np.concatenate(owner)
    order = np.lexsort((o, s))
    s, o = s[order], o[order]
    multi = max(steps) > 1
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
