# Declarations of the compiled unified tree's state and helpers (simulator/radix/_core_base.pyx),
# which the tree class of simulator/radix/_core_tree.pyx extends.
cimport numpy as cnp

from simulator.radix._alloc_ops cimport AllocOps
from simulator.radix._core_heap cimport LruLeafHeap
from simulator.radix._core_node cimport SwaLRUList, TreeNode


cdef class TreeCore:

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
    # the compiled allocator's frees and sizes in C (_alloc_ops.pxd), valid while ``allocator``
    # is ``_ops_allocator``; NULL: call the allocator through Python
    cdef const AllocOps* _ops
    cdef object _ops_allocator
    # TreeCounters, as C counts (``counters`` builds the dataclass)
    cdef long long n_match, n_insert, n_lock, n_unlock, n_evict, n_full_evicted, n_swa_evicted
    cdef long long n_leaves_deleted, n_tomb_created, n_tomb_healed, n_tomb_tokens_healed, n_splits

    cdef double _tick(self)
    cdef void _free_full_pages(self, long long n) except *
    cdef void _free_swa_pages(self, long long n) except *
    cdef long long _full_available(self) except? -1
    cdef long long _swa_available(self) except? -1
    cdef TreeNode _new_node(
        self, cnp.ndarray kbase, Py_ssize_t koff, Py_ssize_t klen, long long length, long long priority
    )
    cdef void _update_leaf(self, TreeNode node) except *
    cdef object _leaf_key(self, TreeNode node)
    cdef void _push_leaf(self, TreeNode node) except *
    cdef TreeNode _pop_lazy_leaf(self)
    cdef TreeNode _pop_lru_leaf(self)
    cdef void _set_swa(self, TreeNode node) except *
    cdef void _refresh_swa_window(self, TreeNode node) except *
    cdef TreeNode _split(self, TreeNode child, Py_ssize_t pages)
    cdef void _delete_leaf(self, TreeNode node, long long* full_ev, long long* swa_ev) except *
    cdef void _tombstone(self, TreeNode node, long long* swa_ev) except *
    cdef void _evict_full(self, long long shortfall, long long target, long long* full_ev, long long* swa_ev) except *
    cdef void _evict_swa(self, long long shortfall, long long target, long long* full_ev, long long* swa_ev) except *
    # the tree's API (match, locks, insert), overridden by _core_tree.UnifiedSWARadixTree: a typed
    # caller (the compiled cache controller, cache.pxd) calls them in C
    cpdef tuple c_evict(self, long long full_shortfall, long long swa_shortfall)
    cpdef tuple lock_footprint(self, TreeNode node)
    cpdef match_prefix(self, key)
    cpdef tuple c_match(self, key, Py_ssize_t n_pages)
    cpdef lock(self, TreeNode node)
    cpdef unlock(self, receipt)
    # ``insert`` with every argument given (no optional C arguments, which an override would
    # have to re-declare)
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
    )
