"""SGLang 0.5.23's hybrid SWA radix tree (``UnifiedRadixCache`` with FULL + SWA components).

Every method names the SGLang function it follows; paths are relative to
``python/sglang/srt/mem_cache/``. The tree works on page ids and token counts: a node's FULL
and SWA "values" are represented by its length and an ``swa`` flag, and frees go straight to
the page counters of :class:`~simulator.kv_allocator.SWAKVAllocator`.
Without HiCache every node has FULL KV on device, so FULL presence is implicit.
"""

from __future__ import annotations

import heapq
import os

import numpy as np

from simulator.kv_allocator import SWAKVAllocator
from simulator.memory_ops import EVICTION, OpKind
from simulator.radix.node import (
    SwaLRUList,
    TreeNode,
    iter_subtree,
    lock_footprint,
    match_pages,
    subtree_stats,
)
from simulator.radix.tree_results import EvictResult, MatchResult, TreeCounters
from simulator.radix.unified_insert import UnifiedInsert
from simulator.request_kv import LockReceipt

_EMPTY = np.empty(0, dtype=np.int64)


class UnifiedSWARadixTree(UnifiedInsert):
    """The FULL+SWA tree of ``unified_cache/unified_tree_core.py`` plus its two components
    (insertion in :class:`~simulator.radix.unified_insert.UnifiedInsert`)."""

    generation = "unified"

    def __init__(
        self,
        page_size: int,
        sliding_window_size: int,
        allocator: SWAKVAllocator,
        eviction_order,
    ) -> None:
        self.page_size = page_size
        self.window = sliding_window_size
        self.allocator = allocator
        self.eviction_order = eviction_order
        self.counters = TreeCounters()
        self._time = 0.0
        self._next_id = 0
        self._next_uuid = 0
        self.swa_lru = SwaLRUList()
        self.device_leaves: set[TreeNode] = set()
        # For orders whose keys only grow (lru, lfu, fifo, priority, slru) the FULL pass can keep
        # one heap across calls: a stale entry always undercuts its node's true key, so popping
        # and re-pushing stale entries yields the same victims as SGLang's per-call heap.
        self._lazy_heap = bool(getattr(eviction_order, "monotone", False))
        # Orders that key on branch depth (tlru) are told of every node added, split or deleted.
        self._depth_hooks = bool(getattr(eviction_order, "tracks_depth", False))
        self._leaf_heap: list = []
        self.full_evictable = 0
        self.full_protected = 0
        self.swa_evictable = 0
        self.swa_protected = 0
        self.root = self._new_node(_EMPTY, 0)
        # UnifiedTreeCore.reset: the root holds an empty value and a lock on every component.
        self.root.full_lock = 1
        self.root.swa_lock = 1
        self.root.swa = True

    # ------------------------------------------------------------------ helpers
    def _tick(self) -> float:
        # components/base.py:get_and_increase_time_counter (per tree here, not process-global)
        t = self._time
        self._time += 1.0
        return t

    def _new_node(self, key: np.ndarray, length: int, priority: int = 0) -> TreeNode:
        node = TreeNode(self._next_id, key, length, priority)
        self._next_id += 1
        t = self._time  # two ticks: last access, then creation
        node.last_access_time = t
        node.creation_time = t + 1.0
        self._time = t + 2.0
        return node

    def _new_uuid(self) -> int:
        self._next_uuid += 1
        return self._next_uuid

    def _update_leaf(self, node: TreeNode) -> None:
        # UnifiedTreeCore._update_evictable_leaf_sets; the test is UnifiedTreeCore._is_device_leaf
        # (no HiCache: every child has FULL on device)
        if node.full_lock == 0 and node.swa_lock == 0 and not node.children and node is not self.root:
            if node not in self.device_leaves:
                self.device_leaves.add(node)
                if self._lazy_heap:
                    self._push_leaf(node)
        else:
            self.device_leaves.discard(node)

    def _leaf_key(self, node: TreeNode) -> tuple:
        return (self.eviction_order.priority(node, self), node.last_access_time, node.id)

    def _push_leaf(self, node: TreeNode) -> None:
        heapq.heappush(self._leaf_heap, (self._leaf_key(node), node))
        if len(self._leaf_heap) > 4 * len(self.device_leaves) + 64:
            self._leaf_heap = [(self._leaf_key(x), x) for x in self.device_leaves]
            heapq.heapify(self._leaf_heap)

    def _pop_lazy_leaf(self) -> TreeNode | None:
        heap = self._leaf_heap
        while heap:
            key, node = heap[0]
            if node not in self.device_leaves:
                heapq.heappop(heap)
                continue
            true_key = self._leaf_key(node)
            if true_key != key:
                heapq.heapreplace(heap, (true_key, node))
                continue
            heapq.heappop(heap)
            self.eviction_order.on_evicted(key[0])
            return node
        return None

    def _set_swa(self, node: TreeNode) -> None:
        # UnifiedTreeCore.set_component_device_value (via the SWARebuild action)
        assert not node.swa
        node.swa = True
        self.swa_lru.insert_mru(node)
        if node.swa_lock > 0:
            self.swa_protected += node.length
        else:
            self.swa_evictable += node.length

    def _refresh_swa_window(self, node: TreeNode) -> None:
        # LRUList.reset_node_and_window_ancestors_mru(node, root, W + page_size)
        limit = self.window + self.page_size
        prev = self.swa_lru.head
        accumulated = 0
        while node is not self.root and accumulated < limit:
            if node.swa:
                self.swa_lru.move_after(prev, node)
                prev = node
            accumulated += node.length
            node = node.parent

    def _split(self, child: TreeNode, pages: int) -> TreeNode:
        """Split ``child`` after ``pages`` pages; return the new upper node (``_split_node``)."""
        self.counters.splits += 1
        new = self._new_node(child.key[:pages], pages * self.page_size, child.priority)
        new.hit_count = child.hit_count
        new.creation_time = child.creation_time
        new.parent = child.parent
        new.children = {child.key.item(pages): child}
        # FullComponent / SWAComponent.redistribute_on_node_split
        new.full_lock = child.full_lock
        new.swa_lock = child.swa_lock
        new.swa = child.swa
        new.swa_uuid = child.swa_uuid
        child.swa_uuid = None
        child.parent = new
        child.key = child.key[pages:]
        child.length -= new.length
        if child.value is not None:
            new.value = child.value[:pages]
            child.value = child.value[pages:]
        new.parent.children[new.key.item(0)] = new
        if new.swa:
            # the inherited prefix sits just behind its child in the SWA LRU
            self.swa_lru.insert_after(child, new)
        child.last_access_time = self._tick()
        if self._depth_hooks:
            self.eviction_order.on_split(new, child)
        # _update_leaf(new) would be a no-op: a new node with a child is no leaf and in no set
        self._update_leaf(child)
        return new

    # ------------------------------------------------------------------ match
    def match_prefix(self, key: np.ndarray) -> MatchResult:
        """``UnifiedTreeCore._match_prefix_helper`` + ``_match_post_processor``.

        ``key`` is the page-aligned key (page ids). The SWA validator accepts a node only once
        at least W SWA-live tokens follow the last tombstone on the path.
        """
        self.counters.match_calls += 1
        p = self.page_size
        node = self.root
        off = 0
        chunks: list[int] = []
        best = self.root
        best_chunks = 0
        full_hit = 0
        swa_run = float("inf")
        n = len(key)
        while off < n:
            child = node.children.get(key.item(off))
            if child is None:
                break
            m = match_pages(child.key, key, off)
            full_hit += m * p
            partial = m < len(child.key)
            if partial:
                child = self._split(child, m)
            chunks.append(child.length)
            # components/swa.py:create_match_validator
            if child.swa:
                swa_run += child.length
                valid = swa_run >= self.window
            else:
                swa_run = 0
                valid = False
            if valid:
                best = child
                best_chunks = len(chunks)
            node = child
            if partial:
                break
            off += m
        # post-processing: window-bounded SWA refresh, then last_access_time stamps
        self._refresh_swa_window(best)
        t = self._tick()
        x = best
        while x is not None:
            x.last_access_time = t
            t -= 0.00001
            x = x.parent
        prefix = sum(chunks[:best_chunks])
        aligned = full_hit // p * p
        branching = aligned if aligned > prefix else None
        return MatchResult(prefix, best, full_hit, branching)

    # ------------------------------------------------------------------ locks
    def lock(self, node: TreeNode) -> LockReceipt:
        """``UnifiedTreeCore.inc_lock_ref``: FULL path lock + SWA window lock with a receipt."""
        self.counters.lock_calls += 1
        cur = node
        moved = 0
        root = self.root
        leaves = self.device_leaves
        while cur is not root:  # FullComponent.acquire_component_lock
            if cur.full_lock == 0:
                moved += cur.length
            cur.full_lock += 1
            if not cur.children:
                leaves.discard(cur)
            cur = cur.parent
        self.full_evictable -= moved
        self.full_protected += moved
        covered = 0  # SWAComponent.acquire_component_lock
        uuid = None
        cur = node
        while cur is not self.root and covered < self.window:
            if cur.swa_lock == 0 and cur.swa:
                self.swa_evictable -= cur.length
                self.swa_protected += cur.length
            cur.swa_lock += 1
            covered += cur.length
            if covered >= self.window:
                if cur.swa_uuid is None:
                    cur.swa_uuid = self._new_uuid()
                uuid = cur.swa_uuid
            cur = cur.parent
        self._update_leaf(node)
        return LockReceipt(node, uuid)

    def lock_footprint(self, node: TreeNode) -> tuple[int, int]:
        """(FULL, SWA) evictable tokens a ``lock(node)`` would protect (:func:`node.lock_footprint`)."""
        return lock_footprint(self.root, node, self.window)

    def unlock(self, receipt: LockReceipt | None) -> None:
        """``UnifiedTreeCore.dec_lock_ref``: SWA segment first, then the FULL path."""
        if receipt is None:
            return
        self.counters.unlock_calls += 1
        node = receipt.node
        cur = node
        while cur is not self.root:  # SWAComponent.release_component_lock
            assert cur.swa_lock > 0, f"SWA release hit lock_ref=0 on node {cur.id}"
            if cur.swa_lock == 1 and cur.swa:
                self.swa_evictable += cur.length
                self.swa_protected -= cur.length
            cur.swa_lock -= 1
            if cur.swa_lock == 0:
                self._update_leaf(cur)
            if receipt.swa_uuid is not None and cur.swa_uuid == receipt.swa_uuid:
                break
            cur = cur.parent
        cur = node
        freed = 0
        root = self.root
        while cur is not root:  # FullComponent.release_component_lock
            assert cur.full_lock > 0, f"FULL release hit lock_ref=0 on node {cur.id}"
            cur.full_lock -= 1
            if cur.full_lock == 0:
                freed += cur.length
                if not cur.children:  # only a childless node can become a D-leaf
                    self._update_leaf(cur)
            cur = cur.parent
        self.full_evictable += freed
        self.full_protected -= freed
        self._update_leaf(node)

    # ------------------------------------------------------------------ eviction
    def _delete_leaf(self, node: TreeNode, result: EvictResult) -> None:
        """``_delete_unbacked_device_leaf``: free FULL and SWA, unlink, refresh the parent."""
        if node.value is not None:
            self.allocator.apply_op(OpKind.EVICT, EVICTION, node.value)
        else:
            self.allocator.free_full_pages(node.length // self.page_size)
        self.full_evictable -= node.length
        result.full_evicted += node.length
        if node.swa:
            if node.value is None:
                self.allocator.free_swa_pages(node.length // self.page_size)
            self.swa_evictable -= node.length
            result.swa_evicted += node.length
            node.swa = False
            self.swa_lru.remove(node)
        self.device_leaves.discard(node)
        parent = node.parent
        del parent.children[node.key.item(0)]
        node.parent = None
        if self._depth_hooks:
            self.eviction_order.on_deleted(node)
        self._update_leaf(parent)
        self.counters.leaves_deleted += 1
        # _iteratively_delete_tombstone_ancestors stops at once: the parent keeps FULL.

    def _tombstone(self, node: TreeNode, result: EvictResult) -> None:
        """SWA-evict an internal (or FULL-locked) node: free its SWA only."""
        if node.value is not None:
            self.allocator.apply_op(OpKind.TOMBSTONE, EVICTION, node.value)
        else:
            self.allocator.free_swa_pages(node.length // self.page_size)
        self.swa_evictable -= node.length
        result.swa_evicted += node.length
        node.swa = False
        self.swa_lru.remove(node)
        self._update_leaf(node)
        self.counters.tombstones_created += 1

    def evict_for_alloc(self, full_shortfall: int, swa_shortfall: int) -> EvictResult:
        """``UnifiedRadixCache.evict_for_alloc`` / ``_evict_components`` (FULL pass, then SWA).

        Shortfalls become availability targets: each pass stops at the first victim after
        which its pool has ``available >= available_before + shortfall``.
        """
        alloc = self.allocator
        result = EvictResult()
        self.counters.evict_calls += 1
        full_target = alloc.full_available_size() + full_shortfall if full_shortfall > 0 else None
        swa_target = alloc.swa_available_size() + swa_shortfall if swa_shortfall > 0 else None

        def full_reached() -> bool:
            return full_target is not None and alloc.full_available_size() >= full_target

        def swa_reached() -> bool:
            return swa_target is not None and alloc.swa_available_size() >= swa_target

        if full_shortfall > 0 and not full_reached():
            quota = max(full_shortfall, result.full_evicted + self.full_evictable)
            order = self.eviction_order
            if not self._lazy_heap:
                heap = [(order.priority(x, self), x.last_access_time, x.id, x) for x in self.device_leaves]
                heapq.heapify(heap)
            last_parent: TreeNode | None = None
            while True:  # FullComponent._evict_device_next_node
                if not self._lazy_heap and last_parent is not None and last_parent in self.device_leaves:
                    par = last_parent
                    heapq.heappush(heap, (order.priority(par, self), par.last_access_time, par.id, par))
                last_parent = None
                victim = None
                if result.full_evicted < quota:
                    if self._lazy_heap:
                        victim = self._pop_lazy_leaf()
                    else:
                        while heap:
                            entry = heapq.heappop(heap)
                            if entry[3] in self.device_leaves:
                                victim = entry[3]
                                order.on_evicted(entry[0])
                                break
                if victim is None:
                    break
                last_parent = victim.parent
                self._delete_leaf(victim, result)
                if full_reached():
                    break
        if swa_shortfall > 0 and not swa_reached() and result.swa_evicted < swa_shortfall:
            lru = self.swa_lru
            cursor = lru.lru_unlocked()
            while True:  # SWAComponent._evict_device_next_node
                if cursor is not None and not lru.in_list(cursor):
                    cursor = lru.lru_unlocked()
                if result.swa_evicted >= swa_shortfall or cursor is None:
                    break
                x = cursor
                cursor = lru.prev_unlocked(x)
                if x in self.device_leaves:
                    self._delete_leaf(x, result)
                else:
                    self._tombstone(x, result)
                if swa_reached():
                    break
        self.counters.full_evicted += result.full_evicted
        self.counters.swa_evicted += result.swa_evicted
        return result

    # ------------------------------------------------------------------ views
    def path_length(self, node: TreeNode) -> int:
        n = 0
        while node is not self.root:
            n += node.length
            node = node.parent
        return n

    def iter_nodes(self):
        return iter_subtree(self.root)

    def stats(self) -> dict:
        return subtree_stats(self.root)


# ---------------------------------------------------------------------- the compiled core
#: The pure-Python class, whichever class ``UnifiedSWARadixTree`` names below.
PureUnifiedSWARadixTree = UnifiedSWARadixTree


def compiled_tree_class() -> type | None:
    """The Cython build of this class (``_core_tree.pyx``), or None where it was not built."""
    try:
        from simulator.radix._core_tree import UnifiedSWARadixTree as compiled
    except ImportError:
        return None
    return compiled


def pure_python_requested() -> bool:
    """``KVPLAN_PURE_PYTHON=1``: run the pure-Python tree even where the compiled one is built."""
    return os.environ.get("KVPLAN_PURE_PYTHON") == "1"


if not pure_python_requested():
    UnifiedSWARadixTree = compiled_tree_class() or PureUnifiedSWARadixTree  # type: ignore[misc]


def compiled_core(tree: object) -> object | None:
    """``tree`` where it is the compiled class (the compiled cache controller then calls its API
    in C, ``cache.pxd``), else None (the pure-Python tree, or HiCache's)."""
    if UnifiedSWARadixTree is PureUnifiedSWARadixTree:
        return None
    return tree if type(tree) is UnifiedSWARadixTree else None
