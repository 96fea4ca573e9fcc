# Declarations of the compiled tree nodes and SWA LRU list (simulator/radix/_core_node.pyx),
# shared with the compiled tree (simulator/radix/_core_tree.pyx).
cimport numpy as cnp
from libc.stdint cimport int64_t


# Not tracked by the cycle collector (no_gc in _core_node.pyx says why that is safe): a tree's
# links are cut by its owner's dealloc (unlink_tree, SwaLRUList's dealloc)
cdef class TreeNode:
    cdef public long long id
    cdef public TreeNode parent
    cdef public dict children
    # the key (page ids): pages [koff, koff + klen) of ``kbase``, a 1-D contiguous int64 array; a
    # split moves the offsets instead of making two numpy views (``key``, a property of
    # _core_node.pyx, makes that view on demand)
    cdef cnp.ndarray kbase
    cdef Py_ssize_t koff
    cdef Py_ssize_t klen
    # page 0 of the key as the int object its parent's ``children`` holds it under (a split or a
    # delete looks the node up by that very object: no new int, an identity hit); None: not known
    cdef object first_key
    cdef public long long length
    cdef public bint swa
    cdef public long long full_lock
    cdef public long long swa_lock
    cdef public object swa_uuid
    cdef public double last_access_time
    cdef public double creation_time
    cdef public long long hit_count
    cdef public long long priority
    cdef public TreeNode lru_prev
    cdef public TreeNode lru_next
    cdef public TreeNode full_prev
    cdef public TreeNode full_next
    cdef public bint in_swa_lru
    cdef public bint in_full_lru
    cdef bint listed  # in its tree's ``device_leaves`` (kept by _core_base.pyx with the set)
    cdef public object value
    cdef object __weakref__  # tests prove a dropped tree frees every node (no_gc)


cdef class SwaLRUList:
    cdef public TreeNode head
    cdef public TreeNode tail
    cdef public Py_ssize_t size
    cdef public str kind

    cdef void c_insert_mru(self, TreeNode node) except *
    cdef void c_insert_after(self, TreeNode prev, TreeNode node) except *
    cdef void c_insert_after_unchecked(self, TreeNode prev, TreeNode node) except *
    cdef void c_remove(self, TreeNode node) except *
    cdef void c_move_after(self, TreeNode prev, TreeNode node) except *
    cdef TreeNode c_prev_unlocked(self, TreeNode node)


cdef TreeNode new_node(
    long long node_id, cnp.ndarray kbase, Py_ssize_t koff, Py_ssize_t klen, long long length, long long priority
)
cdef void unlink_tree(TreeNode root) noexcept


cdef inline int64_t key_at(cnp.ndarray key, Py_ssize_t i) noexcept:
    """Page ``i`` of a 1-D contiguous int64 key, read through its data pointer."""
    return (<int64_t*>cnp.PyArray_DATA(key))[i]


cdef inline int64_t node_key_at(TreeNode node, Py_ssize_t i) noexcept:
    """Page ``i`` of ``node``'s key."""
    return (<int64_t*>cnp.PyArray_DATA(node.kbase))[node.koff + i]


cdef inline object node_first_key(TreeNode node):
    """Page 0 of ``node``'s key as an int: the object it is filed under in its parent."""
    if node.first_key is not None:
        return node.first_key
    return node_key_at(node, 0)


cdef inline Py_ssize_t match_node(TreeNode node, cnp.ndarray key, Py_ssize_t offset, Py_ssize_t end) noexcept:
    """Number of leading pages of ``node``'s key equal to ``key[offset:end]`` (``node.match_pages``)."""
    cdef Py_ssize_t n = node.klen
    cdef Py_ssize_t rest = end - offset
    if rest < n:
        n = rest
    if n <= 0:
        return 0
    cdef int64_t* a = (<int64_t*>cnp.PyArray_DATA(node.kbase)) + node.koff
    cdef int64_t* b = (<int64_t*>cnp.PyArray_DATA(key)) + offset
    cdef Py_ssize_t i
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


cdef inline Py_ssize_t match_keys(
    cnp.ndarray node_key, cnp.ndarray key, Py_ssize_t offset, Py_ssize_t end
) noexcept:
    """Number of leading pages of ``node_key`` equal to ``key[offset:end]`` (``node.match_pages``)."""
    cdef Py_ssize_t n = cnp.PyArray_DIM(node_key, 0)
    cdef Py_ssize_t rest = end - offset
    if rest < n:
        n = rest
    if n <= 0:
        return 0
    cdef int64_t* a = <int64_t*>cnp.PyArray_DATA(node_key)
    cdef int64_t* b = (<int64_t*>cnp.PyArray_DATA(key)) + offset
    cdef Py_ssize_t i
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


cdef inline cnp.ndarray key_slice(cnp.ndarray key, Py_ssize_t start, Py_ssize_t stop):
    """``key[start:stop]`` of a 1-D contiguous int64 key (``0 <= start <= stop <= len(key)``):
    the view numpy's slice makes (same buffer, same base, same writeability), built in C without
    the generic indexing machinery (a node split's keys, a new leaf's key)."""
    if not cnp.PyArray_CheckExact(key):
        return key[start:stop]
    cdef cnp.npy_intp n = stop - start
    cdef int flags = cnp.NPY_ARRAY_CARRAY_RO
    if cnp.PyArray_FLAGS(key) & cnp.NPY_ARRAY_WRITEABLE:
        flags = cnp.NPY_ARRAY_CARRAY
    cdef cnp.ndarray view = <cnp.ndarray>cnp.PyArray_New(
        cnp.ndarray, 1, &n, cnp.NPY_INT64, NULL, (<int64_t*>cnp.PyArray_DATA(key)) + start, 0, flags, None
    )
    cnp.set_array_base(view, key)  # numpy's own base rule (the buffer's owner)
    return view
