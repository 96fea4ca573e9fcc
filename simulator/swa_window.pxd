# Typed declarations for the compiled build of swa_window.py (Cython's pure-Python mode; the .py
# runs as it is without Cython). Token counts as 64-bit integers; floor division keeps Python's
# semantics (cdivision is off), so the results are the same bit for bit. The request is a ReqKV
# (its lengths are C fields); the allocator stays a Python object (a jump passes a stand-in),
# called in C where it is exactly the compiled SWAKVAllocator (_free_swa_pages).
cimport cython

from simulator.kv_allocator cimport SWAKVAllocator
from simulator.request_kv cimport ReqKV


@cython.locals(a=SWAKVAllocator)
cdef void _free_swa_pages(object allocator, long long n) except *


@cython.locals(evicted=cython.longlong, keep=cython.longlong, threshold=cython.longlong,
               new=cython.longlong)
cpdef long long free_out_of_window_0523(
    ReqKV req, long long pre_len, long long window, long long page_size, allocator,
    long long eviction_interval=*) except? -1

@cython.locals(evicted=cython.longlong, new=cython.longlong)
cpdef long long free_out_of_window_legacy(
    ReqKV req, long long pre_len, long long margin, long long page_size, allocator) except? -1
