"""Capacity analysis in a few calls, for notebooks/capacity_analysis.ipynb: load a trace, sweep a
grid into a result store, and assemble what a report shows (the recommendation, the figures'
data, the top configurations). The notebook only calls these and plots.

    trace = load(TRACE, limit=60)
    source = sweep(trace, SimConfig(tp=8, page_size=64), ["swa-full-tokens-ratio=0.1:0.9:0.4"], store)
    data = analyse(source, slo="ttft.p90<=2.0")
    print(data["recommended"]["launch_flags"])
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from simulator.reports.data import ReportOptions, assemble
from simulator.reports.source import ReportSource, load_source


def load(path: str | Path, limit: int | None = None) -> Any:
    """A trace (any format kvplan reads), cut to its first ``limit`` requests."""
    from traces import load_trace

    trace = load_trace(path)
    return trace.head(limit) if limit is not None else trace


def sweep(trace: Any, base: Any, grid: Sequence[str], store: str | Path, jobs: int = 1) -> ReportSource:
    """Run ``base`` (a SimConfig) over the ``--grid``-style axes into the result store ``store``
    (resumable: a finished run is not run again), and read it back."""
    from simulator.planner import ResultStore, SweepSpec, make_backend, parse_axis, run_sweep

    spec = SweepSpec(base, tuple(parse_axis(g) for g in grid))
    run_sweep(trace, spec, backend=make_backend(jobs, None), store=ResultStore(store))
    return load_source(store)


def analyse(source: ReportSource, slo: str | None = None, trace: str | Path | None = None) -> dict[str, Any]:
    """What the report of ``source`` would show (``figures.json``'s content)."""
    return assemble(source, ReportOptions(slo=slo, trace=None if trace is None else Path(trace)))


def points_table(source: ReportSource) -> Any:
    """Every point as one row of a DataFrame: its axis values and main metrics."""
    import pandas as pd

    from simulator.reports.figures import flag_name
    from simulator.reports.recommend import metric

    rows = []
    for p in source.points:
        row = {flag_name(a): p.config.get(a) for a in source.axes}
        for m in ("cache_hit_rate", "ttft.p90", "latency.p90", "failed"):
            row[m] = metric(p.metrics, m)
        row["error"] = p.error
        rows.append(row)
    return pd.DataFrame(rows)
