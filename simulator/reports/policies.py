"""Policy comparison on one trace: SWA eviction × tombstoning, HiCache write policies, and the
optimal bound they are measured against (notebooks/policy_comparison.ipynb calls these).

Two settings, kept apart because their numbers are not comparable:

- **batch 1** (``kvplan cache-replay``'s library path, :func:`simulator.cache_replay.replay`): the
  setting of the optimal bound, so every policy's hit rate there is at most the bound
  (docs/optimal-bound.md). HiCache write policies are compared here too
  (:func:`simulator.radix.hicache_replay.replay_hicache`), against a second bound for device +
  host: Belady with the host pool's capacity added to the device's.
- **served** (``kvplan run``, :func:`simulator.run.run_config`): continuous batching, so latency
  too; no bound applies. Served runs of this kvplan refuse HiCache, so its write policies are
  compared at batch 1 only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from simulator.errors import KvplanError

SWA_EVICTIONS = ("interval", "iteration", "window", "none")
TOMBSTONES = ("unified", "legacy")
WRITE_POLICIES = ("write_through", "write_through_selective", "write_back")


@dataclass(frozen=True)
class ReplayPools:
    """Batch-1 pools in tokens and the HiCache host ratio (``--hicache-ratio``)."""

    page_size: int = 16
    full_tokens: int = 6000
    swa_tokens: int = 5000
    window: int = 128
    hicache_ratio: float = 2.0


def trace_workload(trace: Any, page_size: int) -> list:
    """A loaded trace as page-id requests (what cache-replay and the bound take)."""
    from simulator.cli.cache_replay_cmd import _TraceWorkload

    return list(_TraceWorkload(trace, page_size))


def _failure(exc: Exception) -> str:
    return f"{type(exc).__name__}: {str(exc)[:120]}"


def replay_grid(workload: Sequence, pools: ReplayPools) -> list[dict[str, Any]]:
    """Batch-1 hit rate of every tombstoning × SWA-eviction pair (an error is a row's result:
    some pairs cannot serve the trace in these pools)."""
    from simulator.cache_replay import CacheReplayConfig, replay
    from simulator.radix.cache import OutOfMemory

    rows = []
    for tomb in TOMBSTONES:
        for ev in SWA_EVICTIONS:
            row: dict[str, Any] = {"tombstone": tomb, "swa_eviction": ev, "hit_rate": None, "aborted": None}
            cfg = CacheReplayConfig(
                page_size=pools.page_size,
                full_tokens=pools.full_tokens,
                swa_tokens=pools.swa_tokens,
                window=pools.window,
                swa_eviction=ev,
                tombstone=tomb,
            )
            try:
                summary = replay(workload, cfg).summary
                row.update(hit_rate=summary["hit_rate"], aborted=summary["aborted"], error=None)
            except (OutOfMemory, KvplanError) as exc:
                row["error"] = _failure(exc)
            rows.append(row)
    return rows


def hicache_grid(workload: Sequence, pools: ReplayPools) -> list[dict[str, Any]]:
    """Batch-1 HiCache replay per write policy: all hits (device + host) and device hits."""
    from simulator.cli.cache_replay_hicache import summarize
    from simulator.radix.cache import OutOfMemory
    from simulator.radix.hicache_replay import HiCacheReplayConfig, replay_hicache

    rows = []
    for policy in WRITE_POLICIES:
        row: dict[str, Any] = {"write_policy": policy, "hit_rate": None, "device_hit_rate": None}
        cfg = HiCacheReplayConfig(
            page_size=pools.page_size,
            full_tokens=pools.full_tokens,
            swa_tokens=pools.swa_tokens,
            window=pools.window,
            write_policy=policy,
            hicache_ratio=pools.hicache_ratio,
        )
        try:
            s = summarize(replay_hicache(workload, cfg))
            row.update(
                hit_rate=s["hit_rate"],
                device_hit_rate=s["device_hit_rate"],
                host_hit_tokens=s["total_host_hit_tokens"],
                error=None,
            )
        except (OutOfMemory, KvplanError) as exc:
            row["error"] = _failure(exc)
        rows.append(row)
    return rows


def bounds(workload: Sequence, pools: ReplayPools) -> dict[str, Any]:
    """The optimal bound on the device pools, and on device + host (the host's full-pool
    capacity added to the device's: a host hit counts as a hit)."""
    from simulator.planner.bound import optimal_bound
    from simulator.planner.bound_model import PoolModel
    from simulator.radix.hicache_replay import HiCacheReplayConfig

    p = pools.page_size
    device = optimal_bound(workload, PoolModel(p, pools.full_tokens, pools.swa_tokens, pools.window))
    host_cfg = HiCacheReplayConfig(
        page_size=p,
        full_tokens=pools.full_tokens,
        swa_tokens=pools.swa_tokens,
        window=pools.window,
        hicache_ratio=pools.hicache_ratio,
    )
    host_full, _ = host_cfg.host_capacities()
    both = optimal_bound(workload, PoolModel(p, pools.full_tokens, host_full_tokens=int(host_full)))
    return {
        "device": device.hit_rate_bound,
        "device_exact": device.exact,
        "device_plus_host": both.hit_rate_bound,
        "host_full_tokens": int(host_full),
        "infinite_capacity": device.infinite_capacity_hit_rate,
    }


def served_grid(trace: Any, base: Any) -> list[dict[str, Any]]:
    """``kvplan run`` at every tombstoning × SWA-eviction pair over ``base`` (a SimConfig)."""
    import dataclasses

    from simulator.run import run_config

    rows = []
    for tomb in TOMBSTONES:
        for ev in SWA_EVICTIONS:
            row: dict[str, Any] = {"tombstone": tomb, "swa_eviction": ev}
            try:
                s = run_config(trace, dataclasses.replace(base, tombstone=tomb, swa_eviction=ev)).summary
                row.update(
                    cache_hit_rate=s["cache_hit_rate"],
                    ttft_p90=s["ttft"]["p90"],
                    failed=s["failed"],
                    error=None,
                )
            except KvplanError as exc:
                row.update(cache_hit_rate=None, ttft_p90=None, failed=None, error=_failure(exc))
            rows.append(row)
    return rows
