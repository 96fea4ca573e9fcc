# Typed declarations for the compiled build of jump_core.py (Cython's pure-Python mode: the .py
# stays the one source and runs as it is without Cython). The server is the scheduler's cdef
# class, so its fields are C fields and its _complete / _check are C calls; the jump's loops are
# fast_forward's typed functions, called in C. Token, page and step counts are 64-bit integers
# with Python's floor division (cdivision is off); no float is computed here, so the results are
# the same bit for bit. The cache stays a Python object (the tests wrap it in a protocol proxy).
cimport cython

from policies.swa_eviction cimport DecodeContext
from simulator.engine.decode_clock cimport DecodeClock
from simulator.engine.decode_jump cimport DecodeJump, JumpSegment
from simulator.engine.fast_forward cimport _FinishChain, advance, finishing_at, finishing_steps, jump_inputs, page_opens, price_jump, replay_short_steps, sims_of, steps_ran, unfinished
from simulator.engine.server cimport ServerCore
from simulator.engine.server_state cimport ServerReq
from simulator.request_kv cimport ReqKV


@cython.locals(batch=list, seqs=list, last=list, segments=list, clock=DecodeClock,
               m=cython.longlong, arrival=cython.double, finishing=list)
cpdef tuple plan_jump(ServerCore server, long long k, double now)

@cython.locals(forward0=cython.longlong, p=cython.longlong, a=cython.longlong, b=cython.longlong,
               opened=cython.longlong, freed=cython.longlong, x=cython.longlong,
               pages=cython.longlong, offset_full=cython.longlong, offset_swa=cython.longlong,
               full_base=cython.longlong, swa_base=cython.longlong, full0=cython.longlong,
               swa0=cython.longlong, full1=cython.longlong, swa1=cython.longlong,
               recording=cython.bint, ran=list, opens=list, frees=list, recorded=list,
               members=list, done_now=list, seg=JumpSegment, bulk=tuple, sims=list,
               r=ServerReq, full_used0=cython.longlong, swa_used0=cython.longlong)
cpdef apply_jump(ServerCore server, list batch, list seqs, list last, list segments, clock,
                 long long m, double start)

@cython.locals(reqs=list, starts=list, i=cython.Py_ssize_t, x=cython.longlong,
               pages=cython.longlong)
cpdef tuple _replay_segment(ServerCore server, list batch, list seqs, list members, long long a,
                            long long b, long long forward0, clock, double start, list opens,
                            list frees)

@cython.locals(out=list, i=cython.Py_ssize_t)
cpdef list picked(list items, list members)

@cython.locals(seg=JumpSegment)
cpdef JumpSegment new_segment(long long a, long long b, list batch, long long full_base,
                              long long swa_base)

@cython.locals(jump=DecodeJump)
cpdef DecodeJump new_jump(clock, long long m, long long p, list opens, list frees, list segments,
                          long long queue)

@cython.locals(p=cython.longlong, opens=list, full_free=cython.longlong, swa_free=cython.longlong,
               frees=list, freed_pages=cython.longlong, step=cython.longlong,
               freed=cython.longlong, pages=cython.longlong, full_used0=cython.longlong,
               swa_used0=cython.longlong, i=cython.Py_ssize_t, n=cython.longlong,
               ctx=DecodeContext, r=ReqKV)
cpdef object replay_jump(ServerCore server, list batch, list seqs0, list ran, long long m,
                         long long forward_ct)

@cython.locals(bs=cython.Py_ssize_t, p=cython.longlong, opens=list, total=cython.longlong,
               i=cython.Py_ssize_t, s=cython.longlong, _j=cython.longlong, n=cython.longlong,
               ctx=DecodeContext, free_list=list, frees_total=cython.longlong,
               step=cython.longlong, freed=cython.longlong, pages=cython.longlong,
               full_used0=cython.longlong, swa_used0=cython.longlong, open_steps=list,
               full_free=cython.longlong, swa_free=cython.longlong, frees=list)
cpdef tuple replay_quiet_steps(ServerCore server, list batch, list seqs0, long long m,
                               long long forward_ct)
