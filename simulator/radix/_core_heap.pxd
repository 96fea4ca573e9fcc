# The compiled unified tree's lazy D-leaf heap for the LRU order (simulator/radix/_core_heap.pyx).
from cpython.ref cimport PyObject


cdef struct LeafEntry:
    double last_access_time
    long long node_id
    PyObject* node


cdef class LruLeafHeap:
    cdef LeafEntry* items
    cdef public Py_ssize_t n
    cdef Py_ssize_t cap

    cdef void push(self, double last_access_time, long long node_id, object node) except *
    cdef void _sift_down(self, LeafEntry e) noexcept
    cdef void pop(self) noexcept
    cdef void replace_top(self, double last_access_time, long long node_id, object node) noexcept
    cdef void clear(self) noexcept
