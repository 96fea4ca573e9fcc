"""Decode fast-forward for the overlap loop (``Scheduler.event_loop_overlap``, managers/scheduler.py).

Under overlap, pass ``j`` launches decode step ``j`` before it processes the result of step
``j - 1``; the pass before the jump launched step ``-1``, still in flight. A jump stands for the
passes ``0 .. m-1``: it launches steps ``0 .. m-1`` and processes steps ``-1 .. m-2``; step
``m - 1`` is left in flight for the loop, as a stepped pass would leave it. What the lag means:

* request ``i`` gets its last token from step ``R_i - 1`` (``-1``: the batch in flight) and its
  finish is processed, and its cache released, in pass ``R_i``: after step ``R_i`` was launched
  (its allocation made), before step ``R_i + 1``;
* one finishing by length left step ``R_i``'s batch (``_reqs_finishing_inflight``); one that
  stopped at EOS is in it, an extra slot (``overlap_extra_decode_slots``);
* a step's pool usage is read when its result is processed (rule 8): in the next pass, after
  the next step's launch and that pass's releases;
* a window-eviction policy sees ``num_outputs`` one step behind (``seqlen`` lags the forward).

The jump never reaches a step where decode memory could run short, so the skip-on-shortfall
rule (``update_running_batch``) cannot fire inside it: the loop runs such passes itself. The
results equal those of stepping pass by pass (tests/test_overlap_jump.py).
"""

from __future__ import annotations

import bisect
import math

import simpy

from simulator.engine.decode_clock import DecodeClock
from simulator.engine.decode_jump import DecodeJump, JumpSegment
from simulator.engine.fast_forward import MAX_JUMP, _FinishChain
from simulator.engine.server_state import ServerReq


class _LaggedClock:
    """The jump's step clock with step ``-1`` (the batch in flight when it began) ending at
    ``first_end``, the time step 0 starts."""

    __slots__ = ("clock", "first_end", "steps")

    def __init__(self, clock: DecodeClock, first_end: float) -> None:
        self.clock, self.first_end, self.steps = clock, first_end, clock.steps

    def end(self, step: int) -> float:
        return self.first_end if step < 0 else self.clock.end(step)

    def in_flight(self, t: float) -> int:
        """The step running at time ``t`` (``-1`` before ``first_end``); an end time belongs to
        the next step, as in the plain loop's jump."""
        return self.clock.steps_ended_by(t) if t >= self.first_end else -1


class _StepClock:
    """One decode step's end time ``t`` as a :class:`DecodeClock` piece: ``(j+1)*a + E`` with
    ``j = 0``, ``a = t``, ``E = 0.0`` is ``t`` itself, so a one-step record in closed form
    (:func:`one_step_record`) materialises to the very float a per-step record would hold."""

    __slots__ = ("pieces",)

    def __init__(self, t: float) -> None:
        self.pieces = [(0, 1, 0.0, t, 0.0)]


def one_step_record(t: float, sims: list, full: int, swa: int, page: int, queue: int) -> DecodeJump:
    """A decode step's record (``report_decode_stats``) as a one-step :class:`DecodeJump`:
    the recorder keeps it in closed form with the jumps' records, without the per-step
    arrays of ``on_decode_steps`` (the overlap loop reports one such step per admission)."""
    return DecodeJump(_StepClock(t), 1, page, [], [], [JumpSegment(0, 1, sims, full, swa)], queue)


class _Plan:
    """The passes a jump may stand for, per request of the running batch: ``outs`` (processed
    outputs before the jump), ``got`` (1 if the batch in flight gives it a token), ``R`` (steps
    of the jump that give it a token) and ``n`` (steps of the jump it takes part in)."""

    __slots__ = ("batch", "outs", "got", "R", "n", "k")

    def __init__(
        self, batch: list, outs: list[int], got: list[int], R: list[int], n: list[int], k: int
    ) -> None:
        self.batch, self.outs, self.got, self.R, self.n, self.k = batch, outs, got, R, n, k


class OverlapJumpMixin:
    """The overlap loop's decode jump, a mixin of :class:`~simulator.engine.server.ServerModel`
    next to the plain loop's :class:`~simulator.engine.fast_forward.FastForwardMixin`."""

    def _overlap_jump_plan(self, pending) -> _Plan | None:
        """A jump from this pass, or None to step it: nothing waits or is chunked, the batch in
        flight is a decode step of exactly the running requests or a prefill batch that left
        no chunk; no recording or step clock."""
        cfg = self.cfg
        if (
            pending is None
            or pending.chunk is not None
            or self.waiting
            or self.chunked is not None
            or not cfg.fast_forward
            or cfg.check_invariants
            or self.ops is not None
            or self.on_pass is not None
            or (self._next_arrival > self.env.now and self._next_arrival < pending.end)
        ):
            return None
        batch = list(self.running)  # the result processing edits the running list
        live = {
            id(r)
            for r, gen in zip(pending.reqs, pending.gens, strict=True)
            if r.gen == gen and r.holds_kv and r.num_outputs < r.output_len
        }
        if pending.kind == "decode" and len(live) != len(batch):
            return None
        outs, got, R, n = [], [], [], []
        gots = 0
        for r in batch:
            o = r.num_outputs
            g = 1 if id(r) in live else 0
            x = r.output_len - o - g
            # dropped at pass max_new - o - g (finishing by length), else in the batch until the
            # pass that processes its finish: min(max(0, max_new - o - g), x + 1) steps
            k = r.max_new_tokens - o - g
            if k < 0:
                k = 0
            if k > x:
                k = x + 1
            elif k < x:
                return None  # max_new_tokens below the output length: step it as it comes
            outs.append(o)
            got.append(g)
            R.append(x)
            n.append(k)
            gots += g
        if gots != len(live):
            return None
        k = min(self._quiet_span(batch, n), MAX_JUMP)
        if self.hicache is not None:  # no release before its last pass (hicache_steps)
            k = self.hicache.bound_overlap_jump(k, pending.kind, R)
        return _Plan(batch, outs, got, R, n, k) if k > 1 else None

    def _overlap_fast_forward(self, pending, plan: _Plan):
        """Stand for passes ``0 .. m-1`` at once (``m <= plan.k``), stopping early if a request
        arrives: the pass that would see it is the loop's. Returns the step left in flight as
        ``(reqs, start, end)``, or None when the jump also stood for pass ``m`` (a draining
        batch: no request runs step ``m``, and pass ``m`` sees no arrival, so it launches
        nothing and only processes step ``m - 1``)."""
        batch, R, n = plan.batch, plan.R, plan.n
        now = self.env.now
        start = pending.end
        seqs = [r.kv_allocated_len for r in batch]
        arrival = self._next_arrival if self._next_arrival > now else math.inf
        if self.hicache is not None:  # every pass of the jump starts before the next ack
            arrival = min(arrival, self.hicache.jump_deadline())
        segments, clock = self._price_jump(seqs, [x - 1 for x in n], plan.k, start, arrival, beyond=1)
        lag = _LaggedClock(clock, start)
        m = seen = clock.steps
        if arrival < math.inf:  # the pass after the arrival's step in flight sees it
            seen = lag.in_flight(arrival) + 2
            m = min(m, seen)
        # passes the jump stands for: m, or m + 1 when pass m only drains the batch
        drain = m < seen and m > (pending.kind != "decode") and max(n) <= m and self.hicache is None
        passes = m + 1 if drain else m
        finishing = [(x - 1, i) for i, x in enumerate(R) if x < passes]
        chain = None
        if finishing:
            finishing.sort()
            chain = _FinishChain(self, batch, finishing, lag)
            chain.limit = passes - 1  # the finishes the jump's passes process
        self._interrupt_before = lag.end(passes - 3)  # an arrival later than that changes nothing
        last_pass = lag.end(passes - 2)  # when pass passes - 1 processes step passes - 2
        try:
            yield self.env.timeout(last_pass - now)
        except simpy.Interrupt:
            self._interrupt_before = -math.inf
            m = passes = min(m, lag.in_flight(self.env.now) + 2)
            if chain is not None:
                chain.limit = m - 1
            last_pass = lag.end(m - 2)
            remaining = last_pass - self.env.now
            if remaining > 0:
                yield self.env.timeout(remaining)
        finally:
            self._interrupt_before = -math.inf
        self._apply_overlap_jump(pending, plan, segments, lag, m, passes)
        self._overlap_jump_flags(plan, passes)
        self.running = [r for r, x in zip(batch, R, strict=True) if x >= passes]
        if passes > m:
            return None
        left = [r for r, x in zip(batch, n, strict=True) if x >= m]  # in step m - 1
        return left, last_pass, clock.end(m - 1)

    def _count_in_flight(self, pending) -> None:
        """Pass 0 processes the decode step that was in flight: its counters (its record comes
        with the jump's, read after pass 0's launch and releases; its finishes are released
        with the jump's, after step 0's memory operations)."""
        self.overlap_extra_slots += len(pending.reqs) - len(self.running)
        self.decode_steps += 1

    def _prefill_pass_zero(self, pending, plan: _Plan, members: list[int]) -> tuple:
        """Pass 0 with a prefill batch in flight: step 0's memory operations, then the batch's
        result processed as a stepped pass does it (first tokens, checkpoints, releases; the
        clients heard at its end). Its checkpoints move the window cursors that later steps'
        eviction reads, so the jump's other steps are replayed after it. Returns step 0's
        ``#full token`` / ``#swa token`` base, page opens and window frees."""
        batch, outs = plan.batch, plan.outs
        reqs = [batch[i] for i in members]
        seqs = [r.kv_allocated_len for r in reqs]
        step0 = self._replay_jump(reqs, seqs, [1] * len(reqs), 1, self.forward_ct)
        if step0 is None:  # it may evict: SGLang's per-step sequence
            step0 = self._replay_quiet_steps(reqs, seqs, 1, self.forward_ct)
            for r in reqs:
                r.kv_allocated_len += 1
                r.decode_batch_idx += 1
        for r, o in zip(batch, outs, strict=True):
            r.num_outputs = o  # what the result processing reads
        self._process_launched(pending, notify=False)
        for r, o, g in zip(batch, outs, plan.got, strict=True):
            r.num_outputs = o + g  # as step 1 sees it
        return step0

    def _apply_overlap_jump(
        self, pending, plan: _Plan, segments: list, lag: _LaggedClock, m: int, passes: int
    ) -> None:
        """The cache side of passes ``0 .. passes-1`` in their order (steps ``0 .. m-1``; pass
        ``m``, when ``passes`` is ``m + 1``, launches nothing): each step's allocations and
        window frees, the results a pass processes after launching its step; the records of the
        steps whose results those passes process (:class:`DecodeJump`), usage read as rule 8
        reads it (after the next step's launch and the pass's releases)."""
        batch, R = plan.batch, plan.R
        p = self.page_size
        forward0 = self.forward_ct
        recorded: list[JumpSegment] = []
        # one batch list per segment: the records of one batch's steps merge into one segment
        sims = [[batch[i].sim for i in members] for a, _, members in segments if a < m]
        if pending.kind == "decode":
            self._count_in_flight(pending)
            first, opens, frees, prev = 0, [], [], None
        else:
            _, _, opens, frees = self._prefill_pass_zero(pending, plan, segments[0][2])
            first, opens, frees = 1, list(opens), list(frees)
            prev = sims[0]
        head = events = None
        if m > first:
            head, events = self._jump_steps(
                plan, segments, sims, m, passes, first, forward0, opens, frees, recorded, prev
            )
        for r, o, g, x in zip(batch, plan.outs, plan.got, R, strict=True):
            r.num_outputs = o + g + min(x, passes - 1)  # the results processed: step -1 .. passes-2
        if head is not None:  # the in-flight step's record, read in pass 0
            queue = len(self.waiting) if passes == 1 else 0
            sims = [r.sim for r in pending.reqs]
            self.obs.on_decode_jump(one_step_record(pending.end, sims, head[0], head[1], p, queue))
        if passes > 1:
            # record j reads step j + 1's launch: the page events shift one step back
            if events is not None:  # replayed in bulk from launch 1: its steps are the records'
                shifted, kept = events
            else:
                lo, hi = bisect.bisect_left(opens, 1), bisect.bisect_left(opens, m)
                shifted = [x - 1 for x in opens[lo:hi]]
                kept = [(x - 1, pages) for x, pages in frees if 1 <= x < m] if frees else []
            queue = len(self.waiting)
            self.obs.on_decode_jump(DecodeJump(lag.clock, passes - 1, p, shifted, kept, recorded, queue))
        self.forward_ct = forward0 + m
        self.decode_steps += passes - 1
        self.ratio.on_decode_steps(m)

    def _jump_steps(
        self,
        plan: _Plan,
        segments: list,
        sims_of: list[list],
        m: int,
        passes: int,
        first: int,
        forward0: int,
        opens: list[int],
        frees: list[tuple[int, int]],
        recorded: list[JumpSegment],
        prev: list | None,
    ) -> tuple[tuple[int, int] | None, tuple | None]:
        """Passes ``first .. passes-1``: steps ``first .. m-1`` and the releases of the finishes
        each pass processes after launching its step (pass ``m``, if the jump stands for it,
        launches nothing). Extends ``opens`` / ``frees`` and ``recorded``
        (records ``first - 1 .. m-2``, ``prev`` the batch of step ``first - 1``; None: the
        decode step in flight, whose ``#full`` / ``#swa token`` is returned first). Returns
        also, when steps ``1 .. m-1`` were replayed in bulk, their page opens and window frees
        counted from step 1 (the records' own steps: record ``j`` reads launch ``j + 1``)."""
        batch, R = plan.batch, plan.R
        p = self.page_size
        seqs = [r.kv_allocated_len for r in batch]
        ran = [max(0, min(x, m) - first) for x in plan.n]
        bulk = self._replay_jump(batch, seqs, ran, m - first, forward0 + first)
        before = len(opens)  # the pages opened before step ``first``
        freed_by = None  # bulk: window frees at steps first .. u-1, by u
        if bulk is not None:
            opens.extend([x + first for x in bulk[2]] if first else bulk[2])
            if bulk[3]:
                later = [(x + first, pages) for x, pages in bulk[3]] if first else bulk[3]
                frees.extend(later)
                freed_by = _cumulative(later)
        releases: dict[int, list] = {}  # pass x releases after launching step x: seen from x + 1
        for r, x in zip(batch, R, strict=True):
            if first <= x < passes:
                releases.setdefault(x + 1, []).append(r)
        cuts = sorted(releases)
        offset_full = offset_swa = 0
        stretches = []  # (u, v, sims, #full / #swa token at step u's launch less its pages, releases)
        for (a, b, members), sims in zip(segments, sims_of, strict=False):
            if b <= first:
                continue
            u, b = max(a, first), min(b, m)
            for v in [*cuts[bisect.bisect_right(cuts, u) : bisect.bisect_left(cuts, b)], b] if cuts else (b,):
                if bulk is None:  # a step may evict: SGLang's per-step sequence
                    reqs = [batch[i] for i in members]
                    full_base, swa_base, seg_opens, seg_frees = self._replay_quiet_steps(
                        reqs, [r.kv_allocated_len for r in reqs], v - u, forward0 + u
                    )
                    opens.extend(u + x for x in seg_opens)
                    frees.extend((u + x, pages) for x, pages in seg_frees)
                    for r in reqs:
                        r.kv_allocated_len += v - u
                        r.decode_batch_idx += v - u
                        r.num_outputs += v - u  # what the window policy reads at the next steps
                else:
                    opened = bisect.bisect_left(opens, u) - before
                    freed = 0 if freed_by is None else _freed_before(freed_by, u)
                    full_base = bulk[0] + offset_full + opened * p
                    swa_base = bulk[1] + offset_swa + (opened - freed) * p
                moved = self._release_processed(releases[v]) if v in releases else (0, 0)
                offset_full += moved[0]
                offset_swa += moved[1]
                stretches.append((u, v, sims, full_base, swa_base, moved))
                u = v
        if passes > m:  # pass m launches nothing: its record is step m - 1's, after its releases
            full_base, swa_base = self.cache.used_tokens()
            moved = self._release_processed(releases[m + 1]) if m + 1 in releases else (0, 0)
            stretches.append((m, m + 1, [], full_base, swa_base, moved))
        free_at: dict[int, int] = {}  # SWA pages freed at each launch
        for x, pages in frees:
            free_at[x] = free_at.get(x, 0) + pages
        events = (bulk[2], bulk[3]) if bulk is not None and first == 1 else None
        return _records(stretches, prev, opens, free_at, p, recorded), events

    def _release_processed(self, reqs: list[ServerReq]) -> tuple[int, int]:
        """One pass's finishes, released in batch order in one free group (the clients heard
        at the finish times); how much ``#full token`` / ``#swa token`` moved."""
        cache = self.cache
        before = cache.used_tokens()
        cache.free_group_begin()
        for r in reqs:
            self._complete(r, math.nan, notify=False)
        cache.free_group_end()
        after = cache.used_tokens()
        return after[0] - before[0], after[1] - before[1]

    def _overlap_jump_flags(self, plan: _Plan, passes: int) -> None:
        """``batch_is_full``, the left-request mark and the extra-slot count as passes
        ``0 .. passes-1`` leave them: the flag clears when a pass drops a request finishing by
        length (``update_running_batch``), after a pass that released one, and every pass of a
        hybrid model (``get_next_batch_to_run``); the mark says the last pass released one."""
        extra = 0  # EOS finishers' extra slots, in the step after the last token
        clear = left = False
        last = passes - 1
        for x, k in zip(plan.R, plan.n, strict=True):
            if x <= last:
                if x < last:  # released by a pass before the last
                    clear = True
                    extra += k > x
                else:
                    left = True
                if k == x:  # dropped from the batch (finishing by length)
                    clear = True
        self.overlap_extra_slots += extra
        if clear or (self.pools.hybrid and passes > 1):
            self.batch_is_full = False
        self._req_left = left


def _cumulative(frees: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
    """The steps of window frees, sorted, and the pages freed up to and including each."""
    steps, total = [], []
    acc = 0
    for x, pages in sorted(frees):
        acc += pages
        steps.append(x)
        total.append(acc)
    return steps, total


def _freed_before(freed_by: tuple[list[int], list[int]], u: int) -> int:
    """Pages the window frees of :func:`_cumulative` freed before step ``u``."""
    i = bisect.bisect_left(freed_by[0], u)
    return freed_by[1][i - 1] if i else 0


def _records(
    stretches: list, prev: list | None, opens: list[int], free_at: dict[int, int], p: int, out: list
) -> tuple[int, int] | None:
    """Rule 8 under overlap (``process_batch_result_decode`` -> ``report_decode_stats``,
    batch_result_processor.py): step ``j``'s record reads usage in pass ``j + 1``, after step
    ``j + 1``'s launch and that pass's releases. A stretch ``[u, v)`` of launches with one
    batch and base gives records ``u-1 .. v-2`` (the last one after pass ``v - 1``'s
    releases); record ``u - 1`` has the previous stretch's batch. With page events shifted one
    step back (record ``j`` counts the pages of launch ``j + 1``) the segments keep
    :class:`JumpSegment`'s rule. Appends to ``out``; returns the in-flight step's record when
    ``prev`` is None."""
    head = None
    for u, v, sims, full, swa, (rel_full, rel_swa) in stretches:
        last = v - 1 == u  # record u - 1 is the stretch's only one: it reads the releases
        if prev is None:  # record -1, the in-flight step: launch 0 plus pass 0's releases
            o = bisect.bisect_right(opens, 0) - bisect.bisect_left(opens, 0)
            f = free_at.get(0, 0)
            head = (full + p * o + (rel_full if last else 0), swa + p * (o - f) + (rel_swa if last else 0))
        elif prev is sims:
            out.append(JumpSegment(u - 1, v - 1, sims, full, swa, rel_full, rel_swa))
        else:
            out.append(
                JumpSegment(u - 1, u, prev, full, swa, rel_full if last else 0, rel_swa if last else 0)
            )
        if not last and (prev is None or prev is not sims):
            o = bisect.bisect_right(opens, u) - bisect.bisect_left(opens, u)
            f = free_at.get(u, 0)
            out.append(JumpSegment(u, v - 1, sims, full + p * o, swa + p * (o - f), rel_full, rel_swa))
        prev = sims
    return head
