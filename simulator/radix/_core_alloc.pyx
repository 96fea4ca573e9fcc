# cython: language_level=3
"""The compiled allocator's frees and sizes as C functions, for the compiled tree's eviction.

Kept apart from the tree (``_core_base.pyx``) because cimporting ``SWAKVAllocator`` makes a module
check that class's C layout when it loads: where ``simulator.kv_allocator`` loads as source
(``KVPLAN_PURE_PYTHON=1``, or a build older than its ``.py``) this module fails to import, and the
tree, which imports it lazily and catches that, calls the allocator through Python instead.
"""

from cpython.pycapsule cimport PyCapsule_New

from simulator.kv_allocator cimport SWAKVAllocator
from simulator.radix._alloc_ops cimport AllocOps

#: The capsule's name (``_core_base.pyx`` asks for exactly this one).
CAPSULE_NAME = b"simulator.radix._core_alloc.AllocOps"


cdef int _free_full_pages(object allocator, long long n) except -1:
    (<SWAKVAllocator>allocator).free_full_pages(n)
    return 0


cdef int _free_swa_pages(object allocator, long long n) except -1:
    (<SWAKVAllocator>allocator).free_swa_pages(n)
    return 0


cdef long long _full_available_size(object allocator) except? -1:
    return (<SWAKVAllocator>allocator).full_available_size()


cdef long long _swa_available_size(object allocator) except? -1:
    return (<SWAKVAllocator>allocator).swa_available_size()


cdef AllocOps _OPS
_OPS.free_full_pages = _free_full_pages
_OPS.free_swa_pages = _free_swa_pages
_OPS.full_available_size = _full_available_size
_OPS.swa_available_size = _swa_available_size

#: The class these functions take (the tree checks ``type(allocator) is ALLOCATOR``).
ALLOCATOR = SWAKVAllocator
OPS = PyCapsule_New(<void*>&_OPS, b"simulator.radix._core_alloc.AllocOps", NULL)
