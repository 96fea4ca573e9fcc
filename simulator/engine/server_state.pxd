# Typed declarations for the compiled build of server_state.py (Cython's "pure Python mode": the
# .py stays the one source). ServerReq is a cdef class deriving from request_kv's ReqKV, so a
# compiled module that types a request as ServerReq reads its lengths and scheduler counters as
# C fields. Other compiled modules use
#     from simulator.engine.server_state cimport ServerReq
from simulator.request_kv cimport ReqKV


cdef class ServerReq(ReqKV):
    cdef public object sim
    cdef public object done
    cdef public bint ignore_eos
    cdef public long long max_new_tokens
    cdef public long long retractions
    cdef public long long gen
    cdef public object stashed
