# Typed declarations for the compiled build of admission.py (Cython's "pure Python mode": the .py
# stays the one source and runs as it is without Cython). The adder's budgets are C fields and its
# requests are typed ServerReq, so their lengths are read as C integers. Integer arithmetic is
# 64-bit with Python's floor division; the FULL offsets are C doubles doing the .py's own float
# operations in its order (setup.py builds without fused multiply-add), so results are the same.
# The HiCache adder (hicache_admission.py, Python) overrides add_one_req: it stays cpdef.
cimport cython
from simulator.engine.server_state cimport ServerReq


@cython.locals(r=ServerReq, fill=cython.longlong, n_pages=cython.longlong, p=cython.longlong,
               k=cython.longlong, prefix=cython.longlong)
cpdef set _compute_prefix_matches(object waiting, object cache, dict matched)

@cython.locals(r=ServerReq, total=cython.double, ratio=cython.double, clip=cython.longlong)
cpdef double running_offset(list running, double new_token_ratio) except? -1.0

@cython.locals(allocated=cython.longlong, limit=cython.longlong)
cpdef long long estimate_swa_tokens(long long extend, long long max_new, object chunk_limit,
                                    long long window, long long page) except? -1

@cython.locals(p=cython.longlong, avail=cython.longlong, full_room=cython.longlong,
               swa_room=cython.longlong, cand=cython.longlong)
cpdef tuple chunk_continuation(ServerReq req, object cache, long long chunked_prefill_size,
                               double offset)


cdef class PrefillBatch:
    cdef public list reqs
    cdef public list admitted
    cdef public object chunked
    cdef public bint batch_is_full


cdef class PrefillAdder:
    cdef public object cache
    cdef public long long page_size
    cdef public long long window
    cdef public long long max_running
    cdef public long long num_running
    cdef public long long chunked_prefill_size
    cdef public object rem_chunk
    cdef public long long rem_input
    cdef public double total_offset
    cdef public double current_offset
    cdef public long long swa_offset
    cdef public PrefillBatch batch
    cdef public list swa_events

    cpdef _init(self, object cache, long long max_running, long long chunked_prefill_size,
                long long max_prefill_tokens, list running, double new_token_ratio)

    @cython.locals(p=cython.longlong, ext=cython.longlong)
    cpdef _reserve(self, long long extend, long long max_new)

    @cython.locals(new_len=cython.longlong, truncated=cython.bint, full_room=cython.longlong,
                   swa_room=cython.longlong, full_only=cython.longlong)
    cpdef add_chunked_req(self, ServerReq req)

    @cython.locals(req=ServerReq, batch=PrefillBatch)
    cpdef PrefillBatch add_waiting(self, object waiting, object rows=*)

    @cython.locals(full_room=cython.longlong, swa_room=cython.longlong)
    cpdef str budget_state(self)

    @cython.locals(p=cython.longlong, w=cython.longlong, needed=cython.longlong,
                   rem_swa=cython.longlong, headroom=cython.longlong, cap=cython.longlong)
    cpdef tuple _chunk_limit(self, long long extend, long long max_new, long long probe_swa,
                             long long swa_room)

    @cython.locals(p=cython.longlong, clip=cython.longlong, max_new=cython.longlong,
                   extend=cython.longlong, probe_full=cython.longlong, probe_swa=cython.longlong,
                   full_room=cython.longlong, swa_room=cython.longlong, ok=cython.bint,
                   ext_paged=cython.longlong, chunked=cython.bint, end=cython.longlong)
    cpdef str add_one_req(self, ServerReq req)


@cython.locals(adder=PrefillAdder)
cpdef PrefillAdder new_prefill_adder(object cache, long long max_running,
                                     long long chunked_prefill_size, long long max_prefill_tokens,
                                     list running, double new_token_ratio)
