"""The numbers behind each figure of a report, as plain JSON-ready data (no plotting here).

Each function returns a dict that :mod:`simulator.reports.plots` draws and that the report
keeps as ``figures.json``, so a test compares a regenerated report's numbers, not its pixels.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from simulator.reports.recommend import metric
from simulator.reports.source import Point

# The heatmap's preferred axes (the two ratios SGLang leaves to the user), x first.
PREFERRED_AXES = ("swa_full_tokens_ratio", "hicache.hicache_ratio")
# Pareto metrics when no SLO names them: dotted path -> lower is better.
DEFAULT_PARETO = {"cache_hit_rate": False, "ttft.p90": True, "latency.p90": True}
USAGE_POINTS = 600  # time-series samples kept (evenly spaced rows)
CURVE_POINTS = 12


def flag_name(field: str) -> str:
    """The command-line spelling of a configuration field (``--swa-full-tokens-ratio``)."""
    from simulator.planner.grid import resolve_flag

    flag = resolve_flag(field)
    return flag.name if flag is not None else field


def heatmap_axes(axes: Sequence[str]) -> tuple[str | None, str | None, list[str]]:
    """(x field, y field, notes): the preferred axes where the sweep has them, else its other
    axes in order; a note for each preferred axis the sweep lacks and for axes held fixed."""
    from simulator.cli.server_flags import HICACHE_IN_SERVED_RUNS

    notes = []
    chosen = [a for a in PREFERRED_AXES if a in axes]
    for a in PREFERRED_AXES:
        if a not in axes:
            why = (
                ""
                if HICACHE_IN_SERVED_RUNS or not a.startswith("hicache.")
                else (" (served runs of this kvplan do not model HiCache yet)")
            )
            notes.append(f"{flag_name(a)} is not an axis of this sweep{why}: the heatmaps do not vary it")
    rest = [a for a in axes if a not in chosen]
    while len(chosen) < 2 and rest:
        chosen.append(rest.pop(0))
    if rest:
        names = ", ".join(flag_name(a) for a in rest)
        notes.append(f"other axes ({names}) are held at the recommended point's values in the heatmaps")
    x = chosen[0] if chosen else None
    y = chosen[1] if len(chosen) > 1 else None
    return x, y, notes


def heatmap(
    points: Sequence[Point], x: str | None, y: str | None, path: str, fixed: dict[str, Any]
) -> dict[str, Any]:
    """``path``'s value over the x × y grid, at the points whose other axes equal ``fixed``;
    None where the point was refused, failed requests, or does not exist."""
    sel = [p for p in points if all(p.config.get(k) == v for k, v in fixed.items())]
    xs = _values(sel, x)
    ys = _values(sel, y)
    z = [[None] * len(xs) for _ in ys]
    failed = [[False] * len(xs) for _ in ys]
    for p in sel:
        i, j = ys.index(p.config.get(y) if y else None), xs.index(p.config.get(x) if x else None)
        z[i][j] = metric(p.metrics, path)
        failed[i][j] = p.failed > 0
    return {
        "metric": path,
        "x": {"field": x, "flag": flag_name(x) if x else None, "values": xs},
        "y": {"field": y, "flag": flag_name(y) if y else None, "values": ys},
        "z": z,
        "failed": failed,
        "fixed": {flag_name(k): v for k, v in fixed.items()},
    }


def _values(points: Sequence[Point], field: str | None) -> list[Any]:
    if field is None:
        return [None]
    vals = {p.config.get(field) for p in points}
    return sorted(vals, key=lambda v: (v is not None, v if v is not None else 0))


def capacity_curve(trace: Any, config: dict[str, Any], sweep_points: list[dict[str, Any]]) -> dict[str, Any]:
    """Hit rate against full-pool capacity: the optimal bound and LRU's hit-ratio curve (batch 1,
    file order, the recommended configuration's page size and window; SWA pool assumed never
    short) at ``CURVE_POINTS`` geometric capacities, plus the sweep's served runs."""
    from simulator.cli.cache_replay_cmd import _TraceWorkload
    from simulator.planner.bound import bound_for
    from simulator.planner.bound_model import PoolModel, page_workload
    from simulator.planner.bound_report import curve_capacities
    from simulator.planner.hit_ratio_curve import curve_for
    from simulator.reports.configs import sim_config

    cfg = sim_config(config)
    sizes = cfg.pool_sizes()
    p = int(sizes.page_size)
    wl = page_workload(_TraceWorkload(trace, p), p)
    smallest = int(wl.peak.max() + 1) * p
    at_config = bound_for(wl, PoolModel(p, max(int(sizes.full_tokens), smallest)))
    largest = max([int(s["full_tokens"]) for s in sweep_points] + [int(at_config.working_set_tokens * 1.25)])
    caps = curve_capacities(smallest, largest, CURVE_POINTS, p)
    bounds = [bound_for(wl, PoolModel(p, int(c))) for c in caps]
    window_pages = -(-int(sizes.sliding_window) // p) if sizes.hybrid_swa else None
    track = window_pages if cfg.tombstone == "unified" else None
    lru = curve_for(wl, caps, track, cfg.swa_eviction == "none")
    return {
        "page_size": p,
        "capacity_tokens": [int(c) for c in caps],
        "bound": [b.hit_rate_bound for b in bounds],
        "bound_exact": [b.exact for b in bounds],
        "lru": [float(h) for h in lru.hit_rate],
        "infinite_capacity_hit_rate": at_config.infinite_capacity_hit_rate,
        "working_set_tokens": at_config.working_set_tokens,
        "recommended_full_tokens": int(sizes.full_tokens),
        "sweep": sweep_points,
    }


def usage_series(frames: dict[str, Any], pools: dict[str, Any]) -> dict[str, Any]:
    """Token usage over time of one run: the full and SWA pools (and the host pool when the run
    has one) after every prefill batch and decode step, thinned to ``USAGE_POINTS`` samples."""
    import pandas as pd

    parts = []
    dec = frames.get("decode_steps")
    if dec is not None and len(dec):
        parts.append(dec.rename(columns={"time_s": "t"}))
    pre = frames.get("prefill_batches")
    if pre is not None and len(pre):
        parts.append(pre.rename(columns={"t_end_s": "t"}))
    cols = ["full_token", "swa_token"]
    host = sorted(
        {c for part in parts for c in part.columns if c.startswith("host_") and c.endswith("token")}
    )
    if not parts:
        return {"t": [], "series": {c: [] for c in cols + host}, "capacity": {}}
    frame = pd.concat([p[["t", *[c for c in cols + host if c in p.columns]]] for p in parts])
    frame = frame.sort_values("t", kind="stable").reset_index(drop=True)
    keep = np.unique(np.linspace(0, len(frame) - 1, min(USAGE_POINTS, len(frame))).astype(np.int64))
    frame = frame.iloc[keep]
    series = {c: [int(v) for v in frame[c].fillna(0)] for c in cols + host if c in frame.columns}
    capacity = {k: int(pools[k]) for k in ("full_tokens", "swa_tokens") if pools.get(k)}
    return {"t": [float(t) for t in frame["t"]], "series": series, "capacity": capacity}


def pareto(
    points: Sequence[Point], costs: Sequence[float], path: str, lower_is_better: bool, labels: Sequence[str]
) -> dict[str, Any]:
    """Memory cost against one metric: every served point, and the frontier no point beats on
    both (points that failed requests are left out)."""
    from simulator.reports.recommend import pareto_front

    ok = [i for i, p in enumerate(points) if p.metrics is not None and p.failed == 0]
    values = [metric(points[i].metrics, path) for i in ok]
    front = pareto_front([costs[i] for i in ok], values, lower_is_better)
    return {
        "metric": path,
        "lower_is_better": lower_is_better,
        "cost": [costs[i] for i in ok],
        "value": values,
        "label": [labels[i] for i in ok],
        "frontier": [ok[k] for k in front],
        "frontier_cost": [costs[ok[k]] for k in front],
        "frontier_value": [values[k] for k in front],
    }
