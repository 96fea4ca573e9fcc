"""``kvplan sweep``: a grid of server flags and policies over one trace (docs/planner.md).

The command is a thin shell over :func:`simulator.planner.run_sweep`: it reads the trace, turns
``--grid FLAG=SPEC`` into axes (or takes the default grid), picks the backend (``-j``,
``--dask``) and prints each point as it completes in grid order, then a summary.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from simulator.cli.common import DEFAULT_TRACE, JsonOpt, ProgressOpt, print_json, user_errors_exit
from simulator.cli.server_flags import ALL_FLAGS, server_options
from simulator.cli.trace_options import (
    BlockSizeOpt,
    FormatOpt,
    LimitOpt,
    RequestRateOpt,
    ThinkTimeOpt,
    TimeScaleOpt,
)
from simulator.engine.config import SimConfig

_D = SimConfig()
# --log-decode prints per step: meaningless from many workers at once.
SWEEP_FLAGS = tuple(f for f in ALL_FLAGS if f != "log_decode")
# The columns of the text table, by dotted path into the run's summary.
TABLE_METRICS = ("cache_hit_rate", "ttft.p90", "latency.p90", "failed")


def default_jobs() -> int:
    """``-j``'s default: one worker per CPU this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@user_errors_exit
@server_options(*SWEEP_FLAGS)
def sweep(
    trace: Annotated[
        Path, typer.Option("--trace", help="any trace kvplan reads (default: the bundled Mooncake sample)")
    ] = DEFAULT_TRACE,
    grid: Annotated[
        list[str] | None,
        typer.Option(
            "--grid",
            help="an axis FLAG=SPEC: any server flag or policy (and --request-rate, --time-scale, "
            "--think-time); SPEC is a comma list of values and start:stop:step ranges (inclusive), "
            "'none' = unset; repeat for more axes. Default: --swa-full-tokens-ratio 0.1:1.0:0.1 "
            "x --hicache-ratio none,2,4",
        ),
    ] = None,
    seeds: Annotated[
        int,
        typer.Option("--seeds", help="run each point at N seeds (--seed .. --seed+N-1): mean, 95% interval"),
    ] = 1,
    jobs: Annotated[
        int | None,
        typer.Option(
            "-j", "--jobs", help="local worker processes (default: one per CPU; 1 = in this process)"
        ),
    ] = None,
    dask: Annotated[
        str | None,
        typer.Option(
            "--dask", help="run on the Dask cluster at ADDRESS, or 'local' for a LocalCluster of -j workers"
        ),
    ] = None,
    store: Annotated[
        Path | None,
        typer.Option(
            "--store", help="result store directory: each run saved as it finishes; a rerun resumes"
        ),
    ] = None,
    compact: Annotated[
        bool, typer.Option("--compact", help="after the sweep, union the store's run files into one")
    ] = False,
    fmt: FormatOpt = None,
    block_size: BlockSizeOpt = None,
    limit: LimitOpt = None,
    time_scale: TimeScaleOpt = _D.time_scale,
    request_rate: RequestRateOpt = _D.request_rate,
    think_time: ThinkTimeOpt = _D.think_time_s,
    seed: Annotated[int, typer.Option("--seed", help="the first seed")] = _D.seed,
    as_json: JsonOpt = False,
    progress: ProgressOpt = True,
    *,
    server: dict[str, Any],
) -> None:
    """Run TRACE at every point of a grid of server flags and policies; store and print the results."""
    from simulator.planner import ResultStore, SweepSpec, make_backend, run_sweep
    from traces import load_trace

    workload = dict(time_scale=time_scale, request_rate=request_rate, think_time_s=think_time)
    base = SimConfig(**server, **workload, seed=seed)
    axes, notes = _axes(grid, {**server, **workload})
    for note in notes:
        typer.echo(f"kvplan: note: {note}", err=True)
    backend = make_backend(default_jobs() if jobs is None else jobs, dask)
    result_store = None if store is None else ResultStore(store)
    tr = load_trace(trace, fmt=fmt, block_size=block_size)
    if limit is not None:
        tr = tr.head(limit)
    spec = SweepSpec(base, tuple(axes), seeds=seeds, notes=tuple(notes))
    records: list[dict[str, Any]] = []
    summary = run_sweep(
        tr,
        spec,
        backend=backend,
        store=result_store,
        on_point=print_json if as_json else records.append,
        progress=progress,
    )
    if result_store is not None and compact:
        result_store.compact()
    if as_json:
        print_json({"summary": summary})
    else:
        typer.echo(format_table(records, list(summary["axes"])))
        typer.echo(format_summary(summary))


def _axes(grid: list[str] | None, fixed: dict[str, Any]) -> tuple[list[Any], list[str]]:
    from simulator.planner.grid import check_axes, default_axes, parse_axis

    axes, notes = ([parse_axis(g) for g in grid], []) if grid else default_axes()
    check_axes(axes, fixed)
    return axes, notes


def _metric(metrics: dict[str, Any] | None, path: str) -> str:
    value: Any = metrics
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def format_table(records: list[dict[str, Any]], flags: list[str]) -> str:
    """One line per point: the axis values, then the main metrics (or the error)."""
    header = ["point", *flags, *TABLE_METRICS]
    rows = [header]
    for r in records:
        values = [str(r["flags"][f]) for f in flags]
        tail = [_metric(r["metrics"], m) for m in TABLE_METRICS] if r["error"] is None else [r["error"]]
        rows.append([str(r["point"]), *values, *tail])
    # An error row's message is its last cell: it does not widen the metric columns.
    full = [row for row in rows if len(row) == len(header)]
    widths = [max(len(row[i]) for row in full) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip() for row in rows
    )


def format_summary(summary: dict[str, Any]) -> str:
    """The sweep's closing lines: counts, backend, store, provenance, notes."""
    prov = summary["provenance"]
    lines = [
        f"{summary['points']} points x {summary['seeds']} seeds: {summary['ran']} runs executed, "
        f"{summary['reused']} taken from the store, {summary['errors']} points refused; "
        f"{summary['elapsed_s']:.1f} s on {summary['backend']} ({summary['workers']} workers)",
        f"store: {summary['store'] or '(none: results not kept)'}",
        f"kvplan {prov['kvplan_version']} ({prov['kvplan_source_hash']}), SGLang {prov['sglang_version']} "
        f"modelled, trace {prov['trace_hash'][:16]}, profile {prov['profile']['name']} "
        f"({prov['profile']['hash'][:16]})",
    ]
    lines += [f"note: {n}" for n in summary["notes"]]
    return "\n".join(lines)
