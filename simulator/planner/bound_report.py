"""The ``kvplan bound`` result as plain data: pools from the server flags (as ``kvplan pools``
sizes them), the optimal bound, and optionally LRU's hit-ratio curve around the pool size."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

import simulator
from simulator.planner.bound import bound_for
from simulator.planner.bound_model import PoolModel, page_workload
from simulator.planner.hit_ratio_curve import curve_for
from simulator.provenance import provenance


def pool_model(server: dict[str, Any]) -> PoolModel:
    """The device pools SGLang sizes for these flags (``SimConfig.pool_sizes``), and HiCache's
    host full pool when the flags enable it."""
    from simulator.engine.config import SimConfig

    sizes = SimConfig(**server).pool_sizes()
    host = int(sizes.host_full_tokens or 0)
    if sizes.hybrid_swa:
        return PoolModel(
            sizes.page_size,
            int(sizes.full_tokens),
            int(sizes.swa_tokens),
            int(sizes.sliding_window),
            host_full_tokens=host,
        )
    return PoolModel(sizes.page_size, int(sizes.full_tokens), host_full_tokens=host)


def curve_capacities(smallest: int, largest: int, points: int, page_size: int) -> np.ndarray:
    """``points`` capacities, geometric between the two (tokens, whole pages, distinct)."""
    grid = np.geomspace(max(smallest, page_size), max(largest, smallest + page_size), points)
    return np.unique((grid // page_size).astype(np.int64) * page_size)


def bound_report(trace: Path, server: dict[str, Any], limit: int | None, curve_points: int) -> dict:
    """What ``kvplan bound --json`` prints."""
    from simulator.cli.cache_replay_cmd import workload_from_trace

    both = pool_model(server)
    pools = dataclasses.replace(both, host_full_tokens=0)  # the device tier's bound
    requests = workload_from_trace(trace, pools.page_size, limit)
    wl = page_workload(requests, pools.page_size)
    res = bound_for(wl, pools)
    out: dict[str, Any] = res.to_dict()
    if both.host_full_tokens:  # HiCache: a second bound, on device + host hits
        two = bound_for(wl, both)
        out["device_host"] = {
            k: getattr(two, k) for k in ("hit_rate_bound", "exact", "hit_tokens", "host_capacity_tokens")
        }
    out.update(
        requests=wl.n,
        page_size=pools.page_size,
        window=pools.window,
        trace=str(trace),
        kvplan_version=simulator.__version__,
    )
    out["provenance"] = provenance(requests.trace)
    if curve_points:
        p = pools.page_size
        smallest = int(wl.peak.max() + 1) * p  # below it a request cannot run to its end
        largest = max(pools.full_tokens, res.working_set_tokens)
        caps = curve_capacities(smallest, largest, curve_points, p)
        track = pools.window is not None and server.get("tombstone", "unified") == "unified"
        keep = server.get("swa_eviction") == "none"
        curve = curve_for(wl, caps, pools.window_pages if track else None, keep)
        out["lru_curve"] = curve.to_list()
    return out
