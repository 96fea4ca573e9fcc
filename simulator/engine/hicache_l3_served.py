"""HiCache with the L3 storage tier in a served run: the scheduler-step hooks of
:class:`~simulator.engine.hicache_steps.HiCacheSteps` plus SGLang's storage calls.

SGLang 0.5.23 (paths under ``srt/``): a request entering the waiting queue issues its prefetch
(``managers/scheduler.py`` ``_add_request_to_queue`` -> ``_prefetch_kvcache`` ->
``mem_cache/unified_radix_cache.py`` ``prefetch_from_storage``: anchor backed up, threshold,
rate limit); ``_process_hicache_events`` at the start of ``get_next_batch_to_run`` runs
``check_hicache_events``, whose storage drain (``_drain_storage_control_queues_impl``)
allocates host slots for hits, applies prefetch acks (``_handle_prefetch_result`` inserts the
pages as host-only nodes) and backup acks; the admission loop of ``_get_new_batch_prefill_raw``
skips a request while ``check_prefetch_progress`` says its prefetch must be waited for (the
termination policy) and takes its L3-loaded span (``pop_prefetch_loaded_span``) for
``split_cached_prefix_by_tier``. L2 -> L3 backups are queued by the L2 write ack
(``write_backup_storage``). The storage threads take simulated time
(:mod:`simulator.radix.hicache_l3_timing`).

kvplan issues the prefetches of the requests that arrived during a step at the next step's
start, before the event check, as SGLang ingests requests at the top of its loop.

Both scheduler loops serve it. ``event_loop_overlap`` (``managers/scheduler.py``) makes the same
calls in the same order as ``event_loop_normal``: ``ingest_requests`` (the prefetches), then
``get_next_batch_to_run`` -> ``_process_hicache_events`` -> ``check_hicache_events`` (the
storage drain, ``writing_check`` / ``loading_check``), then the admission gate. It differs only
in when a pass starts (when the batch in flight ends, not after its results are processed) and
in the copy streams' fence behind the forward in flight (:class:`HiCacheSteps`). The storage
threads (``cache_controller.py`` ``prefetch_thread_func``, ``prefetch_io_aux_func``;
``hybrid_cache_controller.py`` ``backup_thread_func``) move host memory to and from storage
only, so they wait for no forward: their work is timed as in the plain loop and is seen at the
first pass start at or after its completion.
"""

from __future__ import annotations

from typing import Any

from simulator.engine.hicache_steps import HiCacheSetup, HiCacheSteps, _completed, build_served_cache
from simulator.errors import ConfigError
from simulator.radix.hicache_l3_timing import attach_timed_storage
from simulator.radix.hicache_replay import split_cached_prefix_by_tier

__all__ = ["L3Steps", "check_l3_config"]


def check_l3_config(cfg: Any, resolved: Any) -> None:
    """Refuse, in one line, what the served L3 tier does not model."""
    if resolved.storage is None:
        return
    if resolved.host_memory_mode != "cache":
        raise ConfigError(
            "--hicache-host-memory-mode buffer_only in served runs: kvplan serves the L3 tier in cache "
            "mode only (the host pool is a resident L2 tier)"
        )


class L3Steps(HiCacheSteps):
    """The HiCache step hooks with the L3 tier (module doc)."""

    def __init__(self, cache: Any, setup: HiCacheSetup) -> None:
        super().__init__(cache, setup)
        self.l3 = attach_timed_storage(setup, cache)
        self._arrivals: list = []
        self._spans: dict[str, tuple[int, int | None]] = {}  # rid -> L3-loaded span, until admitted
        self.storage_usage: list[tuple[float, int, int]] = []  # (time, bytes, pages) when it changed

    @classmethod
    def build(cls, setup: HiCacheSetup, pools: Any, eviction_order: Any) -> L3Steps:
        return cls(build_served_cache(setup, pools, eviction_order), setup)

    def on_enqueue(self, req: Any) -> None:
        """``_add_request_to_queue``: the prefetch is issued at the next step start."""
        self._arrivals.append(req)

    def step_start(self, now: float, fence: float = 0.0) -> None:
        """Issue the arrivals' prefetches, then ``check_hicache_events`` every step (the
        storage threads' due work, the L2 acks, the storage drain); ``fence`` as in
        :meth:`HiCacheSteps.step_start` (overlap: the backups' copy waits for the forward in
        flight; the storage threads do not)."""
        st, cache = self.l3, self.cache
        st.now_s = now
        if self._arrivals:
            for req in self._arrivals:
                if req.sim is None or not req.sim.aborted:
                    st.issue(cache, req)
            self._arrivals.clear()
        st.stamp(now)
        if cache.hicache_idle() and not st.busy():
            return
        self._submit("d2h", now, fence)
        pending_writes = cache.pending_writes()
        while len(self._writes) > pending_writes:  # acknowledged synchronously (write_back)
            self._writes.popleft().ack_s = now
        writes = _completed(self._writes, now)
        loads = _completed(self._loads, now)
        cache.check_hicache_events(writes, loads)
        for queue, n in ((self._writes, writes), (self._loads, loads)):
            for _ in range(n):
                queue.popleft().ack_s = now
        st.stamp(now)
        self._sample(now)

    def step_end(self, now: float, fence: float = 0.0) -> None:
        """``flush_pending_backups``. The storage work queued during the pass (the L3 backups
        of write_back's synchronous acks, at the evictions of its admission and allocations)
        is dated at the pass's start, when those ran: SGLang's backup thread takes it up at
        once (``hybrid_cache_controller.py`` ``backup_thread_func``), not when the batch ends."""
        st = self.l3
        st.stamp(st.now_s)
        st.now_s = now
        super().step_end(now, fence)
        st.stamp(now)

    def next_completion(self) -> float:
        """The next L2 completion, storage-thread completion or prefetch deadline."""
        return min(super().next_completion(), self.l3.next_event())

    def bound_jump(self, k: int, running: list) -> int:
        """:meth:`HiCacheSteps.bound_jump`, and under write_back no step that could evict
        (:meth:`_no_eviction`)."""
        return self._no_eviction(super().bound_jump(k, running), len(running))

    def bound_overlap_jump(self, k: int, in_flight: str, finish_passes: list[int]) -> int:
        """:meth:`HiCacheSteps.bound_overlap_jump` (one finish pass per request of the batch),
        and under write_back no step that could evict (:meth:`_no_eviction`)."""
        k = super().bound_overlap_jump(k, in_flight, finish_passes)
        return self._no_eviction(k, len(finish_passes))

    def _no_eviction(self, k: int, bs: int) -> int:
        """Under write_back a device eviction backs the leaf up and acknowledges it at once
        (``unified_radix_cache.py`` ``writing_check(write_back=True)``), and the ack queues its
        L3 backup (``write_backup_storage``), which the backup thread takes up from the start
        of the pass that evicted (:meth:`step_end`). A jump applies its steps' evictions after
        its clock has moved, so it could not date that backup: under write_back a jump stops
        while free pages (not evictable) still cover every step's new pages with a batch to
        spare, the condition under which ``fast_forward.py`` ``_replay_jump`` applies a jump
        without eviction (a request opens at most ``ceil(k / page)`` pages in ``k`` steps)."""
        if k <= 1 or bs == 0 or self.setup.resolved.write_policy != "write_back":
            return k
        free = min(self.cache.free_pages())
        return max(0, min(k, self.l3.page_size * (free // bs - 1)))

    def storage_ready(self, req: Any) -> bool:
        """The storage gate of the admission loop: False while the request must wait for its
        prefetch; else its L3-loaded span is kept for :meth:`record_tiers`."""
        span = self.l3.ready(req.rid)
        if span is None:
            return False
        if span[0] > 0:
            self._spans[req.rid] = span
        return True

    def record_tiers(self, req: Any) -> None:
        """``split_cached_prefix_by_tier`` with the L3-loaded span: (device, host, storage)."""
        sim = req.sim
        if sim is None or sim in self.tiers or req.retracted_stain:
            return
        span = self._spans.pop(req.rid, (0, None))
        host = min(req.host_hit_length, req.host_loaded_length)
        self.tiers[sim] = split_cached_prefix_by_tier(req.prefix_len, host, *span)

    def _sample(self, now: float) -> None:
        super()._sample(now)
        store = self.l3.store
        point = (store.used_bytes, len(store))
        if not self.storage_usage or self.storage_usage[-1][1:] != point:
            self.storage_usage.append((now, *point))
