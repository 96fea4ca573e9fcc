"""``kvplan demo``: the main job on a bundled default, for a first look on a fresh machine.

Reads a bundled sample trace, serves it through the simulated SGLang server (``run_config``, with
the same server flags and defaults as ``kvplan run``), and prints what a user asks first: what is
in the trace, how SGLang sizes the full and SWA pools, and what prefix-cache hit rate the server
reaches against the infinite-cache bound.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from simulator.cli.common import DEFAULT_TRACE as BUNDLED_TRACE
from simulator.cli.common import JsonOpt, print_json, user_errors_exit
from simulator.cli.failed_runs import MaxAbortFractionOpt, exit_if_failed
from simulator.cli.server_flags import ALL_FLAGS, server_options
from simulator.engine.config import SimConfig


@user_errors_exit
@server_options(*ALL_FLAGS)
def demo(
    trace: Annotated[
        Path, typer.Option("--trace", help="trace file (default: bundled Mooncake sample)")
    ] = BUNDLED_TRACE,
    as_json: JsonOpt = False,
    max_abort_fraction: MaxAbortFractionOpt = 0.0,
    *,
    server: dict[str, Any],
) -> None:
    """Trace stats, SGLang's pool sizing and the simulated server's cache hit rate on a bundled default."""
    from simulator.run import run_config
    from traces import load_trace, trace_stats

    cfg = SimConfig(**server)
    tr = load_trace(trace)
    result = run_config(tr, cfg, log_stream=sys.stderr if as_json else None)
    pools, counters = result.pools, result.counters
    stats = trace_stats(tr, page_size=pools["page_size"])
    out = dict(
        trace=str(trace),
        model=result.pool_sizes["model"],
        gpu=cfg.gpu,
        tp=cfg.tp,
        page_size=pools["page_size"],
        window=pools["window"] if pools["hybrid"] else None,
        requests=stats["requests"],
        infinite_cache_hit_rate=stats["infinite_cache_hit_rate"],
        full_tokens=pools["full_tokens"],
        swa_tokens=pools["swa_tokens"] if pools["hybrid"] else 0,
        served=result.summary["requests"],
        aborted=result.summary["aborted"],
        rejected=result.summary["rejected"],
        failure_reasons=result.summary["failure_reasons"],
        cache_hit_rate=result.summary["cache_hit_rate"],
        tombstones=counters["tree"]["tombstones"],
        evicted_full_tokens=counters["evictions"]["full_evicted"],
        evicted_swa_tokens=counters["evictions"]["swa_evicted"],
    )
    if as_json:
        from simulator.provenance import provenance

        print_json({**out, "provenance": provenance(tr, cfg.profile)})
    else:
        from simulator.engine.report import format_failures

        failures = format_failures(result.summary)
        if failures:
            typer.echo(failures)
        _print_table(out, trace)
    exit_if_failed(result.summary["failed"], result.summary["requests_submitted"], max_abort_fraction)


def _print_table(out: dict[str, Any], trace: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    title = (
        f"kvplan demo: {trace.name} on {out['model']}, {out['gpu']} x TP{out['tp']}, page {out['page_size']}"
    )
    table = Table(title=title)
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_row("requests", f"{out['requests']}")
    if out["aborted"] or out["rejected"]:
        table.add_row(
            "served / aborted / rejected", f"{out['served']} / {out['aborted']} / {out['rejected']}"
        )
    table.add_row("full pool (tokens)", f"{out['full_tokens']:,}")
    table.add_row("SWA pool (tokens)", f"{out['swa_tokens']:,}")
    table.add_row("sliding window", "none" if out["window"] is None else f"{out['window']}")
    table.add_row("infinite-cache hit rate (bound)", f"{out['infinite_cache_hit_rate']:.4f}")
    served = "" if not (out["aborted"] or out["rejected"]) else " (served requests only)"
    table.add_row(f"simulated SGLang 0.5.23 cache hit rate{served}", f"{out['cache_hit_rate']:.4f}")
    table.add_row("SWA tombstones in tree at end", f"{out['tombstones']}")
    table.add_row(
        "evicted FULL / SWA tokens", f"{out['evicted_full_tokens']:,} / {out['evicted_swa_tokens']:,}"
    )
    Console().print(table)
