"""``kvplan report``: a sweep store or plan directory as report.md and a self-contained
index.html with figures (docs/reports.md). The work is :func:`simulator.reports.build_report`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from simulator.cli.common import JsonOpt, print_json, user_errors_exit
from simulator.cli.trace_options import BlockSizeOpt, FormatOpt
from simulator.planner.plan_cost import DEFAULT_GPU_PRICE, DEFAULT_HOST_PRICE


@user_errors_exit
def report(
    source: Annotated[Path, typer.Argument(help="a result store (kvplan sweep --store) or a plan directory")],
    out: Annotated[Path, typer.Option("-o", "--out", help="the report directory (replaced as a whole)")],
    slo: Annotated[
        str | None,
        typer.Option(
            "--slo", help='choose by SLOs, e.g. "ttft.p90<=1.0,cache_hit_rate>=0.6" (default: plan.json\'s)'
        ),
    ] = None,
    trace: Annotated[
        Path | None, typer.Option("--trace", help="the sweep's trace, if not at the path the store recorded")
    ] = None,
    fmt: FormatOpt = None,
    block_size: BlockSizeOpt = None,
    gpu_price: Annotated[
        float, typer.Option("--gpu-price", help="USD per GiB-hour of GPU KV memory")
    ] = DEFAULT_GPU_PRICE,
    host_price: Annotated[
        float, typer.Option("--host-price", help="USD per GiB-hour of host KV memory")
    ] = DEFAULT_HOST_PRICE,
    top: Annotated[int, typer.Option("--top", help="rows of the top-configurations table")] = 10,
    as_json: JsonOpt = False,
) -> None:
    """Write SOURCE's report to --out: heatmaps, hit rate against capacity with the optimal bound,
    token usage over time, Pareto frontiers, the top configurations and the launch flags."""
    from simulator.reports import Prices, ReportOptions, build_report

    opts = ReportOptions(
        slo=slo, prices=Prices(gpu_price, host_price), trace=trace, fmt=fmt, block_size=block_size, top=top
    )
    data = build_report(source, out, opts)
    rec = data["recommended"]
    if as_json:
        print_json({"report": str(out), "recommended": rec, "notes": data["notes"]})
        return
    typer.echo(f"report written to {out}/index.html and {out}/report.md")
    typer.echo(f"recommended: {rec['launch_flags']}")
    for note in data["notes"]:
        typer.echo(f"note: {note}")
