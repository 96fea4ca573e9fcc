# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled unified tree's state, node helpers and eviction (``TreeCore``); the tree class
with match, locks and insert is :class:`simulator.radix._core_tree.UnifiedSWARadixTree`.

The same algorithm step for step as the pure-Python :class:`simulator.radix.unified.UnifiedSWARadixTree`
(see its methods for the SGLang function each one follows), so results are bit for bit equal:
the same ticks (the only floats: the same IEEE double operations in the same order), the same
heap keys, the same calls into the allocator and the eviction order. The eviction order's key is
computed in C for the exact ``LRU`` class (the default, on a C heap); any other order is called
through Python.
"""

cimport cython
cimport numpy as cnp
from cpython.pycapsule cimport PyCapsule_GetPointer

from simulator.radix._alloc_ops cimport AllocOps

from simulator.radix._core_heap cimport LruLeafHeap
from simulator.radix._core_node cimport (
    SwaLRUList,
    TreeNode,
    new_node,
    node_first_key,
    node_key_at,
    unlink_tree,
)

from heapq import heapify, heappop, heappush, heapreplace

import numpy as np

from policies.eviction_order import LRU
from simulator.memory_ops import EVICTION, OpKind
from simulator.radix.node import iter_subtree
from simulator.radix.tree_results import EvictResult, TreeCounters

cnp.import_array()

cdef cnp.ndarray _EMPTY = np.empty(0, dtype=np.int64)
cdef object _EVICT = OpKind.EVICT
cdef object _TOMBSTONE = OpKind.TOMBSTONE
cdef object _ALLOC_OPS = None  # (allocator class, capsule) once loaded; False: not available


cdef const AllocOps* alloc_ops(object allocator) except? NULL:
    """The compiled allocator's C frees and sizes for ``allocator`` where it is exactly the
    compiled class (``_core_alloc.pyx``), else NULL (then the tree calls it through Python)."""
    global _ALLOC_OPS
    if _ALLOC_OPS is None:
        try:  # fails where simulator.kv_allocator loads as source (its C layout is checked)
            from simulator.radix._core_alloc import ALLOCATOR, OPS
            _ALLOC_OPS = (ALLOCATOR, OPS)
        except Exception:
            _ALLOC_OPS = False
    if _ALLOC_OPS is False or type(allocator) is not _ALLOC_OPS[0]:
        return NULL
    return <const AllocOps*>PyCapsule_GetPointer(_ALLOC_OPS[1], b"simulator.radix._core_alloc.AllocOps")


@cython.no_gc_clear  # its dealloc unlinks the tree's nodes (not GC-tracked): keep its fields
cdef class TreeCore:
    """The compiled tree's fields (the pure-Python tree's attributes) and its non-API steps."""

    def __init__(self, long long page_size, long long sliding_window_size, allocator, eviction_order):
        self.page_size = page_size
        self.window = sliding_window_size
        self.allocator = allocator
        self._ops = alloc_ops(allocator)
        self._ops_allocator = allocator
        self.eviction_order = eviction_order
        self._time = 0.0
        self._next_id = 0
        self._next_uuid = 0
        self.swa_lru = SwaLRUList()
        self.device_leaves = set()
        self._lazy_heap = bool(getattr(eviction_order, "monotone", False))
        self._depth_hooks = bool(getattr(eviction_order, "tracks_depth", False))
        self._lru_key = type(eviction_order) is LRU
        self._leaf_heap = []
        self._lru_heap = LruLeafHeap() if self._lazy_heap and self._lru_key else None
        self.root = self._new_node(_EMPTY, 0, 0, 0, 0)
        self.root.full_lock = 1
        self.root.swa_lock = 1
        self.root.swa = True

    def __dealloc__(self):
        unlink_tree(self.root)  # the nodes are not GC-tracked (_core_node.pyx)

    @property
    def counters(self):
        """The cumulative tree events (a fresh :class:`TreeCounters` snapshot)."""
        return TreeCounters(
            match_calls=self.n_match,
            insert_calls=self.n_insert,
            lock_calls=self.n_lock,
            unlock_calls=self.n_unlock,
            evict_calls=self.n_evict,
            full_evicted=self.n_full_evicted,
            swa_evicted=self.n_swa_evicted,
            leaves_deleted=self.n_leaves_deleted,
            tombstones_created=self.n_tomb_created,
            tombstones_healed=self.n_tomb_healed,
            tombstone_tokens_healed=self.n_tomb_tokens_healed,
            splits=self.n_splits,
        )

    # ------------------------------------------------------------------ helpers
    cdef double _tick(self):
        cdef double t = self._time
        self._time += 1.0
        return t

    cdef void _free_full_pages(self, long long n) except *:
        if self._ops is not NULL and self.allocator is self._ops_allocator:
            self._ops.free_full_pages(self.allocator, n)
        else:
            self.allocator.free_full_pages(n)

    cdef void _free_swa_pages(self, long long n) except *:
        if self._ops is not NULL and self.allocator is self._ops_allocator:
            self._ops.free_swa_pages(self.allocator, n)
        else:
            self.allocator.free_swa_pages(n)

    cdef long long _full_available(self) except? -1:
        if self._ops is not NULL and self.allocator is self._ops_allocator:
            return self._ops.full_available_size(self.allocator)
        return self.allocator.full_available_size()

    cdef long long _swa_available(self) except? -1:
        if self._ops is not NULL and self.allocator is self._ops_allocator:
            return self._ops.swa_available_size(self.allocator)
        return self.allocator.swa_available_size()

    cdef TreeNode _new_node(
        self, cnp.ndarray kbase, Py_ssize_t koff, Py_ssize_t klen, long long length, long long priority
    ):
        cdef TreeNode node = new_node(self._next_id, kbase, koff, klen, length, priority)
        self._next_id += 1
        cdef double t = self._time  # two ticks: last access, then creation
        node.last_access_time = t
        node.creation_time = t + 1.0
        self._time = t + 2.0
        return node

    cdef void _update_leaf(self, TreeNode node) except *:
        # ``node.listed`` mirrors membership of ``device_leaves``: no set look-up where the
        # answer is known (the set sees the same adds and removals, less the no-op ones)
        if node.full_lock == 0 and node.swa_lock == 0 and not node.children and node is not self.root:
            if not node.listed:
                node.listed = True
                self.device_leaves.add(node)
                if self._lazy_heap:
                    self._push_leaf(node)
        elif node.listed:
            node.listed = False
            self.device_leaves.discard(node)

    cdef object _leaf_key(self, TreeNode node):
        if self._lru_key:
            return (node.last_access_time, node.last_access_time, node.id)
        return (self.eviction_order.priority(node, self), node.last_access_time, node.id)

    cdef void _push_leaf(self, TreeNode node) except *:
        cdef LruLeafHeap lh = self._lru_heap
        if lh is not None:
            lh.push(node.last_access_time, node.id, node)
            if lh.n > 4 * len(self.device_leaves) + 64:
                lh.clear()
                for x in self.device_leaves:
                    lh.push((<TreeNode>x).last_access_time, (<TreeNode>x).id, x)
            return
        heappush(self._leaf_heap, (self._leaf_key(node), node))
        if len(self._leaf_heap) > 4 * len(self.device_leaves) + 64:
            self._leaf_heap = [(self._leaf_key(x), x) for x in self.device_leaves]
            heapify(self._leaf_heap)

    cdef TreeNode _pop_lazy_leaf(self):
        cdef TreeNode node
        if self._lru_heap is not None:
            return self._pop_lru_leaf()
        cdef list heap = self._leaf_heap
        cdef tuple entry
        while heap:
            entry = <tuple>heap[0]
            key = entry[0]
            node = <TreeNode>entry[1]
            if not node.listed:
                heappop(heap)
                continue
            true_key = self._leaf_key(node)
            if true_key != key:
                heapreplace(heap, (true_key, node))
                continue
            heappop(heap)
            if not self._lru_key:
                self.eviction_order.on_evicted(key[0])
            return node
        return None

    cdef TreeNode _pop_lru_leaf(self):
        """``_pop_lazy_leaf`` on the C heap: a stale entry's key undercuts its node's true key."""
        cdef LruLeafHeap lh = self._lru_heap
        cdef TreeNode node
        while lh.n:
            node = <TreeNode>lh.items[0].node
            if not node.listed:
                lh.pop()
                continue
            if node.last_access_time != lh.items[0].last_access_time:
                lh.replace_top(node.last_access_time, node.id, node)
                continue
            lh.pop()
            return node
        return None

    cdef void _set_swa(self, TreeNode node) except *:
        assert not node.swa
        node.swa = True
        self.swa_lru.c_insert_mru(node)
        if node.swa_lock > 0:
            self.swa_protected += node.length
        else:
            self.swa_evictable += node.length

    cdef void _refresh_swa_window(self, TreeNode node) except *:
        cdef long long limit = self.window + self.page_size
        cdef SwaLRUList lru = self.swa_lru
        cdef TreeNode prev = lru.head
        cdef TreeNode root = self.root
        cdef long long accumulated = 0
        while node is not root and accumulated < limit:
            if node.swa:
                lru.c_move_after(prev, node)
                prev = node
            accumulated += node.length
            node = node.parent

    cdef TreeNode _split(self, TreeNode child, Py_ssize_t pages):
        self.n_splits += 1
        cdef TreeNode new = self._new_node(
            child.kbase, child.koff, pages, pages * self.page_size, child.priority
        )
        new.hit_count = child.hit_count
        new.creation_time = child.creation_time
        new.parent = child.parent
        new.first_key = node_first_key(child)  # new takes child's place in the parent
        cdef object tail_key = node_key_at(child, pages)
        new.children = {tail_key: child}
        child.first_key = tail_key
        new.full_lock = child.full_lock
        new.swa_lock = child.swa_lock
        new.swa = child.swa
        new.swa_uuid = child.swa_uuid
        child.swa_uuid = None
        child.parent = new
        child.koff += pages  # the key's tail: pages [pages, klen) of the old key
        child.klen -= pages
        child.length -= new.length
        if child.value is not None:
            new.value = child.value[:pages]
            child.value = child.value[pages:]
        new.parent.children[new.first_key] = new
        if new.swa:
            self.swa_lru.c_insert_after(child, new)
        child.last_access_time = self._tick()
        if self._depth_hooks:
            self.eviction_order.on_split(new, child)
        self._update_leaf(child)
        return new


    # ------------------------------------------------------------------ eviction
    cdef void _delete_leaf(self, TreeNode node, long long* full_ev, long long* swa_ev) except *:
        """``_delete_unbacked_device_leaf``: free FULL and SWA, unlink, refresh the parent."""
        if node.value is not None:
            self.allocator.apply_op(_EVICT, EVICTION, node.value)
        else:
            self._free_full_pages(node.length // self.page_size)
        self.full_evictable -= node.length
        full_ev[0] += node.length
        if node.swa:
            if node.value is None:
                self._free_swa_pages(node.length // self.page_size)
            self.swa_evictable -= node.length
            swa_ev[0] += node.length
            node.swa = False
            self.swa_lru.c_remove(node)
        if node.listed:
            node.listed = False
            self.device_leaves.discard(node)
        cdef TreeNode parent = node.parent
        del parent.children[node_first_key(node)]
        node.parent = None
        if self._depth_hooks:
            self.eviction_order.on_deleted(node)
        self._update_leaf(parent)
        self.n_leaves_deleted += 1

    cdef void _tombstone(self, TreeNode node, long long* swa_ev) except *:
        """SWA-evict an internal (or FULL-locked) node: free its SWA only."""
        if node.value is not None:
            self.allocator.apply_op(_TOMBSTONE, EVICTION, node.value)
        else:
            self._free_swa_pages(node.length // self.page_size)
        self.swa_evictable -= node.length
        swa_ev[0] += node.length
        node.swa = False
        self.swa_lru.c_remove(node)
        self._update_leaf(node)
        self.n_tomb_created += 1

    def evict_for_alloc(self, long long full_shortfall, long long swa_shortfall):
        """``UnifiedRadixCache.evict_for_alloc`` / ``_evict_components`` (FULL pass, then SWA)."""
        full_ev, swa_ev = self.c_evict(full_shortfall, swa_shortfall)
        return EvictResult(full_ev, swa_ev)

    cpdef tuple c_evict(self, long long full_shortfall, long long swa_shortfall):
        """``evict_for_alloc`` as (FULL, SWA) tokens evicted: the compiled cache controller's
        call (no result object)."""
        cdef long long full_ev = 0, swa_ev = 0
        self.n_evict += 1
        cdef long long full_target = self._full_available() + full_shortfall if full_shortfall > 0 else 0
        cdef long long swa_target = self._swa_available() + swa_shortfall if swa_shortfall > 0 else 0
        if full_shortfall > 0 and not self._full_available() >= full_target:
            self._evict_full(full_shortfall, full_target, &full_ev, &swa_ev)
        if (
            swa_shortfall > 0
            and not self._swa_available() >= swa_target
            and swa_ev < swa_shortfall
        ):
            self._evict_swa(swa_shortfall, swa_target, &full_ev, &swa_ev)
        self.n_full_evicted += full_ev
        self.n_swa_evicted += swa_ev
        return full_ev, swa_ev

    cdef void _evict_full(
        self, long long shortfall, long long target, long long* full_ev, long long* swa_ev
    ) except *:
        """FullComponent._evict_device_next_node until ``target`` FULL tokens are available."""
        cdef long long quota = max(shortfall, full_ev[0] + self.full_evictable)
        order = self.eviction_order
        cdef bint lazy = self._lazy_heap
        cdef list heap
        cdef tuple entry
        if not lazy:
            heap = [(order.priority(x, self), (<TreeNode>x).last_access_time, (<TreeNode>x).id, x)
                    for x in self.device_leaves]
            heapify(heap)
        cdef TreeNode last_parent = None
        cdef TreeNode victim, par
        while True:
            if not lazy and last_parent is not None and last_parent.listed:
                par = last_parent
                heappush(heap, (order.priority(par, self), par.last_access_time, par.id, par))
            last_parent = None
            victim = None
            if full_ev[0] < quota:
                if lazy:
                    victim = self._pop_lazy_leaf()
                else:
                    while heap:
                        entry = <tuple>heappop(heap)
                        if (<TreeNode>entry[3]).listed:
                            victim = <TreeNode>entry[3]
                            order.on_evicted(entry[0])
                            break
            if victim is None:
                break
            last_parent = victim.parent
            self._delete_leaf(victim, full_ev, swa_ev)
            if self._full_available() >= target:
                break

    cdef void _evict_swa(
        self, long long shortfall, long long target, long long* full_ev, long long* swa_ev
    ) except *:
        """SWAComponent._evict_device_next_node: from the SWA LRU's tail, skipping locked nodes."""
        cdef SwaLRUList lru = self.swa_lru
        cdef TreeNode cursor = lru.c_prev_unlocked(lru.tail)
        cdef TreeNode x
        while True:
            if cursor is not None and not cursor.in_swa_lru:
                cursor = lru.c_prev_unlocked(lru.tail)
            if swa_ev[0] >= shortfall or cursor is None:
                break
            x = cursor
            cursor = lru.c_prev_unlocked(x)
            if x.listed:
                self._delete_leaf(x, full_ev, swa_ev)
            else:
                self._tombstone(x, swa_ev)
            if self._swa_available() >= target:
                break

    # ------------------------------------------------------------------ the API (_core_tree.pyx)
    cpdef match_prefix(self, key):
        raise NotImplementedError

    cpdef tuple c_match(self, key, Py_ssize_t n_pages):
        raise NotImplementedError

    cpdef lock(self, TreeNode node):
        raise NotImplementedError

    cpdef unlock(self, receipt):
        raise NotImplementedError

    cpdef tuple c_insert(
        self,
        key,
        Py_ssize_t n_pages,
        long long prev_prefix_len,
        long long inserted_len,
        long long swa_evicted_seqlen,
        long long priority,
        protected_node,
        values,
        reason,
    ):
        raise NotImplementedError

    cpdef tuple lock_footprint(self, TreeNode node):
        """(FULL, SWA) evictable tokens a ``lock(node)`` would protect (``node.lock_footprint``)."""
        cdef long long full = 0, swa = 0, covered = 0
        cdef TreeNode root = self.root
        cdef TreeNode cur = node
        while cur is not root:
            if cur.full_lock == 0:
                full += cur.length
            cur = cur.parent
        cur = node
        while cur is not root and covered < self.window:
            if cur.swa_lock == 0 and cur.swa:
                swa += cur.length
            covered += cur.length
            cur = cur.parent
        return full, swa

    # ------------------------------------------------------------------ views
    def path_length(self, TreeNode node):
        cdef long long n = 0
        while node is not self.root:
            n += node.length
            node = node.parent
        return n

    def iter_nodes(self):
        return iter_subtree(self.root)

    def stats(self):
        """``node.subtree_stats(self.root)``, walked in C (the end-of-run summary reads it)."""
        cdef long long nodes = 0, leaves = 0, tombstones = 0, tomb_tokens = 0
        cdef long long full_tokens = 0, swa_tokens = 0
        cdef list stack = list(self.root.children.values())
        cdef TreeNode x
        while stack:
            x = <TreeNode>stack.pop()
            nodes += 1
            if not x.children:
                leaves += 1
            else:
                stack.extend(x.children.values())
            full_tokens += x.length
            if x.swa:
                swa_tokens += x.length
            else:
                tombstones += 1
                tomb_tokens += x.length
        return dict(
            nodes=nodes,
            leaves=leaves,
            tombstones=tombstones,
            tombstone_tokens=tomb_tokens,
            full_tokens=full_tokens,
            swa_tokens=swa_tokens,
        )
