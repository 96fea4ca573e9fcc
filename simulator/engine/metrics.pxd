# Typed declarations for the compiled build of metrics.py (Cython's pure-Python mode; the .py
# runs as it is without Cython): the recorder's per-jump bookkeeping with C integer locals. The
# recorded numbers are integers (steps, batch sizes, the queue) and the shares Python floats
# computed as in the .py, so the columns are the same bit for bit.
cimport cython

from simulator.engine.decode_jump cimport DecodeJump, JumpSegment


cpdef tuple majority_round(batch)

@cython.locals(steps=cython.longlong, queue=cython.longlong, running=cython.Py_ssize_t,
               k=cython.longlong, seg=JumpSegment, batch=list, prev=list)
cpdef jump_constants(list const, DecodeJump jump)

@cython.locals(n=cython.Py_ssize_t, j=cython.Py_ssize_t)
cpdef object _round_of_subset(list batch, list prev, rnd, double share)
