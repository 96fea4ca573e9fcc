# Typed declarations for the compiled build of fast_forward.py (Cython's pure-Python mode: the
# .py stays the one source and runs as it is without Cython). The jump's loops are module-level
# functions (the mixin's methods, on a plain class, only call them) with 64-bit integer locals
# for token, page and step counts; floor division and modulo keep Python's semantics (cdivision
# is off) and no float is computed here, so the results are the same bit for bit. Requests are
# typed ReqKV (the cache's lengths as C fields: tests and other callers pass plain ReqKV too) or
# ServerReq where the trace request is read; the server and the cache stay Python objects (the
# tests wrap the cache in a protocol proxy).
cimport cython

from simulator.engine.decode_clock cimport DecodeClock, segment_sums, segment_sums_from
from simulator.engine.step_costs cimport StepCosts
from simulator.engine.server_state cimport ServerReq
from simulator.request_kv cimport ReqKV


cdef class _DeferredFrees:
    pass


cdef class _FinishChain:
    cdef object server
    cdef list batch
    cdef list finishing
    cdef object clock
    cdef Py_ssize_t pos
    cdef public long long limit
    cdef public object callbacks  # simpy's Environment.step reads and clears them
    cdef public bint _ok

    @cython.locals(step=cython.longlong)
    cpdef _schedule(self, double now)

    @cython.locals(step=cython.longlong, finishing=list, n=cython.Py_ssize_t)
    cpdef _fire(self, _event)


cpdef _fire_chain(_FinishChain chain)


@cython.locals(rem=list, r=ReqKV)
cpdef list remaining_outputs(list batch)

@cython.locals(seqs=list, last=list, n=cython.longlong, r=ReqKV)
cpdef tuple jump_inputs(list batch, long long k)

@cython.locals(finishing=list, i=cython.Py_ssize_t, r=ReqKV)
cpdef list finishing_steps(list batch, list last, long long m)

@cython.locals(ran=list, i=cython.Py_ssize_t, f=cython.longlong)
cpdef list steps_ran(list last, long long m)

@cython.locals(sims=list, r=ServerReq)
cpdef list sims_of(list batch)

@cython.locals(out=list, r=ReqKV)
cpdef list unfinished(list batch)

@cython.locals(bs=cython.Py_ssize_t, i=cython.Py_ssize_t, k=cython.longlong, n=cython.longlong,
               seq=cython.longlong, cross=cython.longlong, full_room=cython.longlong,
               swa_room=cython.longlong, room=cython.longlong, r=ReqKV)
cpdef long long quiet_span(list batch, list rem, long long p, long long w, cache) except? -1

@cython.locals(i=cython.Py_ssize_t, f=cython.longlong, a=cython.longlong, b=cython.longlong,
               n=cython.longlong, x0=cython.longlong, y0=cython.longlong, below=cython.longlong,
               members=list, segments=list, cuts=list, ends=set, terms=tuple, clock=DecodeClock)
cpdef tuple price_jump(StepCosts costs, list seqs, list last, long long k, double now, double arrival,
                       long long beyond, long long w)

@cython.locals(done=list, j=cython.Py_ssize_t, i=cython.Py_ssize_t, f=cython.longlong, r=ReqKV)
cpdef list finishing_at(list batch, list members, list last, long long b)

@cython.locals(r=ReqKV)
cpdef advance(list reqs, long long n)

@cython.locals(i=cython.Py_ssize_t, n=cython.longlong, s=cython.longlong, opens=list)
cpdef list page_opens(list seqs0, list ran, long long p)

@cython.locals(m=cython.Py_ssize_t, s=cython.Py_ssize_t, t=cython.Py_ssize_t,
               cons=cython.longlong, freed=cython.longlong, need=cython.longlong,
               ff=cython.longlong, sf=cython.longlong, full_free=cython.longlong,
               swa_free=cython.longlong, ft=cython.longlong)
cpdef replay_short_steps(cache, list opens, list frees, long long bs, long long p)
