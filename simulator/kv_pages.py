"""Page ids of SGLang 0.5.23's hybrid SWA allocator, for recording and replaying memory ops.

Hybrid SWA models in 0.5.23 get ``SWATokenToKVPoolAllocator`` (allocator/swa.py) unless
``--enable-unified-memory`` is set (``KVCacheConfigurator._build_token_to_kv_pool_allocator``;
the ``UnifiedSWATokenToKVPoolAllocator`` of allocator/unified_hybrid_swa.py serves only that
flag, whatever the radix tree is). It holds two sub-allocators, one per pool:
``PagedTokenToKVPoolAllocator`` (allocator/paged.py) when ``page_size > 1``, else
``TokenToKVPoolAllocator`` (allocator/token.py), and a ``full_to_swa_index_mapping``. This
module keeps the same state in page units (a page is a token when ``page_size == 1``):

- free pages start as ``1..num_pages`` (page 0 is the padding sink, ``clear``);
- an allocation takes pages from the front of the free list, request by request;
- a free in SGLang's ``free()`` form releases the sorted unique pages (``torch.unique``); the
  ``free_segment`` / ``free_page_ids`` form releases them in the caller's order;
- released pages go to the front of the list (paged ``_release_page_ids``) or its back
  (token ``free``); with ``need_sort`` (PD disaggregation) they are staged and merged, sorted,
  when an allocation finds the list short (``merge_and_sort_free``);
- inside a free group frees wait; at its end the full side releases its ``free()`` pages, then
  its page-id frees; the SWA side its page-id frees, then its ``free()`` pages
  (``SWATokenToKVPoolAllocator.free_group_end``);
- SWA pages are found through the full page's mapping, read and cleared when the free is issued.
"""

from __future__ import annotations

from collections import deque

import numpy as np

_EMPTY = np.empty(0, dtype=np.int64)


class PageFreeList:
    """One pool's free pages: ``PagedTokenToKVPoolAllocator`` / ``TokenToKVPoolAllocator``."""

    def __init__(self, num_pages: int, page_size: int, need_sort: bool = False) -> None:
        self.num_pages = num_pages
        self.token_mode = page_size == 1
        self.need_sort = need_sort
        # The free list as chunks in list order (front = left): a release prepends (paged) or
        # appends (token mode) one chunk and an allocation pops from the front, so neither
        # copies the whole list (a pool can hold millions of pages).
        self._chunks: deque[np.ndarray] = deque([np.arange(1, num_pages + 1, dtype=np.int64)])
        self._n_free = num_pages
        self.staged: list[np.ndarray] = []  # paged staged_pages / token release_pages
        self.n_staged = 0
        self.merges = 0
        self.group: list[np.ndarray] | None = None  # free() form, deferred
        self.group_ids: list[np.ndarray] | None = None  # free_page_ids form, deferred

    @property
    def free(self) -> np.ndarray:
        """The free list proper (without staged pages), in order."""
        if len(self._chunks) != 1:
            self._set_free(np.concatenate(self._chunks) if self._chunks else _EMPTY)
        return self._chunks[0]

    def _set_free(self, pages: np.ndarray) -> None:
        self._chunks = deque([pages])
        self._n_free = len(pages)

    def available(self) -> int:
        return self._n_free + self.n_staged

    def all_free(self) -> np.ndarray:
        """Free pages in list order, staged ones last (``get_all_free_pages``)."""
        return np.concatenate([self.free, *self.staged]) if self.staged else self.free

    def merge_and_sort_free(self) -> None:
        if not self.staged:
            return
        self._set_free(np.sort(self.all_free()))
        self.merges += 1
        self.staged = []
        self.n_staged = 0

    def take(self, n: int, merge_if_over: int) -> np.ndarray:
        """The first ``n`` free pages; merge staged pages first when ``merge_if_over`` exceeds
        the list (each SGLang entry point has its own bound: see the callers)."""
        if merge_if_over > self._n_free:
            self.merge_and_sort_free()
        assert n <= self._n_free, (n, self._n_free)
        parts: list[np.ndarray] = []
        need = n
        chunks = self._chunks
        while need:
            head = chunks[0]
            if len(head) <= need:
                parts.append(chunks.popleft())
                need -= len(head)
            else:
                parts.append(head[:need])
                chunks[0] = head[need:]
                need = 0
        self._n_free -= n
        if len(parts) == 1:
            return parts[0]
        return np.concatenate(parts) if parts else _EMPTY

    def release(self, pages: np.ndarray, ordered: bool) -> None:
        """``free()`` (``ordered=False``) or ``free_page_ids`` (``ordered=True``) of pages."""
        if len(pages) == 0:
            return
        if self.group is not None:
            # TokenToKVPoolAllocator.free_page_ids is free(): one deferred list in call order
            (self.group_ids if ordered and not self.token_mode else self.group).append(np.array(pages))
            return
        self._release(pages if ordered or self.token_mode else np.unique(pages))

    def _release(self, pages: np.ndarray) -> None:
        if self.need_sort:
            self.staged.append(np.asarray(pages, dtype=np.int64))
            self.n_staged += len(pages)
        else:
            pages = np.array(pages, dtype=np.int64)  # a copy: the caller's array may change
            if self.token_mode:
                self._chunks.append(pages)
            else:
                self._chunks.appendleft(pages)
            self._n_free += len(pages)

    def group_begin(self) -> None:
        assert self.group is None, "free groups cannot be nested"
        self.group = []
        self.group_ids = []

    def group_end(self) -> None:
        pending, ids = self.group, self.group_ids
        self.group = self.group_ids = None
        if pending:
            self.release(np.concatenate(pending), ordered=False)
        if ids:
            self._release(np.concatenate(ids))

    def pending(self) -> int:
        if self.group is None:
            return 0
        return sum(len(x) for x in self.group) + sum(len(x) for x in self.group_ids)


class SWAPageState:
    """Page ids of ``SWATokenToKVPoolAllocator``: two free lists and the full-to-SWA map."""

    def __init__(self, full_pages: int, swa_pages: int, page_size: int, need_sort: bool = False) -> None:
        self.page_size = page_size
        self.full = PageFreeList(full_pages, page_size, need_sort)
        self.swa = PageFreeList(swa_pages, page_size, need_sort)
        self.full_to_swa = np.zeros(full_pages + 1, dtype=np.int64)  # 0: no SWA peer
        # SWA frees of a group: (pages, ordered), released at its end (swa_page_ids_group,
        # swa_free_group); resolved through the mapping when issued
        self._swa_group: list[tuple[np.ndarray, bool]] | None = None

    # -- allocation ------------------------------------------------------------------------
    def alloc_extend(self, n_pages: int, extend_tokens: int, bs: int) -> tuple[np.ndarray, np.ndarray]:
        """``SWATokenToKVPoolAllocator.alloc_extend`` (paged) / ``alloc`` (page 1): the
        batch's ``n_pages`` new pages in request order, in both pools, and their mapping."""
        p = self.page_size
        # paged.alloc_extend merges when extend_num_tokens // page + bs + 1 exceeds the list
        bound = extend_tokens // p + bs + 1 if p > 1 else n_pages
        return self.alloc(n_pages, bound)

    def alloc_decode(self, n_pages: int, bs: int) -> tuple[np.ndarray, np.ndarray]:
        """``alloc_decode`` (paged: merge when ``bs`` exceeds the list) / ``alloc(bs)``."""
        return self.alloc(n_pages, bs if self.page_size > 1 else n_pages)

    def alloc(self, n: int, bound: int) -> tuple[np.ndarray, np.ndarray]:
        """``n`` pages in both pools, merging staged pages first if ``bound`` exceeds a list."""
        full = self.full.take(n, bound)
        swa = self.swa.take(n, bound)
        self.full_to_swa[full] = swa
        return full, swa

    # -- frees (full page ids in; SWA peers through the mapping) -----------------------------
    def _swa_peers(self, full_pages: np.ndarray, ordered: bool) -> np.ndarray:
        swa = self.full_to_swa[full_pages]
        self.full_to_swa[full_pages] = 0
        if not ordered:
            swa = swa[swa > 0]  # _release_swa drops the padding entries
        else:
            assert (swa > 0).all(), "swa.peer_mapped: an SWA free of a page without SWA peer"
        return swa

    def free_swa(self, full_pages: np.ndarray, ordered: bool = True) -> np.ndarray:
        """``free_swa_segment`` (ordered) / ``free_swa``: the SWA peers of these full pages."""
        ordered = ordered or self.page_size == 1  # free_swa at page 1 is _free_swa_pages
        swa = self._swa_peers(full_pages, ordered)
        if self._swa_group is not None:
            self._swa_group.append((swa, ordered))
        else:
            self.swa.release(swa, ordered)
        return swa

    def free_full(self, full_pages: np.ndarray, ordered: bool = True) -> None:
        """``free_full_segment`` / ``free_full``: full pages whose SWA peers are gone."""
        self.full.release(np.asarray(full_pages, dtype=np.int64), ordered)

    def free(self, full_pages: np.ndarray, ordered: bool = True) -> np.ndarray:
        """``free_segment`` / ``free``: SWA peers first (they read the mapping), then FULL."""
        swa = self.free_swa(full_pages, ordered)
        self.free_full(full_pages, ordered)
        return swa

    def remap_swa(self, dst_full: np.ndarray, src_full: np.ndarray) -> None:
        """``RebuildFullToSWAMapping``: ``dst`` full pages take over the SWA peers of ``src``."""
        self.full_to_swa[dst_full] = self.full_to_swa[src_full]
        self.full_to_swa[src_full] = 0

    # -- free groups -------------------------------------------------------------------------
    def group_begin(self) -> None:
        assert self._swa_group is None, "free groups cannot be nested"
        self._swa_group = []
        self.full.group_begin()

    def group_end(self) -> None:
        pending, self._swa_group = self._swa_group, None
        ids = [s for s, o in pending if o]
        sets = [s for s, o in pending if not o]
        if ids:  # swa_page_ids_group first, then swa_free_group
            self.swa.release(np.concatenate(ids), ordered=True)
        if sets:
            self.swa.release(np.concatenate(sets), ordered=False)
        self.full.group_end()

    # -- views ---------------------------------------------------------------------------------
    def free_counts(self) -> tuple[int, int]:
        """Free pages of (FULL, SWA) as ``available_size`` counts them (group frees excluded)."""
        return self.full.available(), self.swa.available()

    def snapshot(self) -> dict:
        """The state a replay must reproduce: free lists in order and the mapping."""
        return dict(
            full_free=self.full.all_free().copy(),
            swa_free=self.swa.all_free().copy(),
            full_to_swa=self.full_to_swa.copy(),
        )


class HostFreeList:
    """One host pool's free slots in pages (``HostKVCache``, pool_host/base.py): ``clear``
    starts with every page (the padding page included, HICACHE.md fact 22); ``alloc`` takes
    the front of ``free_slots``, merging the released chunks behind it only when it is short
    (``_merge_release_slots``); ``free`` appends a released chunk."""

    def __init__(self, num_pages: int) -> None:
        self.num_pages = num_pages
        self.free_slots = np.arange(num_pages, dtype=np.int64)
        self.release_slots: list[np.ndarray] = []
        self.n_release = 0
        self.used = np.zeros(num_pages, dtype=bool)

    def available(self) -> int:
        return len(self.free_slots) + self.n_release

    def alloc(self, n: int) -> np.ndarray | None:
        if n > self.available():
            return None
        if n > len(self.free_slots):
            self.free_slots = np.concatenate([self.free_slots, *self.release_slots])
            self.release_slots, self.n_release = [], 0
        pages, self.free_slots = self.free_slots[:n], self.free_slots[n:]
        assert not self.used[pages].any(), "host double alloc"
        self.used[pages] = True
        return pages

    def free(self, pages: np.ndarray) -> None:
        if not len(pages):
            return
        assert self.used[pages].all(), "host double free"
        self.used[pages] = False
        self.release_slots.append(np.asarray(pages, dtype=np.int64))
        self.n_release += len(pages)

    def snapshot(self) -> tuple[np.ndarray, list[np.ndarray]]:
        return self.free_slots.copy(), [c.copy() for c in self.release_slots]


class HostPageState:
    """Page ids of the HiCache host pools: FULL (pool 0) and SWA (pool 1)."""

    def __init__(self, full_pages: int, swa_pages: int) -> None:
        self.pools = (HostFreeList(full_pages), HostFreeList(swa_pages))

    def snapshot(self) -> dict:
        return {name: pool.snapshot() for name, pool in zip(("full", "swa"), self.pools, strict=True)}


__all__ = ["HostFreeList", "HostPageState", "PageFreeList", "SWAPageState"]
