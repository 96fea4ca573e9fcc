# Typed declarations for the compiled build of clients.py (Cython's pure Python mode; the .py runs
# as it is without Cython): the tracker every request passes through at its send and its finish
# is a cdef class, so it reaches its own state without dictionary look-ups.


cdef class _Tracker:
    cdef public object env
    cdef public object stats
    cdef public object all_done
    cdef object _done_cb

    cpdef send(self, server, req)
    cpdef _done(self, _event)
