# Typed declarations for the compiled build of request.py (Cython's "pure Python mode": the .py
# stays the one source). SimRequest is a cdef class: one is built per trace row, in C. The
# lengths and counters are C 64-bit integers; times, flags and labels stay Python objects, so
# every value reads back with the type it was given (an int time stays an int). Other compiled
# modules use
#     from simulator.engine.request cimport SimRequest


cdef class SimRequest:
    cdef public object rid
    cdef public object pages
    cdef public long long prompt_len
    cdef public long long output_len
    cdef public object arrival_s
    cdef public object session
    cdef public long long round
    cdef public object heartbeat
    cdef public long long index
    cdef public object ignore_eos
    cdef public object max_new_tokens
    cdef public object eos_stated
    cdef public object first_token_s
    cdef public object finish_s
    cdef public long long cached_tokens
    cdef public long long retractions
    cdef public object aborted
    cdef public object rejected
    cdef public object truncated
    cdef public object abort_reason
