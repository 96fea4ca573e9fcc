# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled unified FULL+SWA radix tree: :class:`simulator.radix.unified.UnifiedSWARadixTree`
(with its insert mixin :class:`~simulator.radix.unified_insert.UnifiedInsert`) as a Cython class.

The same algorithm step for step, so results are bit for bit those of the pure-Python class
(``tests/test_compiled_core.py`` replays workloads through both): the same ticks (the only
floats, the same IEEE double operations in the same order), the same heap keys, the same calls
into the allocator and the eviction order. See the pure-Python methods for the SGLang function
each one follows (``python/sglang/srt/mem_cache/unified_cache/unified_tree_core.py`` and its
FULL and SWA components). The eviction order's key is computed in C for the exact ``LRU`` class
(the default); any other order is called through Python.
"""

cimport cython
cimport numpy as cnp
from libc.math cimport INFINITY
from libc.stdint cimport int64_t

from simulator.radix._core_heap cimport LruLeafHeap
from simulator.radix._core_node cimport SwaLRUList, TreeNode, key_at, match_keys, new_node

from heapq import heapify, heappop, heappush, heapreplace

import numpy as np

from policies.eviction_order import LRU
from simulator.memory_ops import EVICTION, OpKind
from simulator.radix.node import iter_subtree, subtree_stats
from simulator.radix.tree_results import EvictResult, MatchResult, TreeCounters
from simulator.request_kv import LockReceipt

cnp.import_array()

cdef cnp.ndarray _EMPTY = np.empty(0, dtype=np.int64)
cdef object _EVICT = OpKind.EVICT
cdef object _TOMBSTONE = OpKind.TOMBSTONE
cdef object _REMAP_SWA = OpKind.REMAP_SWA
cdef object _FREE_FULL = OpKind.FREE_FULL
cdef object _FREE = OpKind.FREE


cdef inline cnp.ndarray as_key(object key):
    """``key`` as a 1-D contiguous int64 array (page ids), copied only when it is not one."""
    cdef cnp.ndarray a
    if isinstance(key, cnp.ndarray):
        a = <cnp.ndarray>key
        if (
            cnp.PyArray_TYPE(a) == cnp.NPY_INT64
            and cnp.PyArray_NDIM(a) == 1
            and cnp.PyArray_IS_C_CONTIGUOUS(a)
        ):
            return a
    return np.ascontiguousarray(key, dtype=np.int64).reshape(-1)


@cython.final
cdef class UnifiedSWARadixTree:
    """:class:`simulator.radix.unified.UnifiedSWARadixTree`, compiled (same attributes)."""

    generation = "unified"

    cdef public long long page_size
    cdef public long long window
    cdef public object allocator
    cdef public object eviction_order
    cdef public double _time
    cdef public long long _next_id
    cdef public long long _next_uuid
    cdef public SwaLRUList swa_lru
    cdef public set device_leaves
    cdef public bint _lazy_heap
    cdef public bint _depth_hooks
    cdef public list _leaf_heap
    cdef public long long full_evictable
    cdef public long long full_protected
    cdef public long long swa_evictable
    cdef public long long swa_protected
    cdef public TreeNode root
    cdef bint _lru_key  # the order is exactly LRU: its key in C, no on_evicted hook
    cdef LruLeafHeap _lru_heap  # the lazy heap in C, for exactly LRU (else ``_leaf_heap``)
    # TreeCounters, as C counts (``counters`` builds the dataclass)
    cdef long long n_match, n_insert, n_lock, n_unlock, n_evict, n_full_evicted, n_swa_evicted
    cdef long long n_leaves_deleted, n_tomb_created, n_tomb_healed, n_tomb_tokens_healed, n_splits

    def __init__(self, long long page_size, long long sliding_window_size, allocator, eviction_order):
        self.page_size = page_size
        self.window = sliding_window_size
        self.allocator = allocator
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
        self.root = self._new_node(_EMPTY, 0, 0)
        self.root.full_lock = 1
        self.root.swa_lock = 1
        self.root.swa = True

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
    cdef inline double _tick(self):
        cdef double t = self._time
        self._time += 1.0
        return t

    cdef TreeNode _new_node(self, cnp.ndarray key, long long length, long long priority):
        cdef TreeNode node = new_node(self._next_id, key, length, priority)
        self._next_id += 1
        cdef double t = self._time  # two ticks: last access, then creation
        node.last_access_time = t
        node.creation_time = t + 1.0
        self._time = t + 2.0
        return node

    cdef void _update_leaf(self, TreeNode node) except *:
        if node.full_lock == 0 and node.swa_lock == 0 and not node.children and node is not self.root:
            if node not in self.device_leaves:
                self.device_leaves.add(node)
                if self._lazy_heap:
                    self._push_leaf(node)
        else:
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
            if node not in self.device_leaves:
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
            if node not in self.device_leaves:
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
        cdef TreeNode new = self._new_node(child.key[:pages], pages * self.page_size, child.priority)
        new.hit_count = child.hit_count
        new.creation_time = child.creation_time
        new.parent = child.parent
        new.children = {key_at(child.key, pages): child}
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
        new.parent.children[key_at(new.key, 0)] = new
        if new.swa:
            self.swa_lru.c_insert_after(child, new)
        child.last_access_time = self._tick()
        if self._depth_hooks:
            self.eviction_order.on_split(new, child)
        self._update_leaf(child)
        return new

    # ------------------------------------------------------------------ match
    def match_prefix(self, key):
        """``UnifiedTreeCore._match_prefix_helper`` + ``_match_post_processor``."""
        cdef cnp.ndarray k = as_key(key)
        self.n_match += 1
        cdef long long p = self.page_size
        cdef TreeNode node = self.root
        cdef TreeNode best = self.root
        cdef TreeNode child
        cdef Py_ssize_t off = 0
        cdef Py_ssize_t n = cnp.PyArray_DIM(k, 0)
        cdef Py_ssize_t m
        cdef long long full_hit = 0, acc = 0, prefix = 0
        cdef double swa_run = INFINITY
        cdef bint partial, valid
        while off < n:
            child = node.children.get(key_at(k, off))
            if child is None:
                break
            m = match_keys(child.key, k, off)
            full_hit += m * p
            partial = m < cnp.PyArray_DIM(child.key, 0)
            if partial:
                child = self._split(child, m)
            acc += child.length
            if child.swa:  # components/swa.py:create_match_validator
                swa_run += child.length
                valid = swa_run >= self.window
            else:
                swa_run = 0
                valid = False
            if valid:
                best = child
                prefix = acc
            node = child
            if partial:
                break
            off += m
        self._refresh_swa_window(best)
        cdef double t = self._tick()
        cdef TreeNode x = best
        while x is not None:
            x.last_access_time = t
            t -= 0.00001
            x = x.parent
        cdef long long aligned = full_hit // p * p
        return MatchResult(prefix, best, full_hit, aligned if aligned > prefix else None)

    # ------------------------------------------------------------------ locks
    def lock(self, TreeNode node):
        """``UnifiedTreeCore.inc_lock_ref``: FULL path lock + SWA window lock with a receipt."""
        self.n_lock += 1
        cdef TreeNode cur = node
        cdef TreeNode root = self.root
        cdef set leaves = self.device_leaves
        cdef long long moved = 0, covered = 0
        while cur is not root:
            if cur.full_lock == 0:
                moved += cur.length
            cur.full_lock += 1
            if not cur.children:
                leaves.discard(cur)
            cur = cur.parent
        self.full_evictable -= moved
        self.full_protected += moved
        uuid = None
        cur = node
        while cur is not root and covered < self.window:
            if cur.swa_lock == 0 and cur.swa:
                self.swa_evictable -= cur.length
                self.swa_protected += cur.length
            cur.swa_lock += 1
            covered += cur.length
            if covered >= self.window:
                if cur.swa_uuid is None:
                    self._next_uuid += 1
                    cur.swa_uuid = self._next_uuid
                uuid = cur.swa_uuid
            cur = cur.parent
        self._update_leaf(node)
        return LockReceipt(node, uuid)

    def lock_footprint(self, TreeNode node):
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

    def unlock(self, receipt):
        """``UnifiedTreeCore.dec_lock_ref``: SWA segment first, then the FULL path."""
        if receipt is None:
            return
        self.n_unlock += 1
        cdef TreeNode node = receipt.node
        uuid = receipt.swa_uuid
        cdef TreeNode root = self.root
        cdef TreeNode cur = node
        cdef long long freed = 0
        while cur is not root:  # SWAComponent.release_component_lock
            assert cur.swa_lock > 0, f"SWA release hit lock_ref=0 on node {cur.id}"
            if cur.swa_lock == 1 and cur.swa:
                self.swa_evictable += cur.length
                self.swa_protected -= cur.length
            cur.swa_lock -= 1
            if cur.swa_lock == 0:
                self._update_leaf(cur)
            if uuid is not None and cur.swa_uuid == uuid:
                break
            cur = cur.parent
        cur = node
        while cur is not root:  # FullComponent.release_component_lock
            assert cur.full_lock > 0, f"FULL release hit lock_ref=0 on node {cur.id}"
            cur.full_lock -= 1
            if cur.full_lock == 0:
                freed += cur.length
                if not cur.children:
                    self._update_leaf(cur)
            cur = cur.parent
        self.full_evictable += freed
        self.full_protected -= freed
        self._update_leaf(node)

    # ------------------------------------------------------------------ eviction
    cdef void _delete_leaf(self, TreeNode node, long long* full_ev, long long* swa_ev) except *:
        """``_delete_unbacked_device_leaf``: free FULL and SWA, unlink, refresh the parent."""
        if node.value is not None:
            self.allocator.apply_op(_EVICT, EVICTION, node.value)
        else:
            self.allocator.free_full_pages(node.length // self.page_size)
        self.full_evictable -= node.length
        full_ev[0] += node.length
        if node.swa:
            if node.value is None:
                self.allocator.free_swa_pages(node.length // self.page_size)
            self.swa_evictable -= node.length
            swa_ev[0] += node.length
            node.swa = False
            self.swa_lru.c_remove(node)
        self.device_leaves.discard(node)
        cdef TreeNode parent = node.parent
        del parent.children[key_at(node.key, 0)]
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
            self.allocator.free_swa_pages(node.length // self.page_size)
        self.swa_evictable -= node.length
        swa_ev[0] += node.length
        node.swa = False
        self.swa_lru.c_remove(node)
        self._update_leaf(node)
        self.n_tomb_created += 1

    def evict_for_alloc(self, long long full_shortfall, long long swa_shortfall):
        """``UnifiedRadixCache.evict_for_alloc`` / ``_evict_components`` (FULL pass, then SWA)."""
        alloc = self.allocator
        cdef long long full_ev = 0, swa_ev = 0
        self.n_evict += 1
        cdef long long full_target = alloc.full_available_size() + full_shortfall if full_shortfall > 0 else 0
        cdef long long swa_target = alloc.swa_available_size() + swa_shortfall if swa_shortfall > 0 else 0
        if full_shortfall > 0 and not alloc.full_available_size() >= full_target:
            self._evict_full(full_shortfall, full_target, &full_ev, &swa_ev)
        if (
            swa_shortfall > 0
            and not alloc.swa_available_size() >= swa_target
            and swa_ev < swa_shortfall
        ):
            self._evict_swa(swa_shortfall, swa_target, &full_ev, &swa_ev)
        self.n_full_evicted += full_ev
        self.n_swa_evicted += swa_ev
        return EvictResult(full_ev, swa_ev)

    cdef void _evict_full(
        self, long long shortfall, long long target, long long* full_ev, long long* swa_ev
    ) except *:
        """FullComponent._evict_device_next_node until ``target`` FULL tokens are available."""
        alloc = self.allocator
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
            if not lazy and last_parent is not None and last_parent in self.device_leaves:
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
                        if entry[3] in self.device_leaves:
                            victim = <TreeNode>entry[3]
                            order.on_evicted(entry[0])
                            break
            if victim is None:
                break
            last_parent = victim.parent
            self._delete_leaf(victim, full_ev, swa_ev)
            if alloc.full_available_size() >= target:
                break

    cdef void _evict_swa(
        self, long long shortfall, long long target, long long* full_ev, long long* swa_ev
    ) except *:
        """SWAComponent._evict_device_next_node: from the SWA LRU's tail, skipping locked nodes."""
        alloc = self.allocator
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
            if x in self.device_leaves:
                self._delete_leaf(x, full_ev, swa_ev)
            else:
                self._tombstone(x, swa_ev)
            if alloc.swa_available_size() >= target:
                break

    # ------------------------------------------------------------------ insert
    def insert(
        self,
        key,
        long long prev_prefix_len,
        long long inserted_len,
        long long swa_evicted_seqlen,
        long long priority=0,
        protected_node=None,
        values=None,
        reason="",
    ):
        """``UnifiedTreeCore.begin_insert`` .. ``_insert_tail_step`` (``UnifiedInsert.insert``)."""
        cdef cnp.ndarray k = as_key(key)
        self.n_insert += 1
        cdef long long p = self.page_size
        cdef TreeNode root = self.root
        root.last_access_time = self._tick()
        root.priority = max(root.priority, priority)
        cdef Py_ssize_t n = cnp.PyArray_DIM(k, 0)
        if n == 0:
            return 0, root
        cdef TreeNode node = root
        cdef TreeNode child, target
        cdef long long total = 0, node_end, consumed_from, live_start, dup_start
        cdef Py_ssize_t off, m
        if protected_node is not None and protected_node is not root and prev_prefix_len <= n * p:
            total = self._walk_protected(protected_node, priority, inserted_len)
            assert total == prev_prefix_len, (total, prev_prefix_len)
            node = protected_node
        off = total // p
        while off < n:
            child = node.children.get(key_at(k, off))
            if child is None:
                break
            child.last_access_time = self._tick()  # _touch_node (SWA WALKDOWN: no refresh)
            m = match_keys(child.key, k, off)
            if m < cnp.PyArray_DIM(child.key, 0):
                child = self._split(child, m)
            if child.priority < priority:
                child.priority = priority
            node_end = total + m * p
            consumed_from = m * p
            if prev_prefix_len < node_end and not child.swa:  # heal a tombstone in-window
                live_start = max(total, swa_evicted_seqlen)
                if live_start < node_end:
                    self._heal(child, total, live_start, node_end, values, reason)
                    consumed_from = live_start - total
            dup_start = max(0, prev_prefix_len - total)  # _insert_overlap_step
            if dup_start < consumed_from:
                self._free_duplicates(
                    total + dup_start, total + consumed_from, swa_evicted_seqlen, values, reason
                )
            if node_end > inserted_len:  # _finish_insert_walk_node
                child.hit_count += 1
            node = child
            total = node_end
            off += m
        if off < n:  # _insert_commit_step
            target = self._commit_leaf(node, k[off:], total, swa_evicted_seqlen, inserted_len, priority)
            if values is not None:
                self._adopt_values(target, values)
        else:
            target = node
        if target is not root:  # _insert_tail_step: SWA INSERT_END refresh
            self._refresh_swa_window(target)
        return total, target

    cdef long long _walk_protected(self, TreeNode protected_node, long long priority, long long inserted_len) except? -1:
        """The insert walk over the request's locked prefix (one tick per node)."""
        cdef list path = []
        cdef TreeNode x = protected_node
        cdef TreeNode root = self.root
        while x is not root:
            path.append(x)
            x = x.parent
        cdef double t = self._time
        cdef long long total = 0
        cdef Py_ssize_t i
        for i in range(len(path) - 1, -1, -1):
            x = <TreeNode>path[i]
            x.last_access_time = t
            t += 1.0
            if x.priority < priority:
                x.priority = priority
            total += x.length
            if total > inserted_len:
                x.hit_count += 1
        self._time = t
        return total

    cdef void _heal(
        self, TreeNode child, long long total, long long live_start, long long node_end, values, reason
    ) except *:
        """``_recover_from_incoming``: the request's live SWA pages move to a tombstone."""
        cdef long long p = self.page_size
        if live_start > total:
            self._split(child, (live_start - total) // p)
        cdef long long healed = node_end - live_start
        alloc = self.allocator
        if values is None:
            alloc.free_full_pages(healed // p)
        else:
            incoming = values[live_start // p : node_end // p]
            if child.full_lock > 0:  # keep the node's FULL, point it at the incoming SWA
                alloc.apply_op(_REMAP_SWA, reason, child.value, src=incoming)
                alloc.apply_op(_FREE_FULL, reason, incoming)
            else:  # the node adopts the request's FULL (and its SWA peers)
                alloc.apply_op(_FREE_FULL, reason, child.value)
                child.value = incoming
        self._set_swa(child)
        self.n_tomb_healed += 1
        self.n_tomb_tokens_healed += healed

    cdef void _free_duplicates(
        self, long long start, long long end, long long cursor, values, reason
    ) except *:
        """Free the request's row ``[start, end)`` that duplicates tree KV (``_insert_overlap_step``)."""
        cdef long long p = self.page_size
        cdef long long dup = end - start
        cdef long long swa_dead = min(max(cursor - start, 0), dup)
        alloc = self.allocator
        if values is None:
            alloc.free_full_pages(dup // p)
            alloc.free_swa_pages((dup - swa_dead) // p)
            return
        cdef long long mid = (start + swa_dead) // p
        if swa_dead:
            alloc.apply_op(_FREE_FULL, reason, values[start // p : mid])
        if dup > swa_dead:
            alloc.apply_op(_FREE, reason, values[mid : end // p])

    cdef TreeNode _commit_leaf(
        self,
        TreeNode node,
        cnp.ndarray rem,
        long long total,
        long long cursor,
        long long inserted_len,
        long long priority,
    ):
        """``_insert_commit_step`` + ``SWAComponent.commit_insert_component_data``."""
        cdef long long p = self.page_size
        cdef long long length = cnp.PyArray_DIM(rem, 0) * p
        cdef TreeNode leaf = self._new_node(rem, length, priority)
        leaf.parent = node
        node.children[key_at(rem, 0)] = leaf
        if self._depth_hooks:
            self.eviction_order.on_node_added(leaf, node)
        self.full_evictable += length
        self._update_leaf(leaf)
        self._update_leaf(node)
        cdef long long end = total + length
        cdef long long live_start = max(total, cursor)
        cdef TreeNode upper
        if live_start < end:  # _populate_range
            if live_start > total:
                self._split(leaf, (live_start - total) // p)
                self.n_tomb_created += 1
            upper = self._split_leaf_for_swa_lock(leaf)
            if upper is not None:
                self._set_swa(upper)
            self._set_swa(leaf)
        else:
            self.n_tomb_created += 1
        if total + leaf.length > inserted_len:  # _should_backup_after_insert
            leaf.hit_count += 1
        return leaf

    cdef void _adopt_values(self, TreeNode leaf, values) except *:
        """Give the new leaf (and the nodes split off above it) the request's page ids."""
        cdef TreeNode x = leaf
        cdef Py_ssize_t end = len(values)
        cdef Py_ssize_t start
        while x is not self.root and x.value is None:
            start = end - cnp.PyArray_DIM(x.key, 0)
            x.value = values[start:end]
            end = start
            x = x.parent

    def path_values(self, TreeNode node):
        """FULL page ids along the path to ``node`` (recording only): a matched prefix's row."""
        parts = []
        while node is not self.root:
            parts.append(node.value)
            node = node.parent
        return np.concatenate(parts[::-1]) if parts else _EMPTY

    cdef TreeNode _split_leaf_for_swa_lock(self, TreeNode leaf):
        """``SWAComponent._maybe_split_leaf_for_swa_lock``: cap a fresh leaf at ceil_page(W)."""
        if leaf is self.root or leaf.swa_lock > 0:
            return None
        cdef long long p = self.page_size
        cdef long long tail = -(-self.window // p) * p
        if leaf.length <= tail:
            return None
        return self._split(leaf, (leaf.length - tail) // p)

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
        return subtree_stats(self.root)
