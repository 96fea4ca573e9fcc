# Typed declarations for the compiled build of metrics.py (Cython's pure-Python mode; the .py
# runs as it is without Cython): the recorder calls the round labels of rounds.py as C functions,
# and Recorder is a cdef class, so the hooks the server calls for every batch, jump and finish
# reach its state as struct fields instead of instance-dict look-ups. Every field stays a Python
# object (Python access, the same numbers); a subclass in Python works as before.
from simulator.engine.decode_jump cimport JumpColumns
from simulator.engine.observer cimport ServerObserver
from simulator.engine.rounds cimport jump_constants, majority_round


cdef class Recorder(ServerObserver):
    cdef object __weakref__  # weakref.ref(recorder) works as for the plain class
    cdef public object log_decode
    cdef public object decode_log_interval
    cdef public object log_stream
    cdef public object request_rate
    cdef public object progress
    cdef public object epoch
    cdef public object capacity
    cdef public object server_config
    cdef public object counters
    cdef public object hicache
    cdef public object end_s
    cdef public object _reqs
    cdef public object _finished
    cdef public object _d_chunks
    cdef public JumpColumns _jumps  # its add() is a C call
    cdef public object _d_const
    cdef public object _d_const_packed
    cdef public object _d_tail
    cdef public object _d_records
    cdef public object _d_arrays
    cdef public object _d_lazy
    cdef public object _n_steps
    cdef public object _tokens_since_log
    cdef public object _last_log_t
    cdef public object _prefill
    cdef public object _prefill_packed
    cdef public object _n_prefill_packed
    cdef public object _retract
