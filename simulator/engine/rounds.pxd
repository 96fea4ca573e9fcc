# Typed declarations for the compiled build of rounds.py (Cython's pure-Python mode; the .py runs
# as it is without Cython): a SimRequest's round and heartbeat are read as C struct fields, and
# the jump's per-call constants with C integer locals. Rounds and counts stay Python integers and
# the share is an int over an int, so the records are the same bit for bit.
cimport cython

from simulator.engine.decode_jump cimport DecodeJump, JumpSegment
from simulator.engine.request cimport SimRequest


cpdef tuple majority_round(batch)

@cython.locals(req=SimRequest)
cpdef object _single_round(batch)

@cython.locals(counts=dict, n=cython.Py_ssize_t)
cpdef tuple _mixed_rounds(batch)

@cython.locals(req=SimRequest, counts=dict, n=cython.Py_ssize_t)
cpdef tuple _round_counts(batch)

@cython.locals(best=cython.Py_ssize_t, c=cython.Py_ssize_t)
cpdef tuple _top_round(dict counts, Py_ssize_t n)

@cython.locals(counts=dict, n=cython.Py_ssize_t)
cpdef tuple _count_rounds(list batch)

@cython.locals(steps=cython.longlong, queue=cython.longlong, running=cython.Py_ssize_t,
               k=cython.longlong, seg=JumpSegment, batch=list, prev=list, counts=dict,
               n=cython.Py_ssize_t, known=tuple)
cpdef jump_constants(list const, DecodeJump jump)

@cython.locals(nb=cython.Py_ssize_t, j=cython.Py_ssize_t, c=cython.Py_ssize_t, req=SimRequest)
cpdef Py_ssize_t _drop_leavers(list batch, list prev, dict counts, Py_ssize_t n) except? -2

@cython.locals(n=cython.Py_ssize_t, j=cython.Py_ssize_t, req=SimRequest)
cpdef object _round_of_subset(list batch, list prev, rnd, double share)
