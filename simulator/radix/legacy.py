"""The legacy hybrid SWA radix tree: SGLang 0.5.9-0.5.15 ``SWARadixCache``.

Follows ``python/sglang/srt/mem_cache/swa_radix_cache.py`` of 0.5.15 with its defaults
(``SGLANG_OPT_SWA_RADIX_CACHE_COMPACT`` and ``SGLANG_OPT_SWA_SPLIT_LEAF_ON_INSERT`` off).
Differences from the unified tree: one FULL LRU list over all nodes (not a D-leaf heap), match
refreshes the whole path, tombstoned leaves are deleted with their FULL KV, and an insert whose
whole new tail lies below the request's SWA cursor is not inserted at all.
"""

from __future__ import annotations

import numpy as np

from simulator.kv_allocator import SWAKVAllocator
from simulator.radix.node import (
    LRUList,
    SwaLRUList,
    TreeNode,
    iter_subtree,
    lock_footprint,
    match_pages,
    subtree_stats,
)
from simulator.radix.unified import EvictResult, MatchResult, TreeCounters
from simulator.request_kv import LockReceipt

_EMPTY = np.empty(0, dtype=np.int64)


class LegacySWARadixTree:
    """``SWARadixCache``: FULL LRU list + SWA LRU list, tombstone flag per node."""

    generation = "legacy"

    def __init__(
        self,
        page_size: int,
        sliding_window_size: int,
        allocator: SWAKVAllocator,
        eviction_order=None,
    ) -> None:
        self.page_size = page_size
        self.window = sliding_window_size
        self.allocator = allocator
        # The legacy tree has no pluggable order: eviction walks its FULL LRU list.
        self.eviction_order = eviction_order
        self.counters = TreeCounters()
        self._time = 0.0
        self._next_id = 0
        self._next_uuid = 0
        self.full_lru = LRUList("full")
        self.swa_lru = SwaLRUList()
        self.full_evictable = 0
        self.full_protected = 0
        self.swa_evictable = 0
        self.swa_protected = 0
        self.root = self._new_node(_EMPTY, 0)
        self.root.full_lock = 1  # SWARadixCache.reset
        self.root.swa_lock = 1
        self.root.swa = True

    def _tick(self) -> float:
        t = self._time  # swa_radix_cache.get_last_access_time
        self._time += 1.0
        return t

    def _new_node(self, key: np.ndarray, length: int) -> TreeNode:
        node = TreeNode(self._next_id, key, length)
        self._next_id += 1
        node.last_access_time = self._tick()
        return node

    # ------------------------------------------------------------------ structure
    def _split(self, child: TreeNode, pages: int) -> TreeNode:
        """``SWARadixCache._split_node``: both halves move to MRU in both lists."""
        self.counters.splits += 1
        new = self._new_node(child.key[:pages], pages * self.page_size)
        new.parent = child.parent
        new.children = {child.key.item(pages): child}
        new.swa = child.swa
        new.full_lock = child.full_lock
        new.swa_lock = child.swa_lock
        new.swa_uuid = child.swa_uuid
        child.swa_uuid = None
        child.last_access_time = self._tick()
        self.full_lru.remove(child)
        if new.swa:
            self.swa_lru.remove(child)
        child.parent = new
        child.key = child.key[pages:]
        child.length -= new.length
        new.parent.children[new.key.item(0)] = new
        self.full_lru.insert_mru(new)
        self.full_lru.insert_mru(child)
        if new.swa:
            self.swa_lru.insert_mru(new)
            self.swa_lru.insert_mru(child)
        return new

    def _add_new_node(self, parent: TreeNode, key: np.ndarray, tombstone: bool) -> TreeNode:
        length = len(key) * self.page_size
        node = self._new_node(key, length)
        node.parent = parent
        node.swa = not tombstone
        parent.children[key.item(0)] = node
        self.full_lru.insert_mru(node)
        self.full_evictable += length
        if node.swa:
            self.swa_lru.insert_mru(node)
            self.swa_evictable += length
        else:
            self.counters.tombstones_created += 1
        return node

    def _untombstone(self, node: TreeNode) -> None:
        node.swa = True
        self.swa_lru.insert_mru(node)
        self.swa_evictable += node.length
        self.counters.tombstones_healed += 1
        self.counters.tombstone_tokens_healed += node.length

    # ------------------------------------------------------------------ match
    def _reset_path_mru(self, lru: LRUList, node: TreeNode, skip_tombstones: bool) -> None:
        # LRUList.reset_node_and_parents_mru: the node, then each ancestor just behind it
        prev = lru.head
        while node is not self.root:
            if not skip_tombstones or node.swa:
                lru.move_after(prev, node)
                prev = node
            node = node.parent

    def match_prefix(self, key: np.ndarray) -> MatchResult:
        """``SWARadixCache._match_prefix_helper`` + ``_match_post_processor``."""
        self.counters.match_calls += 1
        p = self.page_size
        node = self.root
        off = 0
        chunks: list[int] = []
        since_tombstone = float("inf")
        best_chunks = 0
        best = node
        full_hit = 0
        n = len(key)
        while off < n:
            child = node.children.get(key.item(off))
            if child is None:
                break
            if not child.swa:
                if since_tombstone >= self.window:
                    best_chunks = len(chunks)
                    best = node
                since_tombstone = 0
            m = match_pages(child.key, key, off)
            full_hit += m * p
            if m < len(child.key):
                new = self._split(child, m)
                chunks.append(new.length)
                if new.swa:
                    since_tombstone += new.length
                node = new
                break
            chunks.append(child.length)
            if child.swa:
                since_tombstone += child.length
            node = child
            off += m
        if since_tombstone >= self.window:
            best_chunks = len(chunks)
            best = node
        self._reset_path_mru(self.full_lru, best, skip_tombstones=False)
        self._reset_path_mru(self.swa_lru, best, skip_tombstones=True)
        t = self._tick()
        x = best
        while x is not None:
            x.last_access_time = t
            t -= 0.00001
            x = x.parent
        return MatchResult(sum(chunks[:best_chunks]), best, full_hit, None)

    # ------------------------------------------------------------------ locks
    def lock(self, node: TreeNode) -> LockReceipt:
        """``SWARadixCache.inc_lock_ref``."""
        self.counters.lock_calls += 1
        anchor = node
        swa_locked = 0
        uuid = None
        while node is not self.root:
            if node.full_lock == 0:
                self.full_evictable -= node.length
                self.full_protected += node.length
            node.full_lock += 1
            if swa_locked < self.window:
                assert node.swa, f"inc_lock_swa on swa_tombstone node {node.id}"
                if node.swa_lock == 0:
                    self.swa_evictable -= node.length
                    self.swa_protected += node.length
                node.swa_lock += 1
                swa_locked += node.length
                if swa_locked >= self.window:
                    if node.swa_uuid is None:
                        self._next_uuid += 1
                        node.swa_uuid = self._next_uuid
                    uuid = node.swa_uuid
            node = node.parent
        return LockReceipt(anchor, uuid)

    def lock_footprint(self, node: TreeNode) -> tuple[int, int]:
        """(FULL, SWA) evictable tokens a ``lock(node)`` would protect (:func:`node.lock_footprint`)."""
        return lock_footprint(self.root, node, self.window)

    def unlock(self, receipt: LockReceipt | None) -> None:
        """``SWARadixCache.dec_lock_ref``."""
        if receipt is None:
            return
        self.counters.unlock_calls += 1
        node = receipt.node
        dec_swa = True
        while node is not self.root:
            assert node.full_lock > 0
            if node.full_lock == 1:
                self.full_evictable += node.length
                self.full_protected -= node.length
            node.full_lock -= 1
            if dec_swa:
                assert node.swa and node.swa_lock > 0, f"dec_lock_ref on node {node.id}"
                if node.swa_lock == 1:
                    self.swa_evictable += node.length
                    self.swa_protected -= node.length
                node.swa_lock -= 1
                if receipt.swa_uuid is not None and node.swa_uuid == receipt.swa_uuid:
                    dec_swa = False
            node = node.parent

    # ------------------------------------------------------------------ insert
    def insert(
        self,
        key: np.ndarray,
        prev_prefix_len: int,
        swa_evicted_seqlen: int,
    ) -> int:
        """``SWARadixCache._insert_helper``; returns the length already in the tree.

        Frees are counted in pages: the request's positions below its SWA cursor hold FULL only.
        """
        self.counters.insert_calls += 1
        p = self.page_size
        alloc = self.allocator
        cursor = swa_evicted_seqlen
        self.root.last_access_time = self._tick()
        n = len(key)
        if n == 0:
            return 0
        node = self.root
        total = 0
        off = 0
        while off < n:
            child = node.children.get(key.item(off))
            if child is None:
                break
            node = child
            node.last_access_time = self._tick()
            self.full_lru.reset_mru(node)
            if node.swa:
                self.swa_lru.reset_mru(node)
            m = match_pages(node.key, key, off)
            if m < len(node.key):
                node = self._split(node, m)
            length = m * p
            end = total + length
            if prev_prefix_len < end:
                assert prev_prefix_len <= total, "a tree node straddles the protected prefix"
                if not node.swa:
                    if cursor <= total:
                        # locked FULL: keep it, free the incoming FULL; else replace the node's
                        alloc.free_full_pages(length // p)
                        self._untombstone(node)
                    elif cursor < end:
                        start = cursor - total
                        self._split(node, start // p)
                        # the lower part heals; everything below the cursor goes FULL-only
                        alloc.free_full_pages(length // p)
                        self._untombstone(node)
                    else:
                        alloc.free_full_pages(length // p)
                else:
                    live = max(0, end - max(total, cursor))
                    alloc.free_full_pages(length // p)
                    alloc.free_swa_pages(live // p)
            total = end
            off += m
        if off < n:
            rem_len = (n - off) * p
            if cursor == total + rem_len:
                alloc.free_full_pages(rem_len // p)  # all below the cursor: FULL only
                self.counters.tombstones_created += 1
                return total
            parent = node
            rem = key[off:]
            if total < cursor < total + rem_len:
                cut = (cursor - total) // p
                parent = self._add_new_node(parent, rem[:cut], tombstone=True)
                rem = rem[cut:]
            self._add_new_node(parent, rem, tombstone=False)
        return total

    # ------------------------------------------------------------------ eviction
    def _delete_leaf(self, x: TreeNode) -> None:
        del x.parent.children[x.key.item(0)]
        self.full_evictable -= x.length
        if x.swa:
            self.swa_evictable -= x.length
        self.counters.leaves_deleted += 1

    def _delete_tombstone_ancestors(self, x: TreeNode, result: EvictResult, count: bool = True) -> TreeNode:
        """``_iteratively_delete_tombstone_leaf``: drop childless, unlocked tombstone parents."""
        while not x.parent.swa and not x.parent.children:
            par = x.parent
            if par is self.root or par.full_lock > 0:
                break
            self.allocator.free_full_pages(par.length // self.page_size)
            if count:  # the SWA phase drops this count, as SGLang's evict() does
                result.full_evicted += par.length
            self.full_lru.remove(par)
            del par.parent.children[par.key.item(0)]
            self.full_evictable -= par.length
            self.counters.leaves_deleted += 1
            x = par
        return x

    def evict(self, full_num_tokens: int, swa_num_tokens: int) -> EvictResult:
        """``SWARadixCache.evict``: FULL phase over LRU leaves, then the SWA phase."""
        p = self.page_size
        alloc = self.allocator
        result = EvictResult()
        self.counters.evict_calls += 1
        if full_num_tokens > 0:
            x = self.full_lru.lru_unlocked_leaf()
            while result.full_evicted < full_num_tokens and self.full_lru.in_list(x):
                alloc.free_full_pages(x.length // p)
                result.full_evicted += x.length
                if x.swa:
                    alloc.free_swa_pages(x.length // p)
                    result.swa_evicted += x.length
                x_next = self.full_lru.prev_unlocked_leaf(x)
                self.full_lru.remove(x)
                if x.swa:
                    self.swa_lru.remove(x)
                self._delete_leaf(x)
                x = self._delete_tombstone_ancestors(x, result)
                if not x.parent.children:
                    x_next = self.full_lru.lru_unlocked_leaf()
                x = x_next
        if result.swa_evicted < swa_num_tokens:
            x = self.swa_lru.lru_unlocked()
            while result.swa_evicted < swa_num_tokens and self.swa_lru.in_list(x):
                if x.children or x.full_lock > 0:
                    # internal node, or a leaf still FULL-locked: tombstone it
                    alloc.free_swa_pages(x.length // p)
                    result.swa_evicted += x.length
                    x_next = self.swa_lru.prev_unlocked(x)
                    self.swa_lru.remove(x)
                    self.swa_evictable -= x.length
                    x.swa = False
                    self.counters.tombstones_created += 1
                else:
                    alloc.free_full_pages(x.length // p)
                    alloc.free_swa_pages(x.length // p)
                    result.full_evicted += x.length
                    result.swa_evicted += x.length
                    x_next = self.swa_lru.prev_unlocked(x)
                    self.full_lru.remove(x)
                    self.swa_lru.remove(x)
                    self._delete_leaf(x)
                    self._delete_tombstone_ancestors(x, result, count=False)
                x = x_next
        self.counters.full_evicted += result.full_evicted
        self.counters.swa_evicted += result.swa_evicted
        return result

    # ------------------------------------------------------------------ views
    def iter_nodes(self):
        return iter_subtree(self.root)

    def stats(self) -> dict:
        return subtree_stats(self.root)
