# Typed declarations for the compiled build of swa_eviction.py (Cython's pure-Python mode; the
# .py runs as it is without Cython). DecodeContext becomes a cdef class and the interval policy's
# batch loop a typed function; every value is a token or step count (64-bit integers, Python's
# floor division), so the events are the same bit for bit. Requests are typed ReqKV (C fields).
cimport cython

from simulator.request_kv cimport ReqKV
from simulator.swa_window cimport free_out_of_window_0523


cdef class DecodeContext:
    cdef public long long window
    cdef public long long page_size
    cdef public object allocator
    cdef public long long forward_iter


@cython.locals(w=cython.longlong, p=cython.longlong, seq0=cython.longlong, s=cython.longlong,
               freed=cython.longlong)
cpdef interval_run_steps(ReqKV req, long long interval, DecodeContext ctx, long long steps, list events)

@cython.locals(i=cython.Py_ssize_t, n=cython.longlong, first=cython.longlong,
               due=cython.longlong, events=list, req=ReqKV)
cpdef list interval_run_batch(list reqs, long long interval, DecodeContext ctx, list steps)
