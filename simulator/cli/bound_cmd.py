"""``kvplan bound``: the offline optimal bound on a trace's prefix-cache hit rate for the pools a
model, GPU and server flags give, and optionally LRU's hit-ratio curve."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from simulator.cli.common import DEFAULT_TRACE, print_json, user_errors_exit
from simulator.cli.server_flags import CACHE_POLICY_FLAGS, POOL_FLAGS, server_options


@user_errors_exit
@server_options(*POOL_FLAGS, *CACHE_POLICY_FLAGS)
def bound(
    trace: Annotated[Path, typer.Option("--trace", help="any trace kvplan reads")] = DEFAULT_TRACE,
    limit: Annotated[int | None, typer.Option("--limit", help="only the first N requests")] = None,
    lru_curve: Annotated[
        bool, typer.Option("--lru-curve", help="add LRU's hit rate against full-pool capacity")
    ] = False,
    curve_points: Annotated[int, typer.Option("--curve-points", help="capacities on the curve")] = 16,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    *,
    server: dict[str, Any],
) -> None:
    """An upper bound, often the exact optimum, on the prefix-cache hit rate any eviction policy
    reaches on --trace (batch 1, file order, device pools)."""
    from simulator.planner.bound_report import bound_report

    out = bound_report(trace, server, limit=limit, curve_points=curve_points if lru_curve else 0)
    if as_json:
        print_json(out)
        return
    typer.echo(
        f"hit-rate bound {out['hit_rate_bound']:.4f} ({'exact optimum' if out['exact'] else 'upper bound'}) "
        f"at {out['capacity_tokens']:,} full tokens"
        + (f" / {out['swa_capacity_tokens']:,} SWA tokens" if out["swa_capacity_tokens"] else "")
    )
    typer.echo(
        f"unbounded pools: {out['infinite_capacity_hit_rate']:.4f}; working set "
        f"{out['working_set_tokens']:,} tokens; {out['aborted']} of {out['requests']} requests cannot fit"
    )
    if "device_host" in out:  # HiCache: the bound on device + host hits
        two = out["device_host"]
        typer.echo(
            f"with HiCache: {two['hit_rate_bound']:.4f} (upper bound) on device + host hits, "
            f"host {two['host_capacity_tokens']:,} tokens"
        )
    for point in out.get("lru_curve", []):
        typer.echo(f"  LRU at {point['capacity_tokens']:>12,} tokens: {point['hit_rate']:.4f}")
