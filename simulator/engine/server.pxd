# Typed declarations for the compiled build of server.py (Cython's pure Python mode; the .py runs
# as it is without Cython). ServerCore is a cdef class: the scheduler loop's methods read and
# write its attributes as C fields instead of instance-dictionary entries. ServerModel (a Python
# class: its mixins are plain classes) derives from it, so the mixins reach the same attributes
# through their descriptors. The step counter forward_ct, the page size and the window are C
# integers; the other counters stay Python objects (a jump may add a numpy integer).
cimport cython
from simulator.engine.admission cimport PrefillAdder, PrefillBatch, new_prefill_adder
from simulator.engine.intake cimport client_sampling
from simulator.engine.request cimport SimRequest
# ServerReq under another name: server.py re-exports the Python name (a cimported one is no attribute)
from simulator.engine.server_state cimport ServerReq as Req, NewTokenRatio, init_req_max_new_tokens, server_req
from simulator.engine.step_costs cimport StepCosts


cdef class ServerCore:
    cdef public object env
    cdef public object cfg
    cdef public object pools
    cdef public object cost
    cdef public StepCosts costs
    cdef public object obs
    cdef public bint overlap
    cdef public object max_new_mode
    cdef public long long page_size
    cdef public long long window
    cdef public object hicache
    cdef public object cache
    cdef public double _jump_deadline
    cdef public object ops
    cdef public object _step
    cdef public object swa_policy
    cdef public NewTokenRatio ratio
    cdef public object waiting
    cdef public list running
    cdef public object chunked
    cdef public long long forward_ct
    cdef public object decode_steps
    cdef public object swa_freed_by_decode
    cdef public object retractions
    cdef public object aborts
    cdef public object completed
    cdef public object overlap_extra_slots
    cdef public object _wakeup
    cdef public double _interrupt_before
    cdef public double _next_arrival
    cdef public object on_pass
    cdef public bint batch_is_full
    cdef public object last_adder
    cdef public object lpm_deprioritized
    cdef public object refresh_calls
    cdef public bint _req_left
    cdef public object in_flight
    cdef public object _fresh_key
    cdef public object process
    cdef public bint _plain_env

    # cpdef: a C call from the loop (still overridable from Python, as the tests' patches do)
    @cython.locals(req=Req, stated=cython.bint)
    cpdef submit(self, SimRequest sim)
    cpdef expect_arrival(self, t)
    cpdef _check(self)
    @cython.locals(sim=SimRequest)
    cpdef _complete(self, Req r, t, reason=*, owned=*, bint notify=*, bint release=*)
    cpdef _abort(self, req, detail)
    @cython.locals(chunked=Req, max_running=cython.longlong, rows=cython.longlong,
                   adder=PrefillAdder, batch=PrefillBatch)
    cpdef list _get_new_batch_prefill(self)
    cpdef PrefillAdder _new_adder(self, long long max_running)
    cpdef _stash_chunked(self, req)
    cpdef _calc_priority(self)
    @cython.locals(r=Req, cached_before=cython.longlong)
    cpdef _prepare_extend(self, list batch)
    cpdef _prefill_joins(self, batch)
    @cython.locals(batch=list, r=Req)
    cpdef _prepare_decode(self)

    # the loop's steps around its waits (the generator itself cannot have typed locals)
    cpdef bint _clock_skips(self, dur) except -1
    cpdef bint _is_chunk_train(self, list batch) except -1
    @cython.locals(r=Req)
    cpdef _start_prefill(self, list batch)
    @cython.locals(r=Req, sim=SimRequest, first=cython.double)
    cpdef _end_prefill(self, list batch, tuple step)
    cpdef long long _decode_span(self) except? -1
    cpdef _end_jump(self)
    @cython.locals(r=Req, n=cython.longlong, full_ctx=cython.longlong,
                   swa_ctx=cython.longlong, window=cython.longlong)
    cpdef _start_decode(self)
    @cython.locals(r=Req, still=list)
    cpdef _end_decode(self, list batch)
