"""The SGLang server model: scheduler, KV cache and cost model on a simpy clock.

The scheduling loop follows ``managers/scheduler.py`` (paths relative to
``python/sglang/srt/``): each iteration first tries to build a prefill batch
(``_get_new_batch_prefill_raw`` with ``simulator.engine.admission``); if there is none it runs
one decode step of the running batch (``update_running_batch``: ``check_decode_mem``,
retraction, then ``prepare_for_decode`` with decode-time SWA eviction). Results are processed
right after each forward, or one step late with overlap scheduling (``simulator.engine.overlap``).
Quiet decode steps are fast-forwarded arithmetically (``simulator.engine.fast_forward``).
Like SGLang's ``Scheduler``, the server is one class assembled from mixins, one per concern;
the cache is reached only through the controller protocol (``simulator.radix.protocol``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import simpy

from policies.eviction_order import EVICTION_ORDERS
from policies.swa_eviction import make_swa_eviction
from policies.tombstone import TOMBSTONING
from simulator.engine.admission import PrefillAdder, calc_priority, new_prefill_adder
from simulator.engine.config import SimConfig
from simulator.engine.failures import out_of_memory_reason, reject_reason
from simulator.engine.fast_forward import MAX_JUMP, FastForwardMixin
from simulator.engine.intake import IntakeMixin, client_sampling
from simulator.engine.observer import PoolCapacity, ServerObserver
from simulator.engine.overlap import OverlapMixin
from simulator.engine.recording import RecordingMixin, unrecorded_step
from simulator.engine.request import SimRequest
from simulator.engine.server_state import (
    LPM_FALLBACK_QUEUE_LEN,
    WAITING_PREFIX_REFRESH_INTERVAL,
    NewTokenRatio,
    ServerPools,
    ServerReq,
    StuckSimulation,
    init_req_max_new_tokens,
    server_req,
)
from simulator.engine.shortage import ShortageMixin
from simulator.engine.step_costs import StepCosts
from simulator.engine.waiting_queue import WaitingQueue
from simulator.errors import ConfigError
from simulator.radix.cache import OutOfMemory, build_controller

if TYPE_CHECKING:  # HiCache's modules load with a run that has it (start-up time, issue 14)
    from simulator.engine.hicache_steps import HiCacheSetup

__all__ = ["ServerModel", "ServerPools", "ServerReq", "StuckSimulation"]


class ServerCore:
    """The scheduler's own state and steps: :class:`ServerModel` less its mixins and its
    ``__init__``. The compiled build makes it a cdef class with typed attributes (server.pxd),
    so that the loop reaches its state without dictionary look-ups; the mixins reach the same
    attributes as Python attributes."""

    # ------------------------------------------------------------------ API
    def submit(self, sim: SimRequest) -> simpy.Event:
        """Queue ``sim`` now; the returned event succeeds with ``sim`` when it finishes/aborts."""
        if sim.output_len < 1 or sim.prompt_len < 1:
            raise ConfigError(f"request {sim.rid}: prompt and output must be non-empty")
        sim.arrival_s = self.env.now if math.isnan(sim.arrival_s) else sim.arrival_s
        req = server_req(sim)
        cfg, pools = self.cfg, self.pools
        # the client's value stays a Python int until init_req_max_new_tokens clips it: the
        # compiled ServerReq holds max_new_tokens in 64 bits, a client may send more
        req.ignore_eos, max_new, stated = client_sampling(sim, cfg.ignore_eos, self.max_new_mode)
        req.done = self.env.event()
        self.obs.on_arrival(sim)
        rejected = reject_reason(
            sim.prompt_len, max_new if stated else None, pools.context_length, pools.full_tokens
        )
        if rejected is not None and cfg.allow_auto_truncate:
            self._truncate(req, max_new if stated else None)  # cut to fit instead
            rejected = None
        if rejected is not None:
            self._reject(req, rejected)
            return req.done
        req.max_new_tokens = init_req_max_new_tokens(
            max_new, sim.prompt_len, pools.context_length, pools.full_tokens, pools.page_size
        )
        if req.max_new_tokens < req.output_len:  # finishes by length at the clipped value
            req.output_len = max(req.max_new_tokens, 1)
        elif stated and req.ignore_eos and req.max_new_tokens > req.output_len:
            self._run_past_eos(req)
        self.waiting.append(req)
        if self.hicache is not None:  # _add_request_to_queue: _prefetch_kvcache
            self.hicache.on_enqueue(req)
        if self._wakeup is not None and not self._wakeup.triggered:
            self._wakeup.succeed()
        if self.env.now < self._interrupt_before:
            self._interrupt_before = -math.inf
            self.process.interrupt("arrival")
        return req.done

    def expect_arrival(self, t: float) -> None:
        """The client's next submission will be at ``t`` (an open loop knows its send times).

        A decode jump then plans to stop at the step in flight at ``t`` instead of being
        interrupted by the arrival; the outcome is the same, without the interrupt's events.
        """
        self._next_arrival = t

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running and self.chunked is None

    def counters(self) -> dict:
        cache = self.cache
        return dict(
            **cache.tree_counters(),
            evictions=cache.eviction_counts(),
            swa_tokens_freed_by_decode_eviction=self.swa_freed_by_decode,
            retractions=self.retractions,
            aborts=self.aborts,
            overlap_extra_decode_slots=self.overlap_extra_slots,
            forward_steps=self.forward_ct,
            decode_steps=self.decode_steps,
            tree=cache.tree_stats(),
        )

    def _check(self) -> None:
        if self.cfg.check_invariants:
            live = [r for r in self.running if r.holds_kv]
            if self.chunked is not None and self.chunked.holds_kv:
                live.append(self.chunked)
            self.cache.check_invariants(live)

    # ------------------------------------------------------------------ main loop
    def _loop(self):
        if self.overlap:
            yield from self._loop_overlap()
            return
        env = self.env
        while True:
            if self.on_pass is not None:
                self.on_pass()
            if self.hicache is not None:  # _process_hicache_events: check_hicache_events
                self.hicache.step_start(env.now)
            if not self.waiting and not self.running and self.chunked is None:  # idle
                self._on_idle()
                self._wakeup = env.event()
                yield self._wakeup
                self._wakeup = None
                continue
            batch = self._get_new_batch_prefill()
            if batch:
                if self._is_chunk_train(batch):
                    yield from self._run_chunk_train(batch[0])
                    continue
                step = self._start_prefill(batch)
                if step is None:
                    continue
                if not self._clock_skips(step[1]):
                    yield env.timeout(step[1])
                self._end_prefill(batch, step)
            elif self.running:
                k = self._decode_span()
                if k > 1:
                    yield from self._fast_forward(k)
                    self._end_jump()
                    continue
                decode = self._start_decode()
                if decode is None:
                    continue
                if not self._clock_skips(decode[1]):
                    yield env.timeout(decode[1])
                self._end_decode(decode[0])
            elif self.hicache is not None and self.hicache.next_completion() < math.inf:
                # SGLang's loop polls check_hicache_events: an ack unlocks room
                yield from self._await_transfer()
            else:
                # nothing runs and the head of the queue can never be admitted
                self._abort_unservable()

    def _clock_skips(self, dur: float) -> bool:
        """Move the clock ``dur`` ahead at once, without a simpy event, when no event is due by
        then; False (nothing done) otherwise, and the caller yields ``env.timeout(dur)``.

        A timeout that is the earliest event in the queue, strictly, is the next event simpy
        processes, and nothing runs before it: the process would resume at the same time
        (``now + dur``, the float ``Environment.schedule`` computes), with every later event in
        the same order (an event's sequence number only breaks ties of time and priority, and
        skipping one leaves the others' order as it was). Only a plain ``simpy.Environment``
        (a real-time one paces its steps by the wall clock).
        """
        if not self._plain_env:
            return False
        env = self.env
        t = env._now + dur
        queue = env._queue
        if queue and queue[0][0] <= t:
            return False
        env._now = t
        return True

    # ------------------------------------------------------------------ completion
    def _complete(
        self,
        r: ServerReq,
        t: float,
        reason: str | None = None,
        owned: int | None = None,
        notify: bool = True,
        release: bool = True,
    ) -> None:
        """Every finish and abort passes here: the request's final fields, its cache release
        (``release_kv_cache``: with insert when it finished, without when ``reason`` aborts it),
        the observer's record and the client's event.

        A decode jump splits it in two: the client hears of the finish at its exact time
        (``release=False``), the cache release is replayed after the clock moved
        (``notify=False``). ``owned`` is ``kv_committed_len`` (overlap's extra slot).
        """
        sim = r.sim
        self._req_left = True
        if notify:
            self.completed += 1
            sim.finish_s = t
            sim.cached_tokens = r.cached_tokens
            sim.retractions = r.retractions
            if reason is not None:
                sim.aborted = True
                sim.abort_reason = reason
        if release:
            if reason is None:
                self.cache.release(r, owned)
            else:
                self.cache.release_without_insert(r)
                self.aborts += 1
            self.obs.on_finish(sim)
        if notify:
            r.done.succeed(sim)

    def _abort(self, req: ServerReq, detail: str) -> None:
        """Out of memory even after eviction (and retraction): the request is aborted."""
        self._complete(req, self.env.now, out_of_memory_reason(detail))

    # ------------------------------------------------------------------ admission
    def _get_new_batch_prefill(self) -> list[ServerReq]:
        """``Scheduler.get_next_batch_to_run`` up to ``_get_new_batch_prefill_raw``: stash the
        chunk, the ``batch_is_full`` resets and early returns, ``calc_priority``, then the
        chunked request's next chunk and the waiting queue through one ``PrefillAdder``."""
        chunked = self.chunked
        if chunked is not None and not self.overlap and chunked.extend_end > chunked.prefix_len:
            self._stash_chunked(chunked)
        # batch_is_full: hybrid SWA clears it every pass; an empty batch or a request that left
        # clears it too; a full-attention model otherwise keeps it (scheduler.py 3949-4096)
        if self._req_left or self.pools.hybrid or not self.running:
            self.batch_is_full = False
        self._req_left = False
        if (self.batch_is_full or not self.waiting) and chunked is None:
            return []
        max_running = self.pools.max_running_requests
        rows = max_running - len(self.running)  # get_num_allocatable_reqs
        if rows <= 0 and chunked is None:
            self.batch_is_full = True
            return []
        self._calc_priority()
        adder = self._new_adder(max_running)
        self.last_adder = adder
        if chunked is not None:
            self.chunked = adder.add_chunked_req(chunked)
            if not adder.batch.reqs:
                rows -= 1  # the parked chunk keeps its request row
        batch = adder.add_waiting(self.waiting, rows)
        if batch.batch_is_full:
            self.batch_is_full = True
        if batch.admitted:
            self.waiting.remove_admitted(batch.admitted)
        if batch.chunked is not None:
            self.chunked = batch.chunked
        return batch.reqs

    def _new_adder(self, max_running: int) -> PrefillAdder:
        """This round's ``PrefillAdder`` (HiCache's when it runs)."""
        cfg, pools, hicache = self.cfg, self.pools, self.hicache
        if hicache is None:
            return new_prefill_adder(
                self.cache,
                max_running,
                pools.chunked_prefill_size,
                cfg.max_prefill_tokens,
                self.running,
                self.ratio.current,
            )
        from simulator.engine.hicache_admission import HiCachePrefillAdder

        return HiCachePrefillAdder(
            self.cache,
            steps=hicache,
            max_running=max_running,
            chunked_prefill_size=pools.chunked_prefill_size,
            max_prefill_tokens=cfg.max_prefill_tokens,
            running=self.running,
            new_token_ratio=self.ratio.current,
        )

    def _stash_chunked(self, req: ServerReq) -> None:
        """``Scheduler.stash_chunked_request``: the last chunk's KV enters the tree when the
        next batch is scheduled, not when its result is processed."""
        self.cache.free_group_begin()
        self.cache.checkpoint(req, req.extend_end, finished=False)
        req.prefix_len = req.extend_end
        self.cache.free_group_end()

    def _calc_priority(self) -> None:
        """``SchedulePolicy.calc_priority`` on the waiting queue, then the waiting-prefix
        refresh (``SchedulePolicy._touch_waiting_prefixes``, schedule_policy.py): under a
        cache-agnostic policy (FCFS, or LPM above 128 waiting) with LRU eviction, the first
        qualifying pass and every 32nd after it bump the LRU recency of the cached prefixes of
        the first 128 waiting requests, head last, so that eviction spares them."""
        waiting = self.waiting
        cfg = self.cfg
        self.lpm_deprioritized = calc_priority(waiting, cfg.schedule_policy, self.cache)
        if (
            not waiting
            or cfg.waiting_prefix_refresh != "on"
            or cfg.radix_eviction_policy != "lru"
            or (cfg.schedule_policy == "lpm" and len(waiting) <= LPM_FALLBACK_QUEUE_LEN)
        ):
            return
        calls = self.refresh_calls
        self.refresh_calls = calls + 1
        if calls % WAITING_PREFIX_REFRESH_INTERVAL:
            return
        cache, p = self.cache, self.page_size
        for r in reversed(waiting[:LPM_FALLBACK_QUEUE_LEN]):  # touch_waiting_prefix
            cache.touch_prefix(r.pages[: (r.prompt_len + r.num_outputs) // p])

    # ------------------------------------------------------------------ prefill
    def _prepare_extend(self, batch: list[ServerReq]) -> int | None:
        """``alloc_for_extend`` for a prefill batch; the cached tokens it newly serves, or None
        when allocation failed and the batch was aborted. Both loops share it."""
        cached_before = 0
        for r in batch:
            if not r.holds_kv and not r.retracted_stain:
                cached_before += r.prefix_len
        try:
            self.cache.alloc_for_extend(batch)
        except OutOfMemory as exc:
            for r in batch:
                if r is self.chunked:
                    self.chunked = None
                self._abort(r, str(exc))
            return None
        self.forward_ct += 1
        return cached_before

    def _is_chunk_train(self, batch: list[ServerReq]) -> bool:
        """Whether the batch is a truncated chunk alone, run as a train of chunks in one jump
        (:meth:`~simulator.engine.fast_forward.FastForwardMixin._run_chunk_train`)."""
        return self.cfg.fast_forward and len(batch) == 1 and batch[0] is self.chunked and self.hicache is None

    def _start_prefill(self, batch: list[ServerReq]) -> tuple | None:
        """A prefill step's work before its forward: ``(t0, duration, extend tokens, cached
        before)``, or None when allocation failed and the batch was aborted."""
        hicache = self.hicache
        t0 = self.env.now
        if self.ops is not None:
            self._begin_prefill_step(batch, t0)
        load_s = 0.0 if hicache is None else hicache.submit_loads(t0)  # ready_to_load_host_cache
        cached_before = self._prepare_extend(batch)
        if cached_before is None:
            return None
        ext = [r.extend_end - r.prefix_len for r in batch]
        dur = self.costs.prefill_time(ext, [r.prefix_len for r in batch])
        if hicache is not None:
            dur = hicache.prefill_time(load_s, dur)
        return t0, dur, sum(ext), cached_before

    def _end_prefill(self, batch: list[ServerReq], step: tuple) -> None:
        """A prefill step's results, at its end (``process_batch_result_prefill``)."""
        t0, _, extend_tokens, cached_before = step
        t1 = self.env.now
        running, queue = len(self.running), len(self.waiting)
        self._prefill_joins(batch)
        cache = self.cache
        cache.free_group_begin()
        for r in batch:
            if r is self.chunked:  # checkpointed when the next batch is scheduled
                continue
            r.num_outputs += 1
            sim = r.sim
            first = sim.first_token_s
            if first != first:  # NaN (math.isnan without a call): the request's first token
                sim.first_token_s = t1
                self.obs.on_first_token(sim)
            if r.num_outputs >= r.output_len:
                self._complete(r, t1)
            else:
                cache.checkpoint(r, r.extend_end, finished=False)
                r.prefix_len = r.extend_end
                self.running.append(r)
        cache.free_group_end()
        # usage as the prefill log reads it: after the results are processed
        # (batch_result_processor.py: process_batch_result_prefill -> report_prefill_stats)
        full_used, swa_used = cache.used_tokens()
        self.obs.on_prefill_batch(
            t0, t1, [r.sim for r in batch], extend_tokens, cached_before, full_used, swa_used, running, queue
        )
        if self.hicache is not None:
            self.hicache.step_end(t1)  # flush_pending_backups
        self._check()

    def _prefill_joins(self, batch: list[ServerReq]) -> None:
        """``get_next_batch_to_run`` merging a prefill batch: the chunk leaves it, and into an
        empty running batch the prefill batch itself becomes the running batch; either way the
        next pass starts with ``batch_is_full`` cleared."""
        if not self.running or self.chunked in batch:
            self._req_left = True

    # ------------------------------------------------------------------ decode
    def _prepare_decode(self) -> list[ServerReq] | None:
        """One decode step's memory work before the forward; the batch, or None if none is left.

        ``Scheduler.update_running_batch`` (``check_decode_mem``, retract on shortage), then
        ``ScheduleBatch.maybe_evict_swa`` and ``alloc_for_decode``; both loops share it.
        """
        batch = self.running
        if not self.cache.check_decode_mem(batch):
            self._retract()
            batch = self.running
            if not batch:
                return None
        else:
            self.ratio.on_decode_steps(1)  # decay_step: only in the branch without retraction
        ctx = self.cache.decode_context(self.forward_ct)
        self.cache.free_group_begin()
        for r in batch:  # ScheduleBatch.maybe_evict_swa
            self.swa_freed_by_decode += self.swa_policy.on_decode(r, ctx)
        self.cache.free_group_end()
        try:
            self.cache.alloc_for_decode(batch)
        except OutOfMemory as exc:
            victim = batch[-1]
            self.running.remove(victim)
            self._abort(victim, str(exc))
            return None
        self.forward_ct += 1
        return batch

    def _decode_span(self) -> int:
        """Decode steps the next jump takes (1: one step on its own); sets the HiCache jump
        deadline for a jump."""
        k = min(self._quiet_steps(), MAX_JUMP)
        hicache = self.hicache
        if hicache is not None and k > 1:
            k = hicache.bound_jump(k, self.running)
            self._jump_deadline = hicache.jump_deadline()
        return k

    def _end_jump(self) -> None:
        """After a decode jump: HiCache's deadline cleared and its backups flushed."""
        if self.hicache is not None:
            self._jump_deadline = math.inf
            self.hicache.step_end(self.env.now)

    def _start_decode(self) -> tuple | None:
        """One decode step's work before its forward: ``(batch, duration)``, or None when no
        batch is left."""
        if self.ops is not None:
            self._begin_step(self.env.now)
        batch = self._prepare_decode()
        if batch is None:
            return None
        full_ctx = 0
        swa_ctx = 0
        window = self.window
        for r in batch:  # the batch's context tokens: full, and within the window
            n = r.kv_allocated_len
            full_ctx += n
            swa_ctx += n if n < window else window
        dur = self.cost.decode_time(len(batch), full_ctx, swa_ctx)
        self._step.duration_s = dur  # the announced step's (a scratch entry when not recording)
        return batch, dur

    def _end_decode(self, batch: list[ServerReq]) -> None:
        """One decode step's results, at its end (``process_batch_result_decode``)."""
        self.decode_steps += 1
        cache = self.cache
        cache.free_group_begin()
        still = []
        now = self.env.now
        for r in batch:
            r.num_outputs += 1
            if r.num_outputs >= r.output_len:
                self._complete(r, now)
            else:
                still.append(r)
        cache.free_group_end()
        self.running = still
        # usage after the results are processed, finished requests released
        # (batch_result_processor.py: process_batch_result_decode -> report_decode_stats)
        full, swa = cache.used_tokens()
        self.obs.on_decode_steps(
            np.array([now]), [r.sim for r in batch], np.array([full]), np.array([swa]), len(self.waiting)
        )
        if self.hicache is not None:
            self.hicache.step_end(now)  # flush_pending_backups
        self._check()


class ServerModel(ServerCore, FastForwardMixin, OverlapMixin, RecordingMixin, IntakeMixin, ShortageMixin):
    """One SGLang server (one DP rank) serving submitted requests on ``env``'s clock.

    ``record_ops``: record every memory operation with page ids (``self.ops``, the
    :class:`~simulator.memory_ops.MemoryOpExecutor`; docs/op-log.md). Off, ``self.ops`` is None.
    """

    def __init__(
        self,
        env: simpy.Environment,
        cfg: SimConfig,
        pools: ServerPools,
        cost_model,
        observer: ServerObserver | None = None,
        record_ops: bool = False,
        hicache: HiCacheSetup | None = None,
    ) -> None:
        self.env, self.cfg, self.pools, self.cost = env, cfg, pools, cost_model
        self.costs = StepCosts(cost_model)
        self.obs = observer or ServerObserver()
        self.overlap = not cfg.disable_overlap_schedule
        self.max_new_mode = cfg.max_new_tokens_mode()
        if cfg.waiting_prefix_refresh not in ("on", "off"):
            raise ConfigError(
                f"--waiting-prefix-refresh must be on or off, got {cfg.waiting_prefix_refresh!r}"
            )
        if cfg.schedule_policy not in ("fcfs", "lpm"):
            raise ConfigError(f"--schedule-policy {cfg.schedule_policy!r}: kvplan models fcfs and lpm")
        self.page_size, self.window = pools.page_size, pools.window
        order = EVICTION_ORDERS.create(cfg.radix_eviction_policy)
        # HiCache's step hooks and controller (simulator.engine.hicache_steps), or None
        self.hicache = None
        if hicache is not None:
            from simulator.engine.hicache_steps import HiCacheSteps

            self.hicache = HiCacheSteps.build(hicache, pools, order)
        tombstone = TOMBSTONING.create(cfg.tombstone)
        sizes = (pools.full_tokens, pools.swa_tokens, pools.page_size, pools.window)
        self.cache = (
            build_controller(tombstone, *sizes, order, pools.hybrid)
            if self.hicache is None
            else self.hicache.cache
        )
        self._plain_env = type(env) is simpy.Environment  # _clock_skips may move its clock
        self._jump_deadline = math.inf  # HiCache: a decode jump ends before the next transfer ack
        # before the first allocation (the legacy tree refuses: ConfigError)
        self.ops = self.cache.start_recording(need_sort=False) if record_ops else None
        self._step = unrecorded_step()
        self.swa_policy = make_swa_eviction(cfg.swa_eviction, interval=cfg.swa_eviction_interval)
        self.ratio = NewTokenRatio(cfg.schedule_conservativeness)
        self.waiting = WaitingQueue()  # admission pops its head (simulator.engine.waiting_queue)
        self.running: list[ServerReq] = []
        self.chunked: ServerReq | None = None
        self.forward_ct = 0
        self.decode_steps = 0
        self.swa_freed_by_decode = 0
        self.retractions = 0
        self.aborts = 0
        self.completed = 0  # requests finished, aborted or rejected (simulate's stuck check)
        self.overlap_extra_slots = 0  # decode slots spent on requests already finished (overlap)
        self._wakeup: simpy.Event | None = None
        # inside a decode jump: an arrival before this time cuts the jump short (-inf: none)
        self._interrupt_before = -math.inf
        self._next_arrival = math.inf  # the client's announced next submission (open loop)
        # the step clock (simulator.engine.step_replay): called at the top of every loop pass,
        # where SGLang calls ingest_requests
        self.on_pass = None
        self.batch_is_full = False  # running_batch.batch_is_full
        self.last_adder: PrefillAdder | None = None
        self.lpm_deprioritized: list[ServerReq] | None = None  # the last calc_priority's
        self.refresh_calls = 0  # SchedulePolicy._waiting_prefix_refresh_calls
        self._req_left = False  # a request left the running batch since the last pass
        self.in_flight = None  # overlap: the launched batch whose results are not processed yet
        self._fresh_key = -1  # page keys of truncated requests' own pages (trace keys are >= 0)
        self.obs.on_start(
            PoolCapacity(*self.cache.capacity()),
            dict(
                page_size=pools.page_size,
                full_tokens=pools.full_tokens,
                swa_tokens=pools.swa_tokens,
                window=pools.window,
                max_running_requests=pools.max_running_requests,
                chunked_prefill_size=pools.chunked_prefill_size,
                hybrid=pools.hybrid,
            ),
        )
        self.process = env.process(self._loop())
