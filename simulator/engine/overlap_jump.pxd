# Typed declarations for the compiled build of overlap_jump.py (Cython's pure-Python mode; the
# .py runs as it is without Cython): the jump's small helper classes become cdef classes and the
# record builders get 64-bit integer locals. No float is computed in typed code (the clock's
# end times come from DecodeClock as they are), so the results are the same bit for bit.
cimport cython

from simulator.engine.decode_clock cimport DecodeClock
from simulator.engine.decode_jump cimport DecodeJump, JumpSegment


cdef class _LaggedClock:
    cdef public DecodeClock clock
    cdef public double first_end
    cdef public long long steps

    cpdef double end(self, long long step) except? -1.0
    cpdef long long in_flight(self, double t) except? -2


cdef class _StepClock:
    cdef public list pieces


cdef class _Plan:
    cdef public list batch
    cdef public list outs
    cdef public list got
    cdef public list R
    cdef public list n
    cdef public long long k


@cython.locals(acc=cython.longlong, steps=list, total=list)
cpdef tuple _cumulative(list frees)

@cython.locals(i=cython.Py_ssize_t)
cpdef long long _freed_before(tuple freed_by, long long u) except? -1

@cython.locals(head=tuple, u=cython.longlong, v=cython.longlong, full=cython.longlong,
               swa=cython.longlong, rel_full=cython.longlong, rel_swa=cython.longlong,
               last=cython.bint, o=cython.longlong, f=cython.longlong)
cpdef tuple _records(list stretches, prev, list opens, dict free_at, long long p, list out)
