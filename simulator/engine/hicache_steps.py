"""HiCache in a served run: the controller the engine builds and the scheduler-step hooks that
time its transfers in simulated time.

SGLang 0.5.23 (paths under ``python/sglang/srt/``): ``managers/scheduler.py`` runs
``check_hicache_events`` at the start of ``get_next_batch_to_run`` (``_process_hicache_events``),
``ready_to_load_host_cache`` when a prefill batch is built (``_get_new_batch_prefill_raw``) and
``flush_pending_backups`` after ``process_batch_result``; ``managers/cache_controller.py`` /
``mem_cache/hybrid_cache/hybrid_cache_controller.py`` run the copies on one write and one load
stream, each in submission order, and ``writing_check`` / ``loading_check`` acknowledge the
operations whose events have completed, oldest first.

kvplan's timing: an operation starts when it is submitted or when its stream is free, whichever
is later, and takes :class:`~simulator.cost.hicache_transfer.HostTransferModel`'s time; it is
acknowledged at the start of the first scheduler step whose start time is at or after its
completion. A load-back's copy is layer-wise overlapped with the prefill that waits for it
(``exposed_load_time``). Under the overlap loop both copy streams also wait for the forward in
flight when they are submitted (``fence``: ``load_fence_stream`` / ``write_fence_stream`` are the
model runner's ``forward_stream``, managers/scheduler.py ``init_cache_with_memory_pool``;
``start_loading`` / ``start_writing`` in managers/cache_controller.py); the plain loop submits
with no forward in flight. The tree itself (:class:`~simulator.radix.hicache_tree.HiCacheTree`)
is the one ``kvplan cache-replay`` proves against SGLang.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from simulator.errors import ConfigError
from simulator.hicache_args import ResolvedHiCache, resolve_hicache_args

if TYPE_CHECKING:  # imported where a HiCache is set up: a run without one never loads them
    from simulator.cost.hicache_transfer import HostTransferModel, TransferGeometry
    from simulator.radix.hicache_served import ServedHiCache

__all__ = ["HiCacheSetup", "HiCacheSteps", "TransferRecord", "build_served_cache", "hicache_setup"]


@dataclass(frozen=True)
class HiCacheSetup:
    """What a served run's HiCache is built from: host pool sizes (SGLang's sizing), the
    resolved flags, the transfer-time model and the per-rank pool geometry it prices."""

    host_full_tokens: int
    host_swa_tokens: int
    resolved: ResolvedHiCache
    transfer: HostTransferModel
    geometry: TransferGeometry


def hicache_setup(cfg: Any, model: Any, gpu: Any, sizes: Any, pools: Any) -> HiCacheSetup | None:
    """The HiCache of ``cfg`` (a SimConfig), or None when it is off; refuses with one line what
    kvplan does not serve yet."""
    if not cfg.hicache.enabled:
        return None
    resolved = resolve_hicache_args(cfg.hicache, disable_radix_cache=cfg.disable_radix_cache)
    if not pools.hybrid:
        raise ConfigError(
            f"HiCache in served runs models hybrid full + sliding-window models; {cfg.model} has one "
            "KV pool (kvplan's HiCache tree is SGLang's UnifiedRadixCache with FULL and SWA)"
        )
    if resolved.storage is not None:  # the L3 tier: simulator.engine.hicache_l3_served
        from simulator.engine.hicache_l3_served import check_l3_config

        check_l3_config(cfg, resolved)
    if cfg.tombstone != "unified":
        raise ConfigError(
            f"--tombstone {cfg.tombstone} with HiCache: SGLang does not support it (0.5.15's "
            "mem_cache/registry.py default_radix_cache_factory builds HiCache for a hybrid SWA model "
            "on UnifiedRadixCache, never on the legacy SWARadixCache; 0.5.23 has no SWARadixCache); "
            "use --tombstone unified"
        )
    from simulator.cost import load_profile
    from simulator.cost.hicache_transfer import HostTransferModel, transfer_geometry

    profile = load_profile(cfg.profile) if cfg.profile else None
    transfer = HostTransferModel.from_resolved(gpu, resolved, pools.page_size, profile)
    geometry = transfer_geometry(model, cfg.tp, sizes.kv_dtype_bytes)
    return HiCacheSetup(sizes.host_full_tokens, sizes.host_swa_tokens, resolved, transfer, geometry)


def build_served_cache(setup: HiCacheSetup, pools: Any, eviction_order: Any) -> ServedHiCache:
    """The HiCache controller of a server (``UnifiedRadixCache.init_hicache``)."""
    from simulator.radix.hicache_served import build_served_hicache

    host = (setup.host_full_tokens, setup.host_swa_tokens)
    return build_served_hicache(
        pools.full_tokens,
        pools.swa_tokens,
        pools.page_size,
        pools.window,
        eviction_order,
        setup.resolved.write_policy,
        host,
    )


@dataclass(slots=True)
class TransferRecord:
    """One submitted copy operation: ``d2h`` (a flush of queued backups) or ``h2d`` (a
    prefill batch's load-backs), its times (simulated seconds) and size (tokens per pool)."""

    direction: str
    submit_s: float
    start_s: float
    done_s: float
    full_tokens: int
    swa_tokens: int
    ack_s: float = math.nan


class HiCacheSteps:
    """The scheduler's HiCache hooks for one server, with their timing and the run's figures."""

    l3 = None  # the timed L3 tier (simulator.engine.hicache_l3_served.L3Steps), if any

    def __init__(self, cache: ServedHiCache, setup: HiCacheSetup) -> None:
        self.cache = cache
        self.setup = setup
        self.transfer = setup.transfer
        self.geometry = setup.geometry
        self._writes: deque[TransferRecord] = deque()  # submitted, not acknowledged, oldest first
        self._loads: deque[TransferRecord] = deque()
        self._free = {"d2h": 0.0, "h2d": 0.0}  # when each stream has finished its queue
        self.records: list[TransferRecord] = []
        self.usage: list[tuple[float, int, int]] = []  # (time, host FULL used, host SWA used)
        self.tiers: dict[Any, tuple[int, int]] = {}  # SimRequest -> (device, host) cached tokens
        self.exposed_load_s = 0.0

    @classmethod
    def build(cls, setup: HiCacheSetup, pools: Any, eviction_order: Any) -> HiCacheSteps:
        """The hooks over a fresh controller (:func:`build_served_cache`); with an L3 tier,
        :class:`~simulator.engine.hicache_l3_served.L3Steps`."""
        if setup.resolved.storage is not None and cls is HiCacheSteps:
            from simulator.engine.hicache_l3_served import L3Steps

            return L3Steps.build(setup, pools, eviction_order)
        return cls(build_served_cache(setup, pools, eviction_order), setup)

    def on_enqueue(self, req: Any) -> None:
        """A request entered the waiting queue (the L3 subclass issues its prefetch)."""

    # ------------------------------------------------------------------ scheduler hooks
    def step_start(self, now: float, fence: float = 0.0) -> None:
        """``check_hicache_events`` at the start of a scheduler step: submit queued backups
        (behind the forward in flight until ``fence``), then acknowledge the operations that
        completed by ``now``."""
        cache = self.cache
        if cache.hicache_idle():
            return
        self._submit("d2h", now, fence)
        pending_writes = cache.pending_writes()
        while len(self._writes) > pending_writes:  # acknowledged synchronously (write_back)
            self._writes.popleft().ack_s = now
        writes = _completed(self._writes, now)
        loads = _completed(self._loads, now)
        if writes or loads:
            cache.check_hicache_events(writes, loads)
            for queue, n in ((self._writes, writes), (self._loads, loads)):
                for _ in range(n):
                    queue.popleft().ack_s = now
        self._sample(now)

    def submit_loads(self, now: float, fence: float = 0.0) -> float:
        """``ready_to_load_host_cache`` for a prefill batch built at ``now`` and starting at
        ``max(now, fence)`` (overlap: when the forward in flight ends); seconds from its start
        until its load-back completes (0 without one)."""
        rec = self._submit("h2d", now, fence)
        return 0.0 if rec is None else rec.done_s - max(now, fence)

    def prefill_time(self, load_s: float, compute_s: float) -> float:
        """The prefill step's time with its load-back overlapped layer by layer."""
        if load_s <= 0:
            return compute_s
        exposed = self.transfer.exposed_load_time(load_s, compute_s, self.geometry.layers)
        self.exposed_load_s += exposed
        return compute_s + exposed

    def step_end(self, now: float, fence: float = 0.0) -> None:
        """``flush_pending_backups`` after the step's result processing (overlap: the copy
        waits for the forward launched before it, ending at ``fence``)."""
        self._submit("d2h", now, fence)
        self._sample(now)

    def next_completion(self) -> float:
        """When the next unacknowledged operation completes (inf: none in flight)."""
        t = math.inf
        if self._writes:
            t = self._writes[0].done_s
        if self._loads:
            t = min(t, self._loads[0].done_s)
        return t

    def jump_deadline(self) -> float:
        """The latest time a fast-forwarded decode step may end before the next ack: steps ending
        strictly before the next completion (the step starting at or after it acknowledges).
        The overlap jump reads it as the latest start of its last pass (``overlap_jump.py``)."""
        t = self.next_completion()
        return math.nextafter(t, -math.inf) if t < math.inf else t

    @staticmethod
    def bound_jump(k: int, running: list) -> int:
        """A decode jump ends at the first finish: the finishing request's release inserts and
        queues backups that the step's end submits (no release inside a jump)."""
        for r in running:
            k = min(k, r.output_len - r.num_outputs)
        return k

    @staticmethod
    def bound_overlap_jump(k: int, in_flight: str, finish_passes: list[int]) -> int:
        """An overlap decode jump (passes ``0 .. m-1``, ``m <= k``) ends with the first pass
        that releases a request (pass ``finish_passes[i]`` processes request ``i``'s finish):
        the backups its release queues are submitted by that pass's ``flush_pending_backups``
        (``process_batch_result``), which the loop runs after the jump. With a prefill batch in
        flight (``in_flight``), pass 0's checkpoints queue backups at once: 0, step it."""
        if in_flight != "decode":
            return 0
        return min(k, min(finish_passes, default=k) + 1)

    def record_tiers(self, req: Any) -> None:
        """``split_cached_prefix_by_tier`` at the request's first admission (SGLang computes the
        breakdown once, in ``prepare_for_extend``): host = min(prefix, host hit, host loaded)."""
        sim = req.sim
        if sim is None or sim in self.tiers or req.retracted_stain:
            return
        host = min(req.prefix_len, req.host_hit_length, req.host_loaded_length)
        self.tiers[sim] = (req.prefix_len - host, host)

    # ------------------------------------------------------------------ internals
    def _submit(self, direction: str, now: float, fence: float = 0.0) -> TransferRecord | None:
        """Submit the queued operation of ``direction`` (``d2h`` / ``h2d``) and time it: it
        starts once its stream is free and the forward it is fenced behind (``fence``) ended."""
        sizes = self.cache.submit(direction)
        if sizes is None:
            return None
        full, swa = sizes
        if direction == "d2h":
            seconds = self.transfer.backup_time(self.geometry, full, swa)
        else:
            seconds = self.transfer.load_time(self.geometry, full, swa)
        start = max(now, fence, self._free[direction])
        rec = TransferRecord(direction, now, start, start + seconds, full, swa)
        self._free[direction] = rec.done_s
        (self._writes if direction == "d2h" else self._loads).append(rec)
        self.records.append(rec)
        return rec

    def _sample(self, now: float) -> None:
        point = self.cache.host_used()
        if not self.usage or self.usage[-1][1:] != point:
            self.usage.append((now, *point))


def _completed(queue: deque[TransferRecord], now: float) -> int:
    """Operations at the head of ``queue`` complete by ``now`` (completions are in order)."""
    n = 0
    for rec in queue:
        if rec.done_s > now:
            break
        n += 1
    return n
