# Typed declarations for the compiled build of request_rows.py (Cython's pure Python mode; the .py
# runs as it is without Cython): RequestRows is a cdef class, so its per-request work at arrival
# (see) and finish reaches its own state without dictionary look-ups. No number changes type.
cimport cython

from simulator.engine.request cimport SimRequest


@cython.locals(req=SimRequest)
cpdef tuple numeric_row(r)


cdef class RequestRows:
    cdef readonly dict _live
    cdef Py_ssize_t _live_max
    cdef public list rid
    cdef public list session
    cdef dict _reasons
    cdef list _rows
    cdef dict _cols
    cdef public object objects

    @cython.locals(live=dict)
    cpdef see(self, req)

    @cython.locals(row=Py_ssize_t)
    cpdef Py_ssize_t _new_row(self, req) except -1

    @cython.locals(row=object)
    cpdef finish(self, req)
