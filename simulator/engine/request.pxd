# Typed declarations for the compiled build of request.py (Cython's "pure Python mode": the .py
# stays the one source). SimRequest is a cdef class: one is built per trace row, in C. Every
# attribute stays a Python object, so each reads back the object it was given (an int time stays
# an int) without a conversion: its readers (metrics, request rows) are mostly untyped, where a C
# integer would cost a new Python int per read. A compiled module that types a request with
# SimRequest reads its attributes as C struct fields. Other compiled modules use
#     from simulator.engine.request cimport SimRequest


cdef class SimRequest:
    cdef public object rid
    cdef public object pages
    cdef public object prompt_len
    cdef public object output_len
    cdef public object arrival_s
    cdef public object session
    cdef public object round
    cdef public object heartbeat
    cdef public object index
    cdef public object ignore_eos
    cdef public object max_new_tokens
    cdef public object eos_stated
    cdef public object first_token_s
    cdef public object finish_s
    cdef public object cached_tokens
    cdef public object retractions
    cdef public object aborted
    cdef public object rejected
    cdef public object truncated
    cdef public object abort_reason
