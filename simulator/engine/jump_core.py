"""The decode jump's steps that read and write the scheduler's state: planning a jump, applying
its cache side, and replaying its memory operations (the typed part of
:meth:`~simulator.engine.fast_forward.FastForwardMixin._fast_forward`).

The compiled build reads the scheduler's fields as C fields (jump_core.pxd cimports
``ServerCore``) and calls its ``_complete`` and ``_check`` as C methods. A module of its own
because server.py imports fast_forward at its top: fast_forward imports this one on the first
jump, once the server module is loaded (as chunk_train.py).
"""

from __future__ import annotations

import math

from policies.swa_eviction import DecodeContext
from simulator.engine.decode_jump import DecodeJump, JumpSegment
from simulator.engine.fast_forward import (
    _DEFERRED_FREES,
    _FinishChain,
    advance,
    finishing_at,
    finishing_steps,
    jump_inputs,
    page_opens,
    price_jump,
    replay_short_steps,
    sims_of,
    steps_ran,
    unfinished,
)


def plan_jump(server, k: int, now: float) -> tuple:
    """A jump of up to ``k`` steps from ``now``, before the clock moves (the generator's typed
    part): ``(batch, seqs, last, segments, clock, m, chain)``, ``m`` the steps before the
    announced arrival's step ends, ``chain`` the finishes' :class:`_FinishChain` (or None).
    Sets ``_interrupt_before``: an arrival during the last planned step changes nothing; one
    before it cuts the jump."""
    batch = list(server.running)
    seqs, last = jump_inputs(batch, k)  # tokens allocated; the last step in the span
    arrival = server._next_arrival if server._next_arrival > now else math.inf
    arrival = min(arrival, server._jump_deadline)  # HiCache: end before the next transfer ack
    segments, clock = price_jump(server.costs, seqs, last, k, now, arrival, 0, server.window)
    m = clock.steps
    if arrival < clock.priced_end():
        # the announced arrival lands in step m - 1: the jump ends with that step
        m = clock.steps_ended_by(arrival) + 1
    finishing = finishing_steps(batch, last, m)
    chain = _FinishChain(server, batch, finishing, clock) if finishing else None
    server._interrupt_before = clock.end(m - 2) if m > 1 else now
    return batch, seqs, last, segments, clock, m, chain


def apply_jump(
    server, batch: list, seqs: list, last: list, segments: list, clock, m: int, start: float
) -> None:
    """The cache side of a jump that began at ``start`` and whose first ``m`` steps ran:
    memory operations, releases at finish in step order, and the jump's report
    (:class:`DecodeJump`). Recording, the memory operations go segment by segment
    (``_record_jump_segment``), each before the releases at its end."""
    forward0 = server.forward_ct
    p = server.page_size
    cache = server.cache
    ran = steps_ran(last, m)
    recording = server.ops is not None
    bulk = None if recording else replay_jump(server, batch, seqs, ran, m, forward0)
    opens: list = bulk[2] if bulk is not None else []  # a page opens at each, in step order
    frees: list = bulk[3] if bulk is not None else []  # (step, SWA pages)
    recorded: list = []
    sims = sims_of(batch)
    full_used0 = bulk[0] if bulk is not None else 0
    swa_used0 = bulk[1] if bulk is not None else 0
    nan = math.nan  # a finish's time: the client heard of it already (_FinishChain)
    offset_full = offset_swa = 0  # what releases inside the jump changed #full / #swa token by
    for a, b, members in segments:
        if a >= m:
            break
        if b > m:
            b = m
        if bulk is not None:
            opened = 0  # bisect_left(opens, a): opens is sorted
            for x in opens:
                if x >= a:
                    break
                opened += 1
            freed = 0
            for x, pages in frees:
                if x < a:
                    freed += pages
            full_base = full_used0 + offset_full + opened * p
            swa_base = swa_used0 + offset_swa + (opened - freed) * p
        else:
            full_base, swa_base = _replay_segment(
                server, batch, seqs, members, a, b, forward0, clock, start, opens, frees
            )
        seg = new_segment(a, b, picked(sims, members), full_base, swa_base)
        recorded.append(seg)
        done_now = finishing_at(batch, members, last, b)
        if done_now:
            full0, swa0 = cache.used_tokens()
            cache.free_group_begin()
            for r in done_now:  # positional: a C call in the compiled build
                server._complete(r, nan, None, None, False, True)
            cache.free_group_end()
            full1, swa1 = cache.used_tokens()
            seg.full_released = full1 - full0
            seg.swa_released = swa1 - swa0
            offset_full += seg.full_released
            offset_swa += seg.swa_released
    # requests that arrived during the last step are in the queue it reports
    server.obs.on_decode_jump(new_jump(clock, m, p, opens, frees, recorded, len(server.waiting)))
    server.forward_ct = forward0 + m
    server.decode_steps += m
    server.ratio.on_decode_steps(m)
    server.running = unfinished(batch)
    server._check()


def _replay_segment(
    server,
    batch: list,
    seqs: list,
    members: list,
    a: int,
    b: int,
    forward0: int,
    clock,
    start: float,
    opens: list,
    frees: list,
) -> tuple:
    """The memory operations of a jump's segment ``[a, b)`` (its ``members``) step by step:
    recorded (``_record_jump_segment``), or SGLang's per-step sequence where a step may evict.
    Returns the segment's ``#full token`` / ``#swa token`` base; appends its page opens and
    SWA frees, at the jump's steps, to ``opens`` and ``frees``."""
    reqs = picked(batch, members)
    if server.ops is not None:
        full_base, swa_base, seg_opens, seg_frees = server._record_jump_segment(
            reqs, a, b, forward0, clock, start
        )
    else:  # a step of it may evict: SGLang's per-step sequence, by segment
        starts: list = []
        for i in members:
            starts.append(seqs[i] + a)
        full_base, swa_base, seg_opens, seg_frees = replay_quiet_steps(
            server, reqs, starts, b - a, forward0 + a
        )
        advance(reqs, b - a)
    for x in seg_opens:
        opens.append(a + x)
    for x, pages in seg_frees:
        frees.append((a + x, pages))
    return full_base, swa_base


def picked(items: list, members: list) -> list:
    """``[items[i] for i in members]`` (a typed loop in the compiled build)."""
    out: list = []
    for i in members:
        out.append(items[i])
    return out


def new_segment(a: int, b: int, batch: list, full_base: int, swa_base: int) -> JumpSegment:
    """``JumpSegment(a, b, batch, full_base, swa_base)``, its fields set directly (no keyword
    parsing: one is built per segment of every jump)."""
    seg = JumpSegment.__new__(JumpSegment)
    seg.first = a
    seg.end = b
    seg.batch = batch
    seg.full_base = full_base
    seg.swa_base = swa_base
    seg.full_released = 0
    seg.swa_released = 0
    return seg


def new_jump(clock, m: int, p: int, opens: list, frees: list, segments: list, queue: int) -> DecodeJump:
    """``DecodeJump(clock, m, p, opens, frees, segments, queue)``, its fields set directly."""
    jump = DecodeJump.__new__(DecodeJump)
    jump.clock = clock
    jump.steps = m
    jump.page_size = p
    jump.opens = opens
    jump.swa_frees = frees
    jump.segments = segments
    jump.queue = queue
    return jump


def replay_jump(server, batch: list, seqs0: list, ran: list, m: int, forward_ct: int):
    """A whole jump's memory operations at once, when no step of it can evict.

    Request ``i`` ran ``ran[i]`` of the jump's ``m`` steps. If free pages cover every page the
    jump opens with a full batch to spare, no step runs short (releases only add free pages),
    so SGLang's per-step sequence reduces to net allocations and SWA frees, applied here in
    one go, and each request's counters advance. Returns ``#full token`` / ``#swa token``
    before the jump, the steps that open a page (sorted, one entry per page) and the
    ``(step, pages)`` SWA frees; or None (nothing done) otherwise, and the caller replays
    segment by segment (:func:`replay_quiet_steps`).
    """
    p = server.page_size
    cache = server.cache
    opens = page_opens(seqs0, ran, p)
    full_free, swa_free = cache.free_pages()
    if min(full_free, swa_free) - len(opens) < len(batch):
        return None
    opens.sort()
    ctx = DecodeContext(server.window, p, _DEFERRED_FREES, forward_ct)
    frees: list = []
    freed_pages = 0
    for step, freed in server.swa_policy.run_batch(batch, ctx, ran):
        pages = freed // p
        frees.append((step, pages))
        freed_pages += pages
    full_used0, swa_used0 = cache.used_tokens()
    server.swa_freed_by_decode += freed_pages * p
    cache.alloc_pages_and_free_swa(len(opens), freed_pages)
    if len(ran) != len(batch):
        raise ValueError("replay_jump: one step count per request")
    for i in range(len(batch)):
        r = batch[i]
        n = ran[i]
        r.kv_allocated_len += n
        r.decode_batch_idx += n
        r.num_outputs += n
    return full_used0, swa_used0, opens, frees


def replay_quiet_steps(server, batch: list, seqs0: list, m: int, forward_ct: int) -> tuple:
    """Apply ``m`` decode steps' memory operations in SGLang's per-step order.

    Per step: ``check_decode_mem`` (evict for the pages it opens), the SWA-eviction policy,
    ``alloc_for_decode`` (evict to ``bs * page``, then allocate). Between the steps where a
    pool runs short, allocations and SWA frees are applied in bulk. Returns ``#full token``
    and ``#swa token`` before the steps, the steps that open a page (one entry per page) and
    the ``(step, pages)`` SWA frees: evictions move evictable to available, so they change
    neither count (:class:`JumpSegment`).
    """
    bs = len(batch)
    p = server.page_size
    cache = server.cache
    opens = [0] * m  # pages opened at step s
    total = 0
    for i in range(len(seqs0)):
        s = (-seqs0[i]) % p  # the first step at which this request opens a page
        while s < m:
            opens[s] += 1
            total += 1
            s += p
    # SWA-eviction events, computed without touching the allocator, applied in order below
    ctx = DecodeContext(server.window, p, _DEFERRED_FREES, forward_ct)
    policy = server.swa_policy
    free_list: list = []
    frees_total = 0
    for r in batch:
        for step, freed in policy.run_steps(r, ctx, m):
            free_list.append((step, freed // p))
            frees_total += freed
    frees_total //= p
    server.swa_freed_by_decode += frees_total * p
    full_used0, swa_used0 = cache.used_tokens()
    open_steps: list = []  # the step of every page opened, in step order
    for s in range(m):
        n = opens[s]
        for _j in range(n):
            open_steps.append(s)
    full_free, swa_free = cache.free_pages()
    if min(full_free, swa_free) - total >= bs:
        # free pages never drop below a batch's worth: no step evicts
        cache.alloc_pages_and_free_swa(total, frees_total)
        return full_used0, swa_used0, open_steps, free_list
    frees = [0] * m  # SWA pages freed at step s (before its alloc)
    for step, pages in free_list:
        frees[step] += pages
    replay_short_steps(cache, opens, frees, bs, p)
    return full_used0, swa_used0, open_steps, free_list
