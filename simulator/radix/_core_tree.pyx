# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled unified FULL+SWA radix tree: :class:`simulator.radix.unified.UnifiedSWARadixTree`
(with its insert mixin :class:`~simulator.radix.unified_insert.UnifiedInsert`) as a Cython class.

Match, locks and insert here; the state, node helpers and eviction in
:class:`simulator.radix._core_base.TreeCore`. Step for step the pure-Python algorithm, so
results are bit for bit equal (``tests/test_compiled_core.py`` replays workloads through both);
see the pure-Python methods for the SGLang function each one follows
(``python/sglang/srt/mem_cache/unified_cache/unified_tree_core.py`` and its components).
"""

cimport cython
cimport numpy as cnp
from libc.math cimport INFINITY

from simulator.radix._core_base cimport TreeCore
from simulator.radix._core_node cimport TreeNode, key_at, match_node

import numpy as np

from simulator.memory_ops import OpKind
from simulator.radix.tree_results import MatchResult
from simulator.request_kv import LockReceipt

cnp.import_array()

cdef cnp.ndarray _EMPTY = np.empty(0, dtype=np.int64)
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
@cython.no_gc_clear  # as TreeCore: its dealloc unlinks the nodes (_core_node.pyx)
cdef class UnifiedSWARadixTree(TreeCore):
    """:class:`simulator.radix.unified.UnifiedSWARadixTree`, compiled (same attributes)."""

    generation = "unified"

    # ------------------------------------------------------------------ match
    cpdef match_prefix(self, key):
        """``UnifiedTreeCore._match_prefix_helper`` + ``_match_post_processor``."""
        cdef cnp.ndarray k = as_key(key)
        cdef long long prefix = 0, full_hit = 0
        cdef TreeNode best = self._match(k, cnp.PyArray_DIM(k, 0), &prefix, &full_hit)
        cdef long long aligned = full_hit // self.page_size * self.page_size
        return MatchResult(prefix, best, full_hit, aligned if aligned > prefix else None)

    cpdef tuple c_match(self, key, Py_ssize_t n_pages):
        """``match_prefix(key[:n_pages])`` as (device prefix length, last node, SWA branching
        seqlen): the compiled cache controller's call (no slice, no result object)."""
        cdef cnp.ndarray k = as_key(key)
        cdef Py_ssize_t n = cnp.PyArray_DIM(k, 0)
        if n_pages < 0:  # a slice's negative stop
            n_pages = max(0, n + n_pages)
        cdef long long prefix = 0, full_hit = 0
        cdef TreeNode best = self._match(k, min(n, n_pages), &prefix, &full_hit)
        cdef long long aligned = full_hit // self.page_size * self.page_size
        return prefix, best, aligned if aligned > prefix else None

    cdef TreeNode _match(self, cnp.ndarray k, Py_ssize_t n, long long* prefix_out, long long* hit_out):
        """The match walk over the first ``n`` pages of ``k``: the last valid node, with its
        prefix length and the FULL hit length written to ``prefix_out`` / ``hit_out``."""
        self.n_match += 1
        cdef long long p = self.page_size
        cdef TreeNode node = self.root
        cdef TreeNode best = self.root
        cdef TreeNode child
        cdef Py_ssize_t off = 0
        cdef Py_ssize_t m
        cdef long long full_hit = 0, acc = 0, prefix = 0
        cdef double swa_run = INFINITY
        cdef bint partial, valid
        while off < n:
            child = node.children.get(key_at(k, off))
            if child is None:
                break
            m = match_node(child, k, off, n)
            full_hit += m * p
            partial = m < child.klen
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
        prefix_out[0] = prefix
        hit_out[0] = full_hit
        return best

    # ------------------------------------------------------------------ locks
    cpdef lock(self, TreeNode node):
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
            if cur.listed and not cur.children:
                cur.listed = False
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

    cpdef unlock(self, receipt):
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
        return self.c_insert(
            k,
            cnp.PyArray_DIM(k, 0),
            prev_prefix_len,
            inserted_len,
            swa_evicted_seqlen,
            priority,
            protected_node,
            values,
            reason,
        )

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
        """``insert(key[:n_pages], ...)`` with every argument given (the compiled cache
        controller's call: no slice of the request's pages)."""
        cdef cnp.ndarray k = as_key(key)
        cdef Py_ssize_t n = cnp.PyArray_DIM(k, 0)
        if n_pages < 0:  # a slice's negative stop
            n_pages = max(0, n + n_pages)
        n = min(n, n_pages)
        self.n_insert += 1
        cdef long long p = self.page_size
        cdef TreeNode root = self.root
        root.last_access_time = self._tick()
        root.priority = max(root.priority, priority)
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
            m = match_node(child, k, off, n)
            if m < child.klen:
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
            target = self._commit_leaf(node, k, off, n - off, total, swa_evicted_seqlen, inserted_len, priority)
            if values is not None:
                self._adopt_values(target, values)
        else:
            target = node
        if target is not root:  # _insert_tail_step: SWA INSERT_END refresh
            self._refresh_swa_window(target)
        return total, target

    cdef long long _walk_protected(self, TreeNode protected_node, long long priority, long long inserted_len) except? -1:
        """The insert walk over the request's locked prefix (one tick per node, root side first),
        as two walks up the path: its depth and length, then each node's tick and prefix total.
        The clock only ever holds whole numbers (every tick adds 1.0), so ``t0 + i`` is the
        same double as ``i`` additions of 1.0."""
        cdef TreeNode x = protected_node
        cdef TreeNode root = self.root
        cdef Py_ssize_t depth = 0
        cdef long long total = 0
        while x is not root:
            depth += 1
            total += x.length
            x = x.parent
        cdef double t0 = self._time
        cdef long long upto = total  # the path's length down to x's end
        cdef Py_ssize_t i = depth
        x = protected_node
        while x is not root:
            i -= 1  # x is the path's i-th node from the root
            x.last_access_time = t0 + i
            if x.priority < priority:
                x.priority = priority
            if upto > inserted_len:
                x.hit_count += 1
            upto -= x.length
            x = x.parent
        self._time = t0 + depth
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
            self._free_full_pages(healed // p)
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
        if values is None:
            self._free_full_pages(dup // p)
            self._free_swa_pages((dup - swa_dead) // p)
            return
        alloc = self.allocator
        cdef long long mid = (start + swa_dead) // p
        if swa_dead:
            alloc.apply_op(_FREE_FULL, reason, values[start // p : mid])
        if dup > swa_dead:
            alloc.apply_op(_FREE, reason, values[mid : end // p])

    cdef TreeNode _commit_leaf(
        self,
        TreeNode node,
        cnp.ndarray k,
        Py_ssize_t off,
        Py_ssize_t n_rem,
        long long total,
        long long cursor,
        long long inserted_len,
        long long priority,
    ):
        """``_insert_commit_step`` + ``SWAComponent.commit_insert_component_data``: the new
        leaf's key is pages [off, off + n_rem) of ``k``."""
        cdef long long p = self.page_size
        cdef long long length = n_rem * p
        cdef TreeNode leaf = self._new_node(k, off, n_rem, length, priority)
        leaf.parent = node
        cdef object first = key_at(k, off)
        leaf.first_key = first
        node.children[first] = leaf
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
            start = end - x.klen
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

