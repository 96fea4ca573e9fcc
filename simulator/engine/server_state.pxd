# Typed declarations for the compiled build of server_state.py (Cython's "pure Python mode": the
# .py stays the one source). ServerReq is a cdef class deriving from request_kv's ReqKV, so a
# compiled module that types a request as ServerReq reads its lengths and scheduler counters as
# C fields. Other compiled modules use
#     from simulator.engine.server_state cimport ServerReq
cimport cython
from simulator.request_kv cimport ReqKV


@cython.locals(max_req_len=cython.longlong, max_new=cython.longlong, paged_input=cython.longlong)
cpdef long long init_req_max_new_tokens(object max_new_tokens, long long prompt_len,
                                        object context_length, long long full_tokens,
                                        long long page_size) except? -1


cdef class ServerReq(ReqKV):
    cdef public object sim
    cdef public object done
    cdef public bint ignore_eos
    cdef public long long max_new_tokens
    cdef public long long retractions
    cdef public long long gen
    cdef public object stashed


@cython.locals(req=ServerReq)
cpdef ServerReq server_req(object sim)


cdef class NewTokenRatio:
    cdef public double conservativeness
    cdef public double current
    cdef public double minimum
    cdef public double decay

    cpdef reset(self)
    cpdef on_decode_steps(self, long long steps)
