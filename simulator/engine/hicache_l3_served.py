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
    if not cfg.disable_overlap_schedule:
        raise ConfigError("--enable-overlap-schedule with an L3 tier is not modelled; drop one of them")


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
        :meth:`HiCacheSteps.step_start` (L3 is refused under the overlap loop, so 0 today)."""
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
        self.l3.now_s = now
        super().step_end(now, fence)
        self.l3.stamp(now)  # work queued inside the step (write_back's synchronous acks)

    def next_completion(self) -> float:
        """The next L2 completion, storage-thread completion or prefetch deadline."""
        return min(super().next_completion(), self.l3.next_event())

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
