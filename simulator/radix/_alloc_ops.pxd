# The compiled allocator's count API as C function pointers (no Python type in here, so a module
# that cimports this file imports nothing at load): simulator/radix/_core_alloc.pyx fills an
# ``AllocOps`` for the compiled ``SWAKVAllocator`` and hands it out in a capsule; the compiled
# tree (_core_base.pyx) calls through it only for an allocator of exactly that class, and through
# Python otherwise (the allocator loaded as source, a subclass, a stand-in).

ctypedef int (*free_pages_fn)(object allocator, long long n) except -1
ctypedef long long (*available_fn)(object allocator) except? -1

ctypedef struct AllocOps:
    free_pages_fn free_full_pages
    free_pages_fn free_swa_pages
    available_fn full_available_size
    available_fn swa_available_size
