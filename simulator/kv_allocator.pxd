# Typed declarations for the compiled build of kv_allocator.py (Cython's pure Python mode: the
# .py stays the one source and runs as it is without Cython). The counters are 64-bit integers
# doing the .py's own integer operations, so every count is the same; the frees and allocations
# are cpdef, so typed callers (cache.pxd) call them in C and others through Python.
cimport cython

cdef class AllocatorStats:
    cdef public long long full_pages_allocated
    cdef public long long swa_pages_allocated
    cdef public long long full_pages_freed
    cdef public long long swa_pages_freed


cdef class SWAKVAllocator:
    cdef public long long full_tokens
    cdef public long long swa_tokens
    cdef public long long page_size
    cdef public AllocatorStats stats
    cdef public long long full_pages
    cdef public long long swa_pages
    cdef public long long full_free
    cdef public long long swa_free
    cdef public bint _in_group
    cdef public long long _pending_full
    cdef public long long _pending_swa
    cdef public object recorder

    cpdef long long full_available_size(self)
    cpdef long long swa_available_size(self)
    cpdef long long available_size(self)
    cpdef bint can_alloc_pages(self, long long n)
    cpdef void alloc_pages(self, long long n)
    cpdef void alloc_pages_and_free_swa(self, long long alloc, long long swa_freed)
    cpdef void free_full_pages(self, long long n)
    cpdef void free_swa_pages(self, long long n)
    cpdef void free_group_begin(self)
    @cython.locals(full=cython.longlong, swa=cython.longlong)
    cpdef void free_group_end(self)
