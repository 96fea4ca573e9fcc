# cython: language_level=3, boundscheck=False, wraparound=False
"""A binary min-heap of ``(last_access_time, node id, node)`` in C: the unified tree's lazy D-leaf
heap when the eviction order is exactly LRU (the default).

The pure-Python tree keeps ``((priority, last_access_time, id), node)`` tuples in a ``heapq``
list; for LRU the priority is ``last_access_time``, so the order of those tuples is the order of
``(last_access_time, id)``, which this heap keeps without a tuple per entry. Node ids are
unique, so the minimum, and thus every victim, is the same whatever the heap's inner layout.
"""

from cpython.mem cimport PyMem_Free, PyMem_Realloc
from cpython.ref cimport Py_DECREF, Py_INCREF, PyObject


cdef inline bint less(LeafEntry* a, LeafEntry* b) noexcept:
    if a.last_access_time != b.last_access_time:
        return a.last_access_time < b.last_access_time
    return a.node_id < b.node_id


cdef class LruLeafHeap:
    """The heap; it holds a reference to each entry's node until the entry is popped."""

    def __dealloc__(self):
        self.clear()
        PyMem_Free(self.items)

    def __len__(self):
        return self.n

    cdef void push(self, double last_access_time, long long node_id, object node) except *:
        cdef Py_ssize_t cap
        cdef LeafEntry* grown
        if self.n == self.cap:
            cap = 2 * self.cap + 64
            grown = <LeafEntry*>PyMem_Realloc(self.items, cap * sizeof(LeafEntry))
            if grown is NULL:
                raise MemoryError()
            self.items = grown
            self.cap = cap
        Py_INCREF(node)
        cdef LeafEntry e
        e.last_access_time = last_access_time
        e.node_id = node_id
        e.node = <PyObject*>node
        cdef Py_ssize_t i = self.n
        cdef Py_ssize_t parent
        self.n += 1
        while i > 0:  # sift up
            parent = (i - 1) >> 1
            if not less(&e, &self.items[parent]):
                break
            self.items[i] = self.items[parent]
            i = parent
        self.items[i] = e

    cdef void _sift_down(self, LeafEntry e) noexcept:
        """Place ``e`` at the root and sift it down (the root's old entry already released).

        Floyd's bottom-up way: the hole at the root moves down along the smaller children to a
        leaf (one comparison a level), then ``e`` rises from there (it belongs near the bottom,
        being the old last entry or a later time). Any valid heap pops the same sequence: the
        keys (time, node id) are unique, or equal only for entries of the same node."""
        cdef LeafEntry* items = self.items
        cdef Py_ssize_t n = self.n
        cdef Py_ssize_t i = 0
        cdef Py_ssize_t child = 1
        cdef Py_ssize_t parent
        while child < n:
            if child + 1 < n and less(&items[child + 1], &items[child]):
                child += 1
            items[i] = items[child]
            i = child
            child = 2 * i + 1
        while i > 0:
            parent = (i - 1) >> 1
            if not less(&e, &items[parent]):
                break
            items[i] = items[parent]
            i = parent
        items[i] = e

    cdef void pop(self) noexcept:
        """Drop the minimum."""
        cdef PyObject* node = self.items[0].node
        self.n -= 1
        if self.n > 0:
            self._sift_down(self.items[self.n])
        Py_DECREF(<object>node)

    cdef void replace_top(self, double last_access_time, long long node_id, object node) noexcept:
        """Replace the minimum by a new entry (``heapq.heapreplace``)."""
        cdef PyObject* old = self.items[0].node
        Py_INCREF(node)
        cdef LeafEntry e
        e.last_access_time = last_access_time
        e.node_id = node_id
        e.node = <PyObject*>node
        self._sift_down(e)
        Py_DECREF(<object>old)

    cdef void clear(self) noexcept:
        cdef Py_ssize_t i
        cdef Py_ssize_t n = self.n
        self.n = 0
        for i in range(n):
            Py_DECREF(<object>self.items[i].node)
