# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled tree nodes and SWA LRU list of the unified tree (the pure-Python originals are
:class:`simulator.radix.node.TreeNode` and :class:`~simulator.radix.node.SwaLRUList`).

The same fields and methods, as C structs and calls: the unified tree's hot paths read and link
nodes without a dictionary or attribute lookup. Keys stay 1-D contiguous int64 numpy arrays
(page ids), read through their data pointer.

Nodes are not tracked by Python's cycle collector (``no_gc`` below): the collector
walked every live node of a large tree on each full collection. The only reference cycles among
nodes are the tree's own links (parent and children, the LRU list's neighbours and sentinels),
and nothing a node references refers back to it (keys and values are numpy arrays, ids ints).
A node that leaves the tree (``_delete_leaf``) has those links cut already and is freed by its
reference count. What remains is cut when the owner goes: the tree's dealloc runs
:func:`unlink_tree` over its nodes, the LRU list's dealloc unlinks its sentinels; both owners are
``no_gc_clear``, so the collector never empties their fields before that dealloc can walk them.
``tests/test_core_node_gc.py`` proves a dropped tree frees every node.
"""

cimport cython
cimport numpy as cnp
from libc.stdint cimport int64_t

import numpy as np

cnp.import_array()


@cython.no_gc
@cython.freelist(256)  # a tree makes and drops nodes all the time (splits, evictions)
cdef class TreeNode:
    """:class:`simulator.radix.node.TreeNode` with C fields (see there for their meaning)."""

    def __init__(self, long long node_id, cnp.ndarray key, long long length, long long priority=0):
        self.id = node_id
        self.children = {}
        self.key = key
        self.length = length
        self.priority = priority

    @property
    def key(self):
        """The node's page ids: a view of pages [koff, koff + klen) of its key array."""
        return key_slice(self.kbase, self.koff, self.koff + self.klen)

    @key.setter
    def key(self, value):
        cdef cnp.ndarray a = int64_key(value)
        self.kbase = a
        self.koff = 0
        self.klen = cnp.PyArray_DIM(a, 0)
        self.first_key = None  # node_first_key reads page 0 then

    def __repr__(self):  # pragma: no cover - debugging aid
        return (
            f"TreeNode(id={self.id}, len={self.length}, swa={self.swa}, "
            f"locks=({self.full_lock},{self.swa_lock}), children={len(self.children)})"
        )


cdef cnp.ndarray int64_key(object key):
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


cdef TreeNode new_node(
    long long node_id, cnp.ndarray kbase, Py_ssize_t koff, Py_ssize_t klen, long long length, long long priority
):
    """A fresh node without the Python ``__init__`` call (fields as :class:`TreeNode` sets them);
    its key is pages [koff, koff + klen) of ``kbase`` (a 1-D contiguous int64 array)."""
    cdef TreeNode node = TreeNode.__new__(TreeNode)
    node.id = node_id
    node.children = {}
    node.kbase = kbase
    node.koff = koff
    node.klen = klen
    node.length = length
    node.priority = priority
    return node


cdef void unlink_tree(TreeNode root) noexcept:
    """Cut every link of the tree under ``root`` (parents, children, LRU neighbours), so that its
    nodes, which the cycle collector does not see, are freed by their reference counts."""
    if root is None:
        return
    cdef list stack = [root]
    cdef TreeNode x
    cdef dict kids
    while stack:
        x = <TreeNode>stack.pop()
        kids = x.children
        if kids:
            stack.extend(kids.values())
            kids.clear()
        x.parent = None
        x.lru_prev = None
        x.lru_next = None
        x.full_prev = None
        x.full_next = None


# key_at, node_key_at, match_node and match_keys are inline functions of _core_node.pxd (inlined in every module that
# cimports them, instead of a call through the module's function table)


@cython.no_gc_clear
cdef class SwaLRUList:
    """:class:`simulator.radix.node.SwaLRUList`: head side = most recently used; the eviction
    walk starts at the tail and skips nodes whose SWA lock counter is positive."""

    def __dealloc__(self):
        # unlink the list (its sentinels point at each other): nodes are not GC-tracked
        cdef TreeNode x = self.head
        cdef TreeNode nxt
        while x is not None:
            nxt = x.lru_next
            x.lru_prev = None
            x.lru_next = None
            x = nxt
        x = self.tail
        if x is not None:
            x.lru_prev = None

    def __init__(self):
        self.kind = "swa"
        empty = np.empty(0, np.int64)
        self.head = new_node(-1, empty, 0, 0, 0, 0)
        self.tail = new_node(-2, empty, 0, 0, 0, 0)
        self.head.lru_next = self.tail
        self.tail.lru_prev = self.head
        self.size = 0

    cdef void c_insert_mru(self, TreeNode node) except *:
        self.c_insert_after_unchecked(self.head, node)

    cdef void c_insert_after(self, TreeNode prev, TreeNode node) except *:
        assert prev.in_swa_lru
        self.c_insert_after_unchecked(prev, node)

    cdef void c_insert_after_unchecked(self, TreeNode prev, TreeNode node) except *:
        assert not node.in_swa_lru
        node.in_swa_lru = True
        self.size += 1
        cdef TreeNode nxt = prev.lru_next
        node.lru_prev = prev
        node.lru_next = nxt
        nxt.lru_prev = node
        prev.lru_next = node

    cdef void c_remove(self, TreeNode node) except *:
        assert node.in_swa_lru
        node.in_swa_lru = False
        self.size -= 1
        cdef TreeNode prev = node.lru_prev
        cdef TreeNode nxt = node.lru_next
        prev.lru_next = nxt
        nxt.lru_prev = prev
        node.lru_prev = None
        node.lru_next = None

    cdef void c_move_after(self, TreeNode prev, TreeNode node) except *:
        cdef TreeNode nxt = prev.lru_next
        if nxt is node:
            return
        assert node.in_swa_lru
        cdef TreeNode before = node.lru_prev
        cdef TreeNode after = node.lru_next
        before.lru_next = after
        after.lru_prev = before
        node.lru_prev = prev
        node.lru_next = nxt
        nxt.lru_prev = node
        prev.lru_next = node

    cdef TreeNode c_prev_unlocked(self, TreeNode node):
        cdef TreeNode x = node.lru_prev
        while x.swa_lock > 0:
            x = x.lru_prev
        return None if x is self.head else x

    # -- the Python-visible API of node.SwaLRUList
    def in_list(self, TreeNode node):
        return node is not None and node.in_swa_lru

    def insert_mru(self, TreeNode node):
        self.c_insert_mru(node)

    def insert_after(self, TreeNode prev, TreeNode node):
        self.c_insert_after(prev, node)

    def remove(self, TreeNode node):
        self.c_remove(node)

    def reset_mru(self, TreeNode node):
        assert node.in_swa_lru
        self.c_move_after(self.head, node)

    def move_after(self, TreeNode prev, TreeNode node):
        self.c_move_after(prev, node)

    def prev_unlocked(self, TreeNode node):
        return self.c_prev_unlocked(node)

    def lru_unlocked(self):
        return self.c_prev_unlocked(self.tail)

    def iter_mru(self):
        x = self.head.lru_next
        while x is not self.tail:
            yield x
            x = x.lru_next
