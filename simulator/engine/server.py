"""The SGLang server model: scheduler, KV cache and cost model on a simpy clock.

The scheduling loop follows ``managers/scheduler.py`` (paths relative to
``python/sglang/srt/``): each iteration first tries to build a prefill batch
(``_get_new_batch_prefill_raw`` with ``schedule_policy.PrefillAdder`` and
``mem_cache/prefill_budget.SWAPrefillBudget``); if there is none it runs one decode step of the
running batch (``update_running_batch``: ``check_decode_mem``, retraction, then
``prepare_for_decode`` with decode-time SWA eviction). Results are processed right after each
forward, or one step late with overlap scheduling (``event_loop_overlap``, an option). Quiet
decode steps are fast-forwarded arithmetically (without overlap).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

import numpy as np
import simpy

from policies.eviction_order import EVICTION_ORDERS
from policies.swa_eviction import DecodeContext, make_swa_eviction
from policies.tombstone import TOMBSTONING
from simulator.cost_model import DecodeClock
from simulator.engine.config import SimConfig
from simulator.engine.decode_jump import DecodeJump, JumpSegment
from simulator.engine.observer import PoolCapacity, ServerObserver
from simulator.engine.request import SimRequest
from simulator.errors import ConfigError, KvplanError
from simulator.invariants import check_invariants
from simulator.kv_allocator import SWAKVAllocator
from simulator.radix.cache import OutOfMemory, make_cache
from simulator.request_kv import ReqKV

CLIP_MAX_NEW_TOKENS = 4096  # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION
LPM_FALLBACK_QUEUE_LEN = 128  # schedule_policy: LPM -> FCFS above this many waiting requests
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14
NEW_TOKEN_RATIO_DECAY_STEPS = 600
MAX_JUMP = 1024  # decode steps per fast-forward jump (an arrival usually ends one earlier)
PREFILL_MEMO_SIZE = 1 << 16  # one-request prefill prices kept (cleared when full)


@dataclass(eq=False)
class _Launched:
    """A batch on the GPU whose results the scheduler has not processed yet (overlap mode)."""

    kind: str
    reqs: list
    gens: list
    start: float
    end: float
    info: tuple


class _DeferredFrees:
    """Stands in for the allocator while a policy's frees are collected for a jump."""

    def free_swa_pages(self, n: int) -> None:
        pass


_DEFERRED_FREES = _DeferredFrees()


class _UrgentTimeout(simpy.events.Timeout):
    """A timeout that fires before ordinary events of the same instant (simpy's URGENT)."""

    def __init__(self, env: simpy.Environment, delay: float) -> None:
        # simpy.events.Timeout.__init__ with URGENT instead of NORMAL priority
        self.env = env
        self.callbacks = []
        self._value = None
        self._delay = delay
        self._ok = True
        env.schedule(self, simpy.events.URGENT, delay)


class _FinishChain:
    """Tells clients of the finishes inside one decode jump, at their exact times.

    One pending event at a time, for the next finishing step, instead of one per finishing
    request: an arrival usually cuts a jump short, and the next jump would otherwise schedule
    the same finishes again. The events are URGENT so that, as when each step ran on its own,
    a finish at the jump's last step reaches its client before the server resumes.
    """

    __slots__ = ("server", "batch", "finishing", "clock", "pos", "limit")

    def __init__(
        self, server: ServerModel, batch: list, finishing: list[tuple[int, int]], clock: DecodeClock
    ) -> None:
        self.server, self.batch, self.finishing, self.clock = server, batch, finishing, clock
        self.pos = 0
        self.limit = clock.steps  # steps at or past it are not reached (the jump was cut short)
        self._schedule(server.env.now)

    def _schedule(self, now: float) -> None:
        step = self.finishing[self.pos][0]
        _UrgentTimeout(self.server.env, self.clock.end(step) - now).callbacks.append(self._fire)

    def _fire(self, _event) -> None:
        step = self.finishing[self.pos][0]
        if step >= self.limit:
            return
        t = self.clock.end(step)
        finishing = self.finishing
        while self.pos < len(finishing) and finishing[self.pos][0] == step:
            self.server._notify_finish(self.batch[finishing[self.pos][1]], t)
            self.pos += 1
        if self.pos < len(finishing) and finishing[self.pos][0] < self.limit:
            self._schedule(t)


class StuckSimulation(KvplanError):
    """The server stopped making progress; the message says what it was waiting for."""


@dataclass(eq=False)
class ServerReq(ReqKV):
    """A request inside the server: the cache's ``ReqKV`` plus scheduler state."""

    sim: SimRequest | None = None
    done: simpy.Event | None = None
    ignore_eos: bool = True
    max_new_tokens: int = 0  # sampling_params.max_new_tokens (>= output_len)
    retractions: int = 0
    gen: int = 0  # bumped at each retraction: in-flight results of an older generation are void
    stashed: object = None  # overlap mode: the launched batch whose chunk was last checkpointed


@dataclass(frozen=True)
class ServerPools:
    """Resolved pool geometry (from ``simulator.pool_sizing``) the server runs with."""

    page_size: int
    full_tokens: int
    swa_tokens: int
    window: int
    max_running_requests: int
    chunked_prefill_size: int
    hybrid: bool = True


@dataclass
class NewTokenRatio:
    """``scheduler_components/new_token_ratio_tracker.py``: admission headroom for decodes."""

    conservativeness: float = 1.0
    current: float = field(init=False)
    minimum: float = field(init=False)
    decay: float = field(init=False)

    def __post_init__(self) -> None:
        init = min(INIT_NEW_TOKEN_RATIO * self.conservativeness, 1.0)
        self.current = init
        self.minimum = init * MIN_NEW_TOKEN_RATIO_FACTOR
        self.decay = (init - self.minimum) / NEW_TOKEN_RATIO_DECAY_STEPS

    def on_decode_steps(self, steps: int) -> None:
        self.current = max(self.current - self.decay * steps, self.minimum)


class ServerModel:
    """One SGLang server (one DP rank) serving submitted requests on ``env``'s clock."""

    def __init__(
        self,
        env: simpy.Environment,
        cfg: SimConfig,
        pools: ServerPools,
        cost_model,
        observer: ServerObserver | None = None,
    ) -> None:
        self.env = env
        self.cfg = cfg
        self.pools = pools
        self.cost = cost_model
        self.obs = observer or ServerObserver()
        self.overlap = not cfg.disable_overlap_schedule
        if cfg.schedule_policy not in ("fcfs", "lpm"):
            raise ConfigError(f"--schedule-policy {cfg.schedule_policy!r}: kvplan models fcfs and lpm")
        self.page_size = pools.page_size
        self.window = pools.window
        self.allocator = SWAKVAllocator(pools.full_tokens, pools.swa_tokens, pools.page_size)
        tomb = TOMBSTONING.create(cfg.tombstone)
        self.cache = make_cache(
            tomb, self.allocator, pools.window, EVICTION_ORDERS.create(cfg.radix_eviction_policy)
        )
        self.swa_policy = make_swa_eviction(cfg.swa_eviction, interval=cfg.swa_eviction_interval)
        self.ratio = NewTokenRatio(cfg.schedule_conservativeness)
        self.waiting: list[ServerReq] = []
        self.running: list[ServerReq] = []
        self.chunked: ServerReq | None = None
        self.forward_ct = 0
        self.decode_steps = 0
        self.swa_freed_by_decode = 0
        self.retractions = 0
        self.aborts = 0
        self.overlap_extra_slots = 0  # decode slots spent on requests already finished (overlap)
        self._wakeup: simpy.Event | None = None
        # inside a decode jump: an arrival before this time cuts the jump short (-inf: none)
        self._interrupt_before = -math.inf
        self._next_arrival = math.inf  # the client's announced next submission (open loop)
        self._terms_cache: dict[int, tuple] = {}
        self._prefill_memo: dict[tuple[int, int], float] = {}
        self.obs.on_start(
            PoolCapacity(self.allocator.full_capacity, self.allocator.swa_capacity),
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

    # ------------------------------------------------------------------ API
    def submit(self, sim: SimRequest) -> simpy.Event:
        """Queue ``sim`` now; the returned event succeeds with ``sim`` when it finishes/aborts."""
        if sim.output_len < 1 or sim.prompt_len < 1:
            raise ConfigError(f"request {sim.rid}: prompt and output must be non-empty")
        sim.arrival_s = self.env.now if math.isnan(sim.arrival_s) else sim.arrival_s
        req = ServerReq(
            rid=sim.rid, pages=sim.pages, prompt_len=sim.prompt_len, output_len=sim.output_len, sim=sim
        )
        cfg = self.cfg
        req.ignore_eos = sim.ignore_eos if cfg.ignore_eos is None else cfg.ignore_eos
        max_new = sim.max_new_tokens or sim.output_len
        if cfg.max_new_tokens is not None:
            max_new = max(max_new, cfg.max_new_tokens)
        req.max_new_tokens = max_new
        req.done = self.env.event()
        self.waiting.append(req)
        self.obs.on_arrival(sim)
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
        tree = self.cache.tree
        return dict(
            **{f"tree_{k}": v for k, v in vars(tree.counters).items()},
            evictions=dict(vars(self.cache.evictions)),
            swa_tokens_freed_by_decode_eviction=self.swa_freed_by_decode,
            retractions=self.retractions,
            aborts=self.aborts,
            overlap_extra_decode_slots=self.overlap_extra_slots,
            forward_steps=self.forward_ct,
            decode_steps=self.decode_steps,
            tree=tree.stats(),
        )

    # ------------------------------------------------------------------ usage
    def _used(self) -> tuple[int, int]:
        """``#full token`` / ``#swa token`` as SGLang's logs define them."""
        a, t = self.allocator, self.cache.tree
        full = a.full_capacity - (a.full_available_size() + t.full_evictable)
        swa = a.swa_capacity - (a.swa_available_size() + t.swa_evictable)
        return full, swa

    def _check(self) -> None:
        if self.cfg.check_invariants:
            live = [r for r in self.running if r.holds_kv]
            if self.chunked is not None and self.chunked.holds_kv:
                live.append(self.chunked)
            check_invariants(self.cache, live)

    # ------------------------------------------------------------------ main loop
    def _loop(self):
        if self.overlap:
            yield from self._loop_overlap()
            return
        while True:
            if self.idle:
                self._wakeup = self.env.event()
                yield self._wakeup
                self._wakeup = None
                continue
            batch = self._get_new_batch_prefill()
            if batch:
                yield from self._run_prefill(batch)
            elif self.running:
                yield from self._run_decode()
            else:
                # nothing runs and the head of the queue can never be admitted
                self._abort_unservable()

    def _abort(self, req: ServerReq, reason: str) -> None:
        self.cache.release_without_insert(req)
        self.aborts += 1
        sim = req.sim
        sim.aborted = True
        sim.abort_reason = reason
        sim.finish_s = self.env.now
        sim.cached_tokens = req.cached_tokens
        self.obs.on_finish(sim)
        req.done.succeed(sim)

    def _abort_unservable(self) -> None:
        if self.chunked is not None:
            req, self.chunked = self.chunked, None
        else:
            req = self.waiting.pop(0)
        self._abort(
            req,
            f"request needs {req.fill_len - req.prefix_len} new tokens but the pools hold "
            f"{self.allocator.full_capacity} FULL / {self.allocator.swa_capacity} SWA tokens",
        )

    # ------------------------------------------------------------------ admission
    def _order_waiting(self) -> None:
        """``SchedulePolicy.calc_priority``: FCFS keeps arrival order; LPM sorts by match."""
        if self.cfg.schedule_policy == "lpm" and len(self.waiting) <= LPM_FALLBACK_QUEUE_LEN:
            for r in self.waiting:
                self.cache.match(r)
            self.waiting.sort(key=lambda r: -r.prefix_len)

    def _running_offset(self) -> float:
        # PrefillAdder._get_running_request_total_token_offset
        total = 0.0
        for r in self.running:
            ratio = 1.0 if r.ignore_eos else self.ratio.current
            total += min(r.max_new_tokens - r.num_outputs, CLIP_MAX_NEW_TOKENS) * ratio
        return total

    def _swa_tokens(self, extend: int, max_new: int, chunk_limit: int | None) -> int:
        # prefill_budget.estimate_swa_kv_tokens
        w, p = self.window, self.page_size
        allocated = extend if chunk_limit is None else min(extend, chunk_limit)
        return max(allocated - w, 0) + min(extend + max_new, w) + p

    def _chunk_continuation(self) -> tuple[int, bool]:
        """(tokens, truncated) of the chunked request's next chunk (``add_chunked_req``)."""
        req = self.chunked
        a, tree, p = self.allocator, self.cache.tree, self.page_size
        cps = self.pools.chunked_prefill_size
        avail = cps if cps > 0 else 1 << 60
        remaining_total = a.full_available_size() + tree.full_evictable - self._running_offset()
        remaining_swa = a.swa_available_size() + tree.swa_evictable
        avail = min(avail, int(remaining_total), int(remaining_swa) - p)
        if avail <= 0:
            return 0, True
        cand = req.fill_len - req.prefix_len
        return min(cand, avail), cand > avail

    def _get_new_batch_prefill(self) -> list[ServerReq]:
        """``Scheduler._get_new_batch_prefill_raw`` with ``PrefillAdder`` + ``SWAPrefillBudget``."""
        if not self.waiting and self.chunked is None:
            return []
        max_running = self.pools.max_running_requests
        if len(self.running) >= max_running and self.chunked is None:
            return []
        p = self.page_size
        a, tree = self.allocator, self.cache.tree
        cps = self.pools.chunked_prefill_size
        rem_chunk = cps if cps > 0 else None
        rem_input = self.cfg.max_prefill_tokens
        total_offset = self._running_offset()
        current_offset = 0.0
        swa_offset = 0
        can_run: list[ServerReq] = []

        def remaining_total() -> float:
            return a.full_available_size() + tree.full_evictable - total_offset

        def remaining_current() -> float:
            return a.full_available_size() + tree.full_evictable - current_offset

        def remaining_swa() -> int:
            return a.swa_available_size() + tree.swa_evictable - swa_offset

        def reserve(extend: int, max_new: int) -> None:
            nonlocal total_offset, current_offset, swa_offset, rem_input, rem_chunk
            ext = -(-extend // p) * p
            total_offset += ext + p + max_new
            current_offset += ext + p
            swa_offset += self._swa_tokens(ext, max_new, rem_chunk)
            rem_input -= ext
            if rem_chunk is not None:
                rem_chunk -= ext

        if self.chunked is not None:  # PrefillAdder.add_chunked_req
            req = self.chunked
            new_len, truncated = self._chunk_continuation()
            if new_len > 0:
                req.extend_end = req.prefix_len + new_len
                can_run.append(req)
                reserve(new_len, 0 if truncated else min(req.max_new_tokens, CLIP_MAX_NEW_TOKENS))
                self.chunked = req if truncated else None
            if self.chunked is not None:
                return can_run

        self._order_waiting()
        admitted_from_queue: list[ServerReq] = []
        for req in list(self.waiting):
            # budget_state
            if not (remaining_total() > 0 and remaining_current() > 0 and remaining_swa() > 0):
                break
            if rem_input <= 0 or (rem_chunk is not None and rem_chunk <= 0):
                break
            if len(can_run) + len(self.running) >= max_running:
                break
            self.cache.match(req)  # init_next_round_input
            max_new = min(max(req.max_new_tokens - req.num_outputs, 0), CLIP_MAX_NEW_TOKENS)
            extend = req.fill_len - req.prefix_len
            total_tokens = extend + max_new + p
            # PrefillAdder._lock_node: the check runs with the matched prefix locked, so the
            # request's own prefix does not count as evictable room for it
            probe_full, probe_swa = tree.lock_footprint(req.last_node)
            ok = total_tokens < remaining_total() - probe_full
            chunk_limit = rem_chunk
            if ok:
                ext_paged = -(-extend // p) * p
                needed = self._swa_tokens(ext_paged, max_new, chunk_limit)
                if needed >= remaining_swa() - probe_swa:
                    ok = False
                    if needed >= a.swa_capacity and chunk_limit is not None:
                        # _chunk_cap: a smaller chunk bounds the transient SWA footprint
                        headroom = self._swa_tokens(0, max_new, None)
                        cap = max(0, int(remaining_swa() - probe_swa) - headroom) // p * p
                        if cap > 0:
                            ok, chunk_limit = True, min(chunk_limit, cap)
            if not ok:
                break  # NO_TOKEN: wait until memory frees up
            if chunk_limit is None and can_run and -(-extend // p) * p >= rem_input:
                break
            is_chunked = False
            adm_new = min(req.max_new_tokens, CLIP_MAX_NEW_TOKENS)
            if chunk_limit is not None and -(-extend // p) * p > chunk_limit:
                ext = chunk_limit // p * p
                end = (req.prefix_len + ext) // p * p
                extend = end - req.prefix_len
                if extend <= 0:
                    break
                is_chunked = True
                adm_new = 0
            # _commit_prefill_admission
            req.extend_end = req.prefix_len + extend
            req.lock = tree.lock(req.last_node)
            can_run.append(req)
            admitted_from_queue.append(req)
            reserve(extend, adm_new)
            if is_chunked:
                self.chunked = req
                break
        for req in admitted_from_queue:
            self.waiting.remove(req)
        return can_run

    # ------------------------------------------------------------------ prefill
    def _prepare_extend(self, batch: list[ServerReq]) -> int | None:
        """``alloc_for_extend`` for a prefill batch; the cached tokens it newly serves, or None
        when allocation failed and the batch was aborted. Both loops share it."""
        cached_before = sum(r.prefix_len for r in batch if not r.holds_kv and not r.retracted_stain)
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

    def _run_prefill(self, batch: list[ServerReq]):
        if self.cfg.fast_forward and len(batch) == 1 and batch[0] is self.chunked:
            yield from self._run_chunk_train(batch[0])
            return
        t0 = self.env.now
        cached_before = self._prepare_extend(batch)
        if cached_before is None:
            return
        ext = [r.extend_end - r.prefix_len for r in batch]
        dur = self._prefill_time(ext, [r.prefix_len for r in batch])
        full_used, swa_used = self._used()
        yield self.env.timeout(dur)
        t1 = self.env.now
        self.obs.on_prefill_batch(
            t0,
            t1,
            [r.sim for r in batch],
            sum(ext),
            cached_before,
            full_used,
            swa_used,
            len(self.running),
            len(self.waiting),
        )
        self.allocator.free_group_begin()
        for r in batch:
            if r is self.chunked:  # stash_chunked_request: checkpoint the chunk, stay chunked
                self.cache.checkpoint(r, r.extend_end, finished=False)
                r.prefix_len = r.extend_end
                continue
            r.num_outputs += 1
            sim = r.sim
            if math.isnan(sim.first_token_s):
                sim.first_token_s = t1
                self.obs.on_first_token(sim)
            if r.num_outputs >= r.output_len:
                self._finish(r)
            else:
                self.cache.checkpoint(r, r.extend_end, finished=False)
                r.prefix_len = r.extend_end
                self.running.append(r)
        self.allocator.free_group_end()
        self._check()

    def _run_chunk_train(self, req: ServerReq):
        """Consecutive truncated chunks of one long prompt, in one jump of the clock.

        While a chunk is truncated the prefill batch holds only the chunked request
        (``add_chunked_req`` uses the whole chunk budget) and nothing else runs or reads the
        cache, so each chunk's allocation, forward and checkpoint can be applied in order and the
        clock advanced once. The last (untruncated) chunk goes back to the scheduler, which may
        batch waiting requests with it.
        """
        t = self.env.now
        records: list[tuple] = []
        while True:
            t0 = t
            cached_before = req.prefix_len if not req.holds_kv and not req.retracted_stain else 0
            try:
                self.cache.alloc_for_extend([req])
            except OutOfMemory as exc:
                self.chunked = None
                self._abort(req, str(exc))
                break
            self.forward_ct += 1
            ext = req.extend_end - req.prefix_len
            dur = self._prefill_time([ext], [req.prefix_len])
            full_used, swa_used = self._used()
            t = t0 + dur
            records.append((t0, t, ext, cached_before, full_used, swa_used))
            self.allocator.free_group_begin()
            self.cache.checkpoint(req, req.extend_end, finished=False)  # stash_chunked_request
            req.prefix_len = req.extend_end
            self.allocator.free_group_end()
            self._check()
            new_len, truncated = self._chunk_continuation()
            if new_len <= 0 or not truncated:
                break
            req.extend_end = req.prefix_len + new_len
        queued0 = len(self.waiting)
        if t > self.env.now:
            yield self.env.timeout(t - self.env.now)
        # the batch records, with the queue each chunk's end saw (arrivals wait out the train)
        arrivals = sorted(r.sim.arrival_s for r in self.waiting[queued0:])
        for t0, t1, ext, cached, full_used, swa_used in records:
            queue = queued0 + bisect.bisect_right(arrivals, t1)
            self.obs.on_prefill_batch(
                t0, t1, [req.sim], ext, cached, full_used, swa_used, len(self.running), queue
            )

    # ------------------------------------------------------------------ overlap scheduling
    def _loop_overlap(self):
        """``Scheduler.event_loop_overlap``: batch N+1 is scheduled and launched before batch
        N's results are processed; the GPU runs launched batches back to back.

        So a request that finishes in batch N still takes part in batch N+1 (one over-allocated
        slot, freed at its release), prefill requests join the next decode batch before their
        first token is known, and every cache checkpoint and release lands one step later.
        Runs one forward at a time (no fast-forward).
        """
        pending: _Launched | None = None
        while True:
            if pending is not None and self.chunked is not None and self.chunked in pending.reqs:
                # stash_chunked_request: the in-flight chunk is checkpointed when the next batch
                # is scheduled
                self._stash_chunk(self.chunked, pending)
            launched = None
            batch = self._get_new_batch_prefill()
            start = pending.end if pending is not None else self.env.now
            if batch:
                launched = self._launch_prefill(batch, start)
            elif self.running:
                launched = self._launch_decode(start)
            if pending is not None:
                if pending.end > self.env.now:
                    yield self.env.timeout(pending.end - self.env.now)
                self._process_launched(pending)
            elif launched is None:
                if self.idle:
                    self._wakeup = self.env.event()
                    yield self._wakeup
                    self._wakeup = None
                elif not self.running:
                    self._abort_unservable()
            pending = launched

    def _launch_prefill(self, batch: list[ServerReq], start: float):
        cached_before = self._prepare_extend(batch)
        if cached_before is None:
            return None
        ext = [r.extend_end - r.prefix_len for r in batch]
        dur = self._prefill_time(ext, [r.prefix_len for r in batch])
        full_used, swa_used = self._used()
        # the scheduler merges the prefilled requests into the next decode batch right away
        for r in batch:
            if r is not self.chunked:
                self.running.append(r)
        info = (sum(ext), cached_before, full_used, swa_used, len(self.running), len(self.waiting))
        return _Launched("prefill", batch, [r.gen for r in batch], start, start + dur, info)

    def _launch_decode(self, start: float):
        batch = self._prepare_decode()
        if batch is None:
            return None
        full_used, swa_used = self._used()
        seqs = [r.kv_allocated_len for r in batch]
        dur = self.cost.decode_time(len(batch), sum(seqs), sum(min(x, self.window) for x in seqs))
        batch = list(batch)
        info = (full_used, swa_used)
        return _Launched("decode", batch, [r.gen for r in batch], start, start + dur, info)

    def _stash_chunk(self, req: ServerReq, launched: _Launched) -> None:
        if req.stashed is launched:
            return
        req.stashed = launched
        self.allocator.free_group_begin()
        self.cache.checkpoint(req, req.extend_end, finished=False)
        req.prefix_len = req.extend_end
        self.allocator.free_group_end()

    def _process_launched(self, launched: _Launched) -> None:
        """``process_batch_result`` of a batch, at its end time, one step late."""
        t1 = launched.end
        live = [
            r
            for r, gen in zip(launched.reqs, launched.gens, strict=True)
            if r.gen == gen and r.holds_kv and r.num_outputs < r.output_len
        ]
        if launched.kind == "prefill":
            ext, cached, full_used, swa_used, running, queue = launched.info
            self.obs.on_prefill_batch(
                launched.start,
                t1,
                [r.sim for r in launched.reqs],
                ext,
                cached,
                full_used,
                swa_used,
                running,
                queue,
            )
            self.allocator.free_group_begin()
            for r in live:
                if r.extend_end < r.fill_len:  # a chunk: checkpointed when it was stashed
                    self._stash_chunk(r, launched)
                    continue
                r.num_outputs += 1
                if math.isnan(r.sim.first_token_s):
                    r.sim.first_token_s = t1
                    self.obs.on_first_token(r.sim)
                if r.num_outputs >= r.output_len:
                    self._finish_overlap(r, t1)
                else:
                    self.cache.checkpoint(r, r.extend_end, finished=False)
                    r.prefix_len = r.extend_end
            self.allocator.free_group_end()
        else:
            full_used, swa_used = launched.info
            self.overlap_extra_slots += len(launched.reqs) - len(live)
            self.decode_steps += 1
            self.ratio.on_decode_steps(1)
            self.obs.on_decode_steps(
                np.array([t1]),
                [r.sim for r in launched.reqs],
                np.array([full_used]),
                np.array([swa_used]),
                len(self.waiting),
            )
            self.allocator.free_group_begin()
            for r in live:
                r.num_outputs += 1
                if r.num_outputs >= r.output_len:
                    self._finish_overlap(r, t1)
            self.allocator.free_group_end()
        self._check()

    def _finish_overlap(self, r: ServerReq, t: float) -> None:
        """Release with the slot the next (already launched) decode step took for it."""
        if r in self.running:
            self.running.remove(r)
        sim = r.sim
        sim.finish_s = t
        sim.cached_tokens = r.cached_tokens
        sim.retractions = r.retractions
        self.cache.release(r, owned=r.prompt_len + r.num_outputs - 1)
        self.obs.on_finish(sim)
        r.done.succeed(sim)

    def _finish(self, r: ServerReq) -> None:
        sim = r.sim
        sim.finish_s = self.env.now
        sim.cached_tokens = r.cached_tokens
        sim.retractions = r.retractions
        self._release_finished(r)
        r.done.succeed(sim)

    def _release_finished(self, r: ServerReq) -> None:
        """``release_kv_cache(checkpoint=True)`` and the observer's finish record."""
        self.cache.release(r)
        self.obs.on_finish(r.sim)

    # ------------------------------------------------------------------ decode
    def _retract(self) -> None:
        """``ScheduleBatch.retract_decode``: drop the fewest-output, longest-input requests."""
        order = sorted(
            range(len(self.running)),
            key=lambda i: (self.running[i].num_outputs, -self.running[i].prompt_len),
            reverse=True,
        )
        retracted: list[ServerReq] = []
        first = True
        while first or not self.cache.check_decode_mem([self.running[i] for i in order]):
            if len(order) == 1:
                break
            first = False
            idx = order.pop()
            req = self.running[idx]
            self.cache.retract(req, len(order))
            req.retractions += 1
            req.gen += 1  # in-flight results of it are void
            retracted.append(req)
        aborted = []
        if len(order) <= 1 and not self.cache.check_decode_mem([self.running[i] for i in order]):
            last = self.running[order.pop()]
            aborted.append(last)
        keep = set(order)
        self.running = [r for i, r in enumerate(self.running) if i in keep]
        before = self.ratio.current
        decoded = sum(r.num_outputs for r in self.running)
        max_new = sum(r.max_new_tokens for r in self.running)
        self.ratio.current = min(1.0, (decoded + 20 * len(self.running)) / (max_new + 1))
        self.retractions += len(retracted)
        self.waiting.extend(retracted)
        for r in aborted:
            self._abort(r, "out of memory even after retracting all other requests")
        if retracted:
            self.obs.on_retract(self.env.now, [r.sim for r in retracted], before, self.ratio.current)

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
        bs = len(batch)
        p = self.page_size
        k = 0
        for r in batch:
            rem = r.output_len - r.num_outputs
            k = max(k, rem)
        for r in batch:
            seq = r.kv_allocated_len + 1
            if seq < self.window:
                cross = self.window - seq
                if cross < r.output_len - r.num_outputs:  # still running when it reaches the window
                    k = min(k, cross)
        if k <= 1:
            return 0
        tree = self.cache.tree
        room = min(
            self.allocator.full_free + tree.full_evictable // p,
            self.allocator.swa_free + tree.swa_evictable // p,
        )
        if room < bs:
            return 0
        # each request opens at most ceil(s / p) + 1 pages in s steps
        if p == 1:
            k = min(k, (room - bs) // bs + 1)
        else:
            k = min(k, p * max(0, (room - bs) // bs - 1))
        return max(0, k)

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
        ctx = DecodeContext(self.window, self.page_size, self.allocator, self.forward_ct)
        self.allocator.free_group_begin()
        for r in batch:  # ScheduleBatch.maybe_evict_swa
            self.swa_freed_by_decode += self.swa_policy.on_decode(r, ctx)
        self.allocator.free_group_end()
        try:
            self.cache.alloc_for_decode(batch)
        except OutOfMemory as exc:
            victim = batch[-1]
            self.running.remove(victim)
            self._abort(victim, str(exc))
            return None
        self.forward_ct += 1
        return batch

    def _run_decode(self):
        k = min(self._quiet_steps(), MAX_JUMP)
        if k > 1:
            yield from self._fast_forward(k)
            return
        batch = self._prepare_decode()
        if batch is None:
            return
        full_used, swa_used = self._used()
        seqs = np.array([r.kv_allocated_len for r in batch], dtype=np.int64)
        dur = self.cost.decode_time(len(batch), int(seqs.sum()), int(np.minimum(seqs, self.window).sum()))
        yield self.env.timeout(dur)
        self.decode_steps += 1
        self.ratio.on_decode_steps(1)
        self.obs.on_decode_steps(
            np.array([self.env.now]),
            [r.sim for r in batch],
            np.array([full_used]),
            np.array([swa_used]),
            len(self.waiting),
        )
        self.allocator.free_group_begin()
        still = []
        for r in batch:
            r.num_outputs += 1
            if r.num_outputs >= r.output_len:
                self._finish(r)
            else:
                still.append(r)
        self.allocator.free_group_end()
        self.running = still
        self._check()

    def _fast_forward(self, k: int):
        """Run ``k`` quiet decode steps at once, stopping early if a request arrives.

        The batch may shrink inside the jump: a request that produces its last token at step f
        leaves after f. Clients learn of each finish at its exact time (:class:`_FinishChain`); the
        cache-side release is replayed in step order after the clock has moved.
        """
        batch = list(self.running)
        now = self.env.now
        seqs = [r.kv_allocated_len for r in batch]
        last = [min(r.output_len - r.num_outputs, k) - 1 for r in batch]  # last step in the span
        arrival = self._next_arrival if self._next_arrival > now else math.inf
        segments, clock = self._price_jump(seqs, last, k, now, arrival)
        m = clock.steps
        if arrival < clock.last_end:
            # the announced arrival lands in step m - 1: the jump ends with that step
            m = clock.steps_ended_by(arrival) + 1
        finishing = sorted((last[i], i) for i, r in enumerate(batch) if r.output_len - r.num_outputs <= m)
        chain = _FinishChain(self, batch, finishing, clock) if finishing else None
        # an arrival during the last planned step changes nothing; one before it cuts the jump
        self._interrupt_before = clock.end(m - 2) if m > 1 else now
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
        self._apply_jump(batch, seqs, last, segments, clock, m)

    def _price_jump(
        self, seqs: list[int], last: list[int], k: int, now: float, arrival: float
    ) -> tuple[list[tuple[int, int, list[int]]], DecodeClock]:
        """The jump's batch segments ``(first step, end step, member indices)`` and their clock.

        A segment ends where a request leaves (after its last step ``last[i]``). Each is priced
        from its batch size and FULL / SWA context sums at its first step: a step costs
        ``C(bs) + max(fa*x, fb*(x+bs)) + max(sa*y, sb*(y+bs))`` (``CostModel.decode_terms``).
        Pricing stops with the segment in which the announced ``arrival`` falls.
        """
        w = self.window
        cuts = sorted({f + 1 for f in last if f + 1 < k}) + [k]
        segments: list[tuple[int, int, list[int]]] = []
        clock = DecodeClock(now, [], *self._decode_terms(1)[1:])
        a = 0
        for b in cuts:
            members = [i for i, f in enumerate(last) if f >= a]
            segments.append((a, b, members))
            x0 = y0 = below = 0
            for i in members:
                x = seqs[i] + 1 + a  # each step attends over its new token too
                x0 += x
                if x < w:
                    y0 += x
                    below += 1
                else:
                    y0 += w
            clock.add(b - a, self._decode_terms(len(members))[0], len(members), x0, y0, below)
            a = b
            if clock.last_end > arrival:  # the announced arrival comes first: price no further
                break
        return segments, clock

    def _apply_jump(
        self,
        batch: list[ServerReq],
        seqs: list[int],
        last: list[int],
        segments: list[tuple[int, int, list[int]]],
        clock: DecodeClock,
        m: int,
    ) -> None:
        """The cache side of a jump whose first ``m`` steps ran: memory operations, releases at
        finish in step order, and the jump's report (:class:`DecodeJump`)."""
        forward0 = self.forward_ct
        p = self.page_size
        ran = [min(f + 1, m) for f in last]  # steps each request ran in this jump
        bulk = self._replay_jump(batch, seqs, ran, m, forward0)
        opens: list[int] = bulk[2] if bulk is not None else []  # a page opens at each, in step order
        frees: list[tuple[int, int]] = bulk[3] if bulk is not None else []  # (step, SWA pages)
        recorded: list[JumpSegment] = []
        offset_full = offset_swa = 0  # what releases inside the jump changed #full / #swa token by
        for a, b, members in segments:
            if a >= m:
                break
            b = min(b, m)
            reqs = [batch[i] for i in members]
            if bulk is None:  # a step of it may evict: SGLang's per-step sequence, segment by segment
                full_base, swa_base, seg_opens, seg_frees = self._replay_quiet_steps(
                    reqs, [seqs[i] + a for i in members], b - a, forward0 + a
                )
                opens.extend(a + x for x in seg_opens)
                frees.extend((a + x, pages) for x, pages in seg_frees)
                for r in reqs:
                    r.kv_allocated_len += b - a
                    r.decode_batch_idx += b - a
                    r.num_outputs += b - a
            else:
                opened = bisect.bisect_left(opens, a)
                freed = sum(pages for x, pages in frees if x < a)
                full_base = bulk[0] + offset_full + opened * p
                swa_base = bulk[1] + offset_swa + (opened - freed) * p
            recorded.append(JumpSegment(a, b, [r.sim for r in reqs], full_base, swa_base))
            # members that produce their last token at this segment's last step
            done_now = [
                r for i, r in zip(members, reqs, strict=True) if last[i] < b and r.num_outputs >= r.output_len
            ]
            if done_now:
                before = self._used()
                self.allocator.free_group_begin()
                for r in done_now:
                    self._release_finished(r)
                self.allocator.free_group_end()
                after = self._used()
                offset_full += after[0] - before[0]
                offset_swa += after[1] - before[1]
        # requests that arrived during the last step are in the queue it reports
        self.obs.on_decode_jump(DecodeJump(clock, m, p, opens, frees, recorded, len(self.waiting)))
        self.forward_ct = forward0 + m
        self.decode_steps += m
        self.ratio.on_decode_steps(m)
        self.running = [r for r in batch if r.num_outputs < r.output_len]
        self._check()

    def _replay_jump(
        self, batch: list[ServerReq], seqs0: list[int], ran: list[int], m: int, forward_ct: int
    ) -> tuple[int, int, list[int], list[tuple[int, int]]] | None:
        """A whole jump's memory operations at once, when no step of it can evict.

        Request ``i`` ran ``ran[i]`` of the jump's ``m`` steps. If free pages cover every page the
        jump opens with a full batch to spare, no step runs short (releases only add free pages),
        so SGLang's per-step sequence reduces to net allocations and SWA frees, applied here in
        one go, and each request's counters advance. Returns ``#full token`` / ``#swa token``
        before the jump, the steps that open a page (sorted, one entry per page) and the
        ``(step, pages)`` SWA frees; or None (nothing done) otherwise, and the caller replays
        segment by segment (:meth:`_replay_quiet_steps`).
        """
        p = self.page_size
        a = self.allocator
        opens: list[int] = []
        for x, n in zip(seqs0, ran, strict=True):
            f = (-x) % p  # the first step at which this request opens a page
            if f < n:
                opens.extend(range(f, n, p))
        if min(a.full_free, a.swa_free) - len(opens) < len(batch):
            return None
        opens.sort()
        ctx = DecodeContext(self.window, p, _DEFERRED_FREES, forward_ct)
        frees = [(step, freed // p) for step, freed in self.swa_policy.run_batch(batch, ctx, ran)]
        full_used0, swa_used0 = self._used()
        freed_pages = sum(pages for _, pages in frees)
        self.swa_freed_by_decode += freed_pages * p
        a.alloc_pages_and_free_swa(len(opens), freed_pages)
        for r, n in zip(batch, ran, strict=True):
            r.kv_allocated_len += n
            r.decode_batch_idx += n
            r.num_outputs += n
        return full_used0, swa_used0, opens, frees

    def _prefill_time(self, extend: list[int], prefix: list[int]) -> float:
        """``cost.prefill_time``, memoised for one-request batches (most of them): chunks of
        long prompts repeat the same (extend, prefix) pairs, and the cost model is pure."""
        if len(extend) != 1:
            return self.cost.prefill_time(extend, prefix)
        key = (extend[0], prefix[0])
        t = self._prefill_memo.get(key)
        if t is None:
            if len(self._prefill_memo) >= PREFILL_MEMO_SIZE:
                self._prefill_memo.clear()
            t = self._prefill_memo[key] = self.cost.prefill_time(extend, prefix)
        return t

    def _decode_terms(self, bs: int) -> tuple[float, float, float, float, float]:
        """``(C, fa, fb, sa, sb)`` of a decode step of ``bs`` requests (:class:`DecodeClock`)."""
        terms = self._terms_cache.get(bs)
        if terms is None:
            base, fa, fb, sa, sb, allreduce, overhead = self.cost.decode_terms(bs)
            terms = self._terms_cache[bs] = (base + allreduce + overhead, fa, fb, sa, sb)
        return terms

    def _notify_finish(self, r: ServerReq, t: float) -> None:
        """A finish inside a jump, delivered to its client at its exact time."""
        sim = r.sim
        sim.finish_s = t
        sim.cached_tokens = r.cached_tokens
        sim.retractions = r.retractions
        r.done.succeed(sim)

    def _replay_quiet_steps(
        self, batch: list[ServerReq], seqs0: list[int], m: int, forward_ct: int
    ) -> tuple[int, int, list[int], list[tuple[int, int]]]:
        """Apply ``m`` decode steps' memory operations in SGLang's per-step order.

        Per step: ``check_decode_mem`` (evict for the pages it opens), the SWA-eviction policy,
        ``alloc_for_decode`` (evict to ``bs * page``, then allocate). Between the steps where a
        pool runs short, allocations and SWA frees are applied in bulk. Returns ``#full token``
        and ``#swa token`` before the steps, the steps that open a page (one entry per page) and
        the ``(step, pages)`` SWA frees: evictions move evictable to available, so they change
        neither count (:class:`JumpSegment`).
        """
        bs = len(batch)
        p = self.page_size
        a = self.allocator
        opens = np.zeros(m, dtype=np.int64)
        total = 0
        for x in seqs0:
            f = (-x) % p  # the first step at which this request opens a page
            if f < m:
                opens[f::p] += 1
                total += (m - 1 - f) // p + 1
        # SWA-eviction events, computed without touching the allocator, applied in order below
        ctx = DecodeContext(self.window, p, _DEFERRED_FREES, forward_ct)
        events = [ev for r in batch for ev in self.swa_policy.run_steps(r, ctx, m)]
        frees_total = sum(freed for _, freed in events) // p
        self.swa_freed_by_decode += frees_total * p
        full_used0, swa_used0 = self._used()
        pages_through = opens.cumsum()
        open_steps = np.repeat(np.arange(m), opens).tolist()
        free_list = [(step, freed // p) for step, freed in events]
        if min(a.full_free, a.swa_free) - total >= bs:
            # free pages never drop below a batch's worth: no step evicts
            a.alloc_pages_and_free_swa(total, frees_total)
            return full_used0, swa_used0, open_steps, free_list
        frees = np.zeros(m, dtype=np.int64)  # SWA pages freed at step s (before its alloc)
        for step, freed in events:
            frees[step] += freed // p
        s = 0
        while s < m:
            # free pages before each later step's allocation, if no eviction happened
            cons_before = pages_through[s:] - opens[s:] - (pages_through[s - 1] if s else 0)
            frees_before = np.cumsum(frees[s:]) - frees[s:]
            ff = a.full_free - cons_before
            sf = a.swa_free - cons_before + frees_before
            need = opens[s:]
            short = (ff < need) | (sf < need) | (ff < bs) | (sf + frees[s:] < bs)
            hit = np.flatnonzero(short)
            t = s + int(hit[0]) if len(hit) else m
            if t > s:  # the quiet stretch [s, t): its allocations and SWA frees, net
                a.alloc_pages_and_free_swa(int(opens[s:t].sum()), int(frees[s:t].sum()))
            if t == m:
                break
            # step t runs SGLang's per-step sequence
            self.cache.evict_to_free_tokens(int(opens[t]) * p)
            a.free_swa_pages(int(frees[t]))
            self.cache.evict_to_free_tokens(bs * p)
            if not a.can_alloc_pages(int(opens[t])):  # pragma: no cover - excluded by _quiet_steps
                raise OutOfMemory("decode out of memory inside a fast-forwarded span")
            a.alloc_pages(int(opens[t]))
            s = t + 1
        return full_used0, swa_used0, open_steps, free_list
