"""Decode fast-forward: quiet decode steps (and trains of prefill chunks) in one clock jump.

A span of decode steps that needs no scheduling decision is priced in closed form
(:class:`DecodeClock`), the clock jumps once, clients hear of finishes at their exact times
(:class:`_FinishChain`), and the cache side is replayed in step order afterwards: in bulk when
no step can evict (:meth:`FastForwardMixin._replay_jump`), else SGLang's per-step sequence where
a pool runs short (:meth:`FastForwardMixin._replay_quiet_steps`). The results are those of
running every step on its own, bit for bit (tests/test_engine_server.py).
"""

from __future__ import annotations

import math

import simpy

from simulator.engine.decode_clock import DecodeClock, segment_sums, segment_sums_from
from simulator.engine.server_state import ServerReq
from simulator.radix.cache import OutOfMemory

MAX_JUMP = 1024  # decode steps per fast-forward jump (an arrival usually ends one earlier)
_URGENT = simpy.events.URGENT  # the priority of events that go before others of their instant


class _DeferredFrees:
    """Stands in for the allocator while a policy's frees are collected for a jump."""

    def free_swa_pages(self, n: int) -> None:
        pass


_DEFERRED_FREES = _DeferredFrees()
_JUMP_CORE: list = []  # simulator.engine.jump_core, once loaded (_jump_core)


def _jump_core():
    """The jump's server-typed steps (simulator.engine.jump_core): imported on the first jump,
    once server.py has loaded (jump_core.pxd cimports ``ServerCore``; server.py imports this
    module at its top), and kept for the later ones."""
    if not _JUMP_CORE:
        from simulator.engine import jump_core

        _JUMP_CORE.append(jump_core)
    return _JUMP_CORE[0]


class _FinishChain:
    """Tells clients of the finishes inside one decode jump, at their exact times.

    One pending event at a time, for the next finishing step, instead of one per finishing
    request: an arrival usually cuts a jump short, and the next jump would otherwise schedule
    the same finishes again. The events are URGENT so that, as when each step ran on its own,
    a finish at the jump's last step reaches its client before the server resumes.

    The chain is its own event, scheduled again for each finishing step (simpy's
    ``Environment.step`` reads only an event's ``callbacks``, and ``_ok``): the queue gets the
    same entries at the same moments as with a fresh ``Timeout`` each, without the objects.
    """

    __slots__ = ("server", "batch", "finishing", "clock", "pos", "limit", "callbacks", "_ok")

    def __init__(self, server, batch: list, finishing: list[tuple[int, int]], clock: DecodeClock) -> None:
        self.server, self.batch, self.finishing, self.clock = server, batch, finishing, clock
        self.pos = 0
        self.limit = clock.steps  # steps at or past it are not reached (the jump was cut short)
        self._ok = True  # an event that never fails
        self.callbacks = None
        self._schedule(server.env.now)

    def _schedule(self, now: float) -> None:
        step = self.finishing[self.pos][0]
        # what a Timeout of this delay with URGENT priority does (simpy.events.Timeout)
        self.callbacks = [_fire_chain]
        self.server.env.schedule(self, _URGENT, self.clock.end(step) - now)

    def _fire(self, _event) -> None:
        finishing = self.finishing
        step = finishing[self.pos][0]
        if step >= self.limit:
            return
        t = self.clock.end(step)
        n = len(finishing)
        while self.pos < n and finishing[self.pos][0] == step:
            self.server._complete(self.batch[finishing[self.pos][1]], t, release=False)
            self.pos += 1
        if self.pos < n and finishing[self.pos][0] < self.limit:
            self._schedule(t)


def _fire_chain(chain: _FinishChain) -> None:
    """The callback of a :class:`_FinishChain`'s event (the chain itself)."""
    chain._fire(chain)


class FastForwardMixin:
    """The jump machinery of :class:`~simulator.engine.server.ServerModel` (a mixin, as SGLang
    splits its ``Scheduler``): it reads and writes the server's state directly, so a jump adds no
    call layers to the steps it stands for."""

    def _run_chunk_train(self, req: ServerReq):
        """Consecutive truncated chunks of one long prompt, in one jump of the clock.

        While a chunk is truncated the prefill batch holds only the chunked request
        (``add_chunked_req`` uses the whole chunk budget) and nothing else runs or reads the
        cache, so each chunk's allocation, forward and checkpoint can be applied in order and the
        clock advanced once. The last (untruncated) chunk goes back to the scheduler, which may
        batch waiting requests with it.
        """
        # chunk_train.pxd cimports ServerCore: imported here, once server.py has loaded
        from simulator.engine.chunk_train import report_chunks, run_chunks

        t, records, queued0 = run_chunks(self, req)
        if t > self.env.now:
            dur = t - self.env.now
            if not self._clock_skips(dur):  # no event due before the train ends: no timeout
                yield self.env.timeout(dur)
        report_chunks(self, req, records, queued0)  # arrivals wait out the train

    def _quiet_steps(self) -> int:
        """Upcoming decode steps that need no scheduling decision and cannot retract.

        Within them counters advance, pages are allocated at page boundaries, the SWA-eviction
        policy frees at its trigger steps, the tree evicts when a pool runs short, and requests
        finish and are released, all replayed in step order after the jump. The span ends when
        the batch empties, before a request still running reaches the window (its SWA context
        stops growing there), and while free plus evictable pages cover every step's allocation
        with a batch of headroom.
        """
        if self.waiting or self.chunked is not None or self.cfg.check_invariants or not self.cfg.fast_forward:
            return 0
        batch = self.running
        return quiet_span(batch, remaining_outputs(batch), self.page_size, self.window, self.cache)

    def _quiet_span(self, batch: list[ServerReq], rem: list[int]) -> int:
        """How many of the next decode steps of ``batch`` a jump may take, request ``i`` taking
        part in the first ``rem[i]`` of them (both loops): :func:`quiet_span`."""
        return quiet_span(batch, rem, self.page_size, self.window, self.cache)

    def _fast_forward(self, k: int):
        """Run ``k`` quiet decode steps at once, stopping early if a request arrives.

        The batch may shrink inside the jump: a request that produces its last token at step f
        leaves after f. Clients learn of each finish at its exact time (:class:`_FinishChain`); the
        cache-side release is replayed in step order after the clock has moved.
        """
        core = _JUMP_CORE[0] if _JUMP_CORE else _jump_core()
        now = self.env.now
        batch, seqs, last, segments, clock, m, chain = core.plan_jump(self, k, now)
        try:
            yield self.env.timeout(clock.end(m - 1) - now)
        except simpy.Interrupt:
            # a request arrived: the step in flight completes before the scheduler sees it
            self._interrupt_before = -math.inf
            m = min(m, clock.steps_ended_by(self.env.now) + 1)
            if chain is not None:
                chain.limit = m  # finishes past the step in flight are not reached
            remaining = clock.end(m - 1) - self.env.now
            if remaining > 0:
                yield self.env.timeout(remaining)
        finally:
            self._interrupt_before = -math.inf
        core.apply_jump(self, batch, seqs, last, segments, clock, m, now)

    def _price_jump(
        self, seqs: list[int], last: list[int], k: int, now: float, arrival: float, beyond: int = 0
    ) -> tuple[list[tuple[int, int, list[int]]], DecodeClock]:
        """The jump's batch segments and their clock (:func:`price_jump`)."""
        return price_jump(self.costs, seqs, last, k, now, arrival, beyond, self.window)

    def _replay_jump(
        self, batch: list[ServerReq], seqs0: list[int], ran: list[int], m: int, forward_ct: int
    ) -> tuple[int, int, list[int], list[tuple[int, int]]] | None:
        """A whole jump's memory operations at once, when no step of it can evict
        (:func:`~simulator.engine.jump_core.replay_jump`); None (nothing done) otherwise."""
        return _jump_core().replay_jump(self, batch, seqs0, ran, m, forward_ct)

    def _replay_quiet_steps(
        self, batch: list[ServerReq], seqs0: list[int], m: int, forward_ct: int
    ) -> tuple[int, int, list[int], list[tuple[int, int]]]:
        """``m`` decode steps' memory operations in SGLang's per-step order
        (:func:`~simulator.engine.jump_core.replay_quiet_steps`)."""
        return _jump_core().replay_quiet_steps(self, batch, seqs0, m, forward_ct)


# --- the jump's typed loops (fast_forward.pxd types them in the compiled build) ----------------


def remaining_outputs(batch: list) -> list:
    """Tokens each request of ``batch`` still has to produce."""
    rem: list = []
    for r in batch:
        rem.append(r.output_len - r.num_outputs)
    return rem


def jump_inputs(batch: list, k: int) -> tuple:
    """``(seqs, last)`` of a jump of up to ``k`` steps: each request's allocated tokens, and
    the last step of the span in which it runs (it leaves after its last token)."""
    seqs: list = []
    last: list = []
    for r in batch:
        seqs.append(r.kv_allocated_len)
        n = r.output_len - r.num_outputs
        last.append(min(n, k) - 1)
    return seqs, last


def finishing_steps(batch: list, last: list, m: int) -> list:
    """``(last step, index)`` of the requests of ``batch`` that finish within ``m`` steps,
    sorted (the order their clients hear of them in)."""
    finishing: list = []
    for i in range(len(batch)):
        r = batch[i]
        if r.output_len - r.num_outputs <= m:
            finishing.append((last[i], i))
    finishing.sort()
    return finishing


def quiet_span(batch: list, rem: list, p: int, w: int, cache) -> int:
    """How many of the next decode steps of ``batch`` a jump may take, request ``i`` taking
    part in the first ``rem[i]`` of them: up to the last step of any request, before a request
    still in the batch reaches the window ``w``, and while free plus evictable pages (``cache``)
    cover every step with a batch of headroom."""
    bs = len(batch)
    if len(rem) != bs:
        raise ValueError("quiet_span: one remaining-step count per request")
    k = 0
    for i in range(bs):
        n = rem[i]
        if i == 0 or n > k:
            k = n  # max(rem, default=0)
    for i in range(bs):
        r = batch[i]
        seq = r.kv_allocated_len + 1
        if seq < w:
            cross = w - seq
            if cross < rem[i] and cross < k:  # still in the batch when it reaches the window
                k = cross
    if k <= 1:
        return 0
    full_room, swa_room = cache.room_tokens()
    room = min(full_room // p, swa_room // p)  # free + evictable pages
    if room < bs:
        return 0
    # each request opens at most ceil(s / p) + 1 pages in s steps
    if p == 1:
        k = min(k, (room - bs) // bs + 1)
    else:
        k = min(k, p * max(0, (room - bs) // bs - 1))
    return max(0, k)


def price_jump(
    costs, seqs: list, last: list, k: int, now: float, arrival: float, beyond: int, w: int
) -> tuple:
    """The jump's batch segments ``(first step, end step, member indices)`` and their clock.

    A segment ends where a request leaves (after its last step ``last[i]``; -1: in none).
    Each is priced from its batch size and FULL / SWA context sums at its first step: a
    step costs ``C(bs) + max(fa*x, fb*(x+bs)) + max(sa*y, sb*(y+bs))``
    (``CostModel.decode_terms``). Pricing stops with the segment in which the announced
    ``arrival`` falls, or once ``beyond`` more steps after that one are priced.
    """
    ends = set()
    for i in range(len(last)):
        f = last[i] + 1
        if 0 < f < k:
            ends.add(f)
    cuts = sorted(ends)
    cuts.append(k)
    segments: list = []
    terms = costs.decode_terms(1)
    clock = DecodeClock(now, [], terms[1], terms[2], terms[3], terms[4])
    a = 0
    members = None
    for b in cuts:
        if members is None:
            members, x0, y0, below = segment_sums(seqs, last, a, w)
        else:  # the members of a later segment are among the earlier one's
            members, x0, y0, below = segment_sums_from(seqs, last, members, a, w)
        segments.append((a, b, members))
        n = len(members)
        clock.add(b - a, costs.decode_terms(n)[0], n, x0, y0, below)
        a = b
        if clock.priced_end() > arrival and (
            not beyond or clock.steps > clock.steps_ended_by(arrival) + beyond
        ):
            break  # the announced arrival comes first: price no further
    return segments, clock


def steps_ran(last: list, m: int) -> list:
    """The steps each request ran in a jump whose first ``m`` steps ran (``last[i]``: its
    last step in the span)."""
    ran: list = []
    for i in range(len(last)):
        f = last[i] + 1
        ran.append(f if f < m else m)  # min(f, m)
    return ran


def sims_of(batch: list) -> list:
    """The trace requests of ``batch``."""
    sims: list = []
    for r in batch:
        sims.append(r.sim)
    return sims


def unfinished(batch: list) -> list:
    """The requests of ``batch`` still producing tokens, in order."""
    out: list = []
    for r in batch:
        if r.num_outputs < r.output_len:
            out.append(r)
    return out


def finishing_at(batch: list, members: list, last: list, b: int) -> list:
    """The members of a segment ending at step ``b`` that produce their last token at its
    last step, in member order (the order they are released in)."""
    done: list = []
    for j in range(len(members)):
        i = members[j]
        f = last[i]
        if f < b:
            r = batch[i]
            if r.num_outputs >= r.output_len:
                done.append(r)
    return done


def advance(reqs: list, n: int) -> None:
    """Each request's counters after ``n`` more decode steps."""
    for r in reqs:
        r.kv_allocated_len += n
        r.decode_batch_idx += n
        r.num_outputs += n


def page_opens(seqs0: list, ran: list, p: int) -> list:
    """The steps at which a page opens, one entry per page, in request order: request ``i``
    (``seqs0[i]`` tokens allocated) runs ``ran[i]`` steps and opens a page at every step whose
    token starts one."""
    if len(ran) != len(seqs0):
        raise ValueError("page_opens: one step count per request")
    opens: list = []
    for i in range(len(seqs0)):
        n = ran[i]
        s = (-seqs0[i]) % p  # the first step at which this request opens a page
        while s < n:
            opens.append(s)
            s += p
    return opens


def replay_short_steps(cache, opens: list, frees: list, bs: int, p: int) -> None:
    """The per-step sequence of :func:`replay_quiet_steps` where a pool may run short: quiet
    stretches in bulk, each short step as SGLang runs it (evict, window free, evict,
    allocate)."""
    m = len(opens)
    s = 0
    while s < m:
        # the first step t >= s that runs short if no eviction happened before it: free pages
        # before its allocation, less the pages opened (plus the SWA pages freed) in [s, t)
        full_free, swa_free = cache.free_pages()
        cons = freed = 0
        t = s
        while t < m:
            need = opens[t]
            ff = full_free - cons
            sf = swa_free - cons + freed
            ft = frees[t]
            if ff < need or sf < need or ff < bs or sf + ft < bs:
                break
            cons += need
            freed += ft
            t += 1
        if t > s:  # the quiet stretch [s, t): its allocations and SWA frees, net
            cache.alloc_pages_and_free_swa(cons, freed)
        if t == m:
            break
        # step t runs SGLang's per-step sequence
        cache.evict_to_free_tokens(opens[t] * p)
        cache.free_swa_pages(frees[t])
        cache.evict_to_free_tokens(bs * p)
        if not cache.can_alloc_pages(opens[t]):  # pragma: no cover - excluded by _quiet_steps
            raise OutOfMemory("decode out of memory inside a fast-forwarded span")
        cache.alloc_pages(opens[t])
        s = t + 1
