# Typed declarations for the compiled build of cache.py (Cython's pure Python mode: the .py stays
# the one source and runs as it is without Cython). The controllers are cdef classes with C
# fields and a C-typed allocator, so the hot small methods read the pool counters without a
# dictionary look-up; every count is a 64-bit integer doing the .py's operations (Python's
# floor division: cdivision stays off), so results are the same bit for bit. Requests stay
# Python objects. ``__dict__`` keeps instance attributes (a test's or step_replay's wrapped
# ``_evict``/``sizes``) working, and Python subclasses (HiCache) may override cpdef methods.
cimport cython

from simulator.kv_allocator cimport SWAKVAllocator
from simulator.radix._core_base cimport TreeCore
from simulator.request_kv cimport ReqKV
from simulator.swa_window cimport free_out_of_window_0523


cdef class SWACacheController:
    cdef dict __dict__
    cdef public SWAKVAllocator allocator
    cdef public long long page_size
    cdef public long long window
    cdef public long long _ev_calls, _ev_full_requested, _ev_swa_requested
    cdef public long long _ev_full_evicted, _ev_swa_evicted
    cdef public bint _evict_in_core
    cdef public object tree
    cdef public bint hybrid
    cdef public bint split_at_prompt
    # the tree where it is the compiled core (its API called in C), else None (cache.py)
    cdef public TreeCore _core

    @cython.locals(a=SWAKVAllocator, full_short=cython.longlong, swa_short=cython.longlong,
                   core=TreeCore, full_ev=cython.longlong, swa_ev=cython.longlong)
    cpdef evict_to_free_tokens(self, long long num_tokens)

    @cython.locals(core=TreeCore)
    cpdef tuple lock_footprint(self, ReqKV req)

    @cython.locals(fill_len=cython.longlong, limit=cython.longlong, n_pages=cython.longlong,
                   core=TreeCore)
    cpdef match(self, ReqKV req)

    @cython.locals(core=TreeCore)
    cpdef lock_prefix(self, ReqKV req)

    @cython.locals(p=cython.longlong, extend=cython.longlong, pages=cython.longlong,
                   end=cython.longlong, pre=cython.longlong, r=ReqKV)
    cpdef alloc_for_extend(self, reqs)

    @cython.locals(p=cython.longlong, n=cython.longlong, a=cython.longlong, r=ReqKV)
    cpdef long long decode_pages_needed(self, reqs) except? -1

    @cython.locals(need=cython.longlong)
    cpdef check_decode_mem(self, reqs)

    @cython.locals(p=cython.longlong, pages=cython.longlong, r=ReqKV)
    cpdef alloc_for_decode(self, reqs)

    @cython.locals(p=cython.longlong, free=cython.longlong, a=cython.longlong)
    cpdef long long quiet_decode_steps(self, ReqKV req) except? -1

    @cython.locals(p=cython.longlong, a=cython.longlong, pages=cython.longlong)
    cpdef fast_forward_decode(self, ReqKV req, long long steps)

    @cython.locals(p=cython.longlong, pages=cython.longlong, dead_lo=cython.longlong,
                   dead_hi=cython.longlong, lo=cython.longlong, hi=cython.longlong,
                   dead_pages=cython.longlong)
    cpdef _free_row_range(self, ReqKV req, long long start, long long end)

    @cython.locals(core=TreeCore)
    cpdef release_without_insert(self, ReqKV req)

    @cython.locals(core=TreeCore)
    cpdef tuple evictable_tokens(self)

    @cython.locals(a=SWAKVAllocator)
    cpdef tuple available_tokens(self)

    @cython.locals(a=SWAKVAllocator, p=cython.longlong, core=TreeCore, full_ev=cython.longlong,
                   swa_ev=cython.longlong)
    cpdef tuple room_tokens(self)

    @cython.locals(a=SWAKVAllocator, p=cython.longlong, full=cython.longlong, swa=cython.longlong,
                   core=TreeCore, full_ev=cython.longlong, swa_ev=cython.longlong)
    cpdef tuple used_tokens(self)

    @cython.locals(a=SWAKVAllocator)
    cpdef tuple free_pages(self)


cdef class UnifiedSWACache(SWACacheController):

    cpdef _free_out_of_window(self, ReqKV req, long long pre_len)

    @cython.locals(p=cython.longlong, effective=cython.longlong, aligned=cython.longlong,
                   core=TreeCore, cached=cython.longlong, inserted=cython.longlong,
                   evicted=cython.longlong, n_pages=cython.longlong)
    cpdef checkpoint(self, ReqKV req, long long up_to, bint finished, bint relock=*)

    @cython.locals(core=TreeCore)
    cpdef release(self, ReqKV req, owned=*)


cdef class LegacySWACache(SWACacheController):
    pass
