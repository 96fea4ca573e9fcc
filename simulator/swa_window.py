"""Freeing a request's out-of-window SWA slots: the two rules SGLang has used.

Both raise the request's SWA cursor (``swa_evicted_seqlen``) to at least its tree-owned prefix,
then free the SWA peers of ``[cursor, new)`` while FULL KV stays in the row. While memory ops
are recorded (the request has ``kv_pages``) the allocator gets a window-free record instead of
a count (:meth:`SWAKVAllocator.record_window_free`). The compiled build types both rules with
C integers (swa_window.pxd): every value is a token count.
"""

from __future__ import annotations

from simulator.kv_allocator import SWAKVAllocator
from simulator.request_kv import ReqKV


def _free_swa_pages(allocator: SWAKVAllocator, n: int) -> None:
    """``allocator.free_swa_pages(n)``: a C call where it is exactly the allocator class (the
    compiled build types ``a``, swa_window.pxd), through Python for a stand-in or a subclass."""
    if type(allocator) is SWAKVAllocator:
        a = allocator
        a.free_swa_pages(n)
    else:
        allocator.free_swa_pages(n)


def free_out_of_window_0523(
    req: ReqKV,
    pre_len: int,
    window: int,
    page_size: int,
    allocator: SWAKVAllocator,
    eviction_interval: int = 1,
) -> int:
    """SGLang 0.5.23 ``mem_cache/common.py:free_swa_out_of_window_slots`` (prefix sharing).

    Keeps ``ceil_page(max(W, page))`` tokens behind ``pre_len``. Returns SWA tokens freed.
    """
    evicted = req.swa_evicted_seqlen
    if pre_len - window < evicted + eviction_interval:
        return 0
    evicted = max(evicted, req.swa_dead_lo(page_size))
    req.swa_evicted_seqlen = evicted
    keep = -(-max(window, page_size) // page_size) * page_size  # ceil_page(max(W, page))
    threshold = pre_len - keep
    new = max(evicted, threshold) // page_size * page_size
    if new > evicted:
        if req.kv_pages is None:
            _free_swa_pages(allocator, (new - evicted) // page_size)
        else:
            allocator.record_window_free(req, evicted, new, pre_len)
        req.swa_evicted_seqlen = new
        return new - evicted
    return 0


def free_out_of_window_legacy(
    req: ReqKV,
    pre_len: int,
    margin: int,
    page_size: int,
    allocator: SWAKVAllocator,
) -> int:
    """SGLang 0.5.9-0.5.15 ``free_swa_out_of_window_slots``: keep ``margin`` tokens, page-floored.

    0.5.15 uses ``margin = max(W, page)``; PR 17220 as merged (0.5.9) used ``margin = W``.
    """
    req.swa_evicted_seqlen = max(req.swa_evicted_seqlen, req.cache_protected_len)
    evicted = req.swa_evicted_seqlen
    new = max(evicted, pre_len - margin) // page_size * page_size
    if new > evicted:
        if req.kv_pages is None:
            _free_swa_pages(allocator, (new - evicted) // page_size)
        else:
            allocator.record_window_free(req, evicted, new, pre_len)
        req.swa_evicted_seqlen = new
        return new - evicted
    return 0
