# Typed declarations for the compiled build of chunk_train.py (Cython's pure-Python mode: the .py
# stays the one source and runs as it is without Cython). The server is the scheduler's cdef
# class, so its fields are C fields; times, durations and pool counts stay Python objects (the
# cost model's and the cache's own values, unconverted), so the records are the same bit for bit.
cimport cython

from simulator.engine.admission cimport chunk_continuation, running_offset
from simulator.engine.server cimport ServerCore
from simulator.engine.server_state cimport ServerReq


@cython.locals(records=list, cached_before=cython.longlong, ext=cython.longlong,
               new_len=cython.longlong, truncated=cython.bint)
cpdef tuple run_chunks(ServerCore server, ServerReq req)

@cython.locals(arrivals=list, queue=cython.Py_ssize_t)
cpdef report_chunks(ServerCore server, ServerReq req, list records, Py_ssize_t queued0)
