"""``kvplan demo``: the main job on a bundled default, for a first look on a fresh machine.

Reads a bundled sample trace, sizes SGLang's full and SWA pools for a model preset on a GPU,
then serves the trace through the SWA radix cache with exactly those pools and the model's
window, and prints what a user asks first: what is in the trace, how the GPU memory splits,
and what prefix-cache hit rate SGLang would reach against the infinite-cache bound.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from simulator.cli.common import DEFAULT_TRACE as BUNDLED_TRACE
from simulator.cli.common import print_json, user_errors_exit


@user_errors_exit
def demo(
    trace: Annotated[
        Path, typer.Option("--trace", help="trace file (default: bundled Mooncake sample)")
    ] = BUNDLED_TRACE,
    model: Annotated[str, typer.Option("--model", help="model preset or config path")] = "gpt-oss-120b",
    gpu: Annotated[str, typer.Option("--gpu", help="GPU preset")] = "H200",
    tp: Annotated[int, typer.Option("--tp", help="tensor parallel size")] = 2,
    page_size: Annotated[int, typer.Option("--page-size")] = 64,
    swa_full_tokens_ratio: Annotated[float, typer.Option("--swa-full-tokens-ratio")] = 0.8,
    max_total_tokens: Annotated[int | None, typer.Option("--max-total-tokens")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Trace stats, SGLang pool sizing and a cache replay on a bundled default."""
    from rich.console import Console
    from rich.table import Table

    from simulator.cache_replay import CacheReplayConfig, replay
    from simulator.cli.cache_replay_cmd import workload_from_trace
    from simulator.gpus import get_gpu
    from simulator.models import load_model
    from simulator.pool_sizing import compute_pool_sizes
    from simulator.server_args import ServerArgs
    from traces import load_trace, trace_stats

    spec = load_model(model)
    sizes = compute_pool_sizes(
        spec,
        get_gpu(gpu),
        ServerArgs(
            tp_size=tp,
            page_size=page_size,
            swa_full_tokens_ratio=swa_full_tokens_ratio,
            max_total_tokens=max_total_tokens,
        ),
    )
    stats = trace_stats(load_trace(trace), page_size=page_size)
    window = spec.sliding_window or 0
    if not sizes.swa_tokens or not window:
        raise typer.BadParameter(f"{spec.name} has no separate SWA pool; the demo needs a hybrid SWA model")
    cfg = CacheReplayConfig(
        page_size=page_size, full_tokens=sizes.full_tokens, swa_tokens=sizes.swa_tokens, window=window
    )
    result = replay(workload_from_trace(trace, page_size, None), cfg)
    summary = result.summary
    out = dict(
        trace=str(trace),
        model=spec.name,
        gpu=gpu,
        tp=tp,
        page_size=page_size,
        window=window,
        requests=stats["requests"],
        infinite_cache_hit_rate=stats["infinite_cache_hit_rate"],
        full_tokens=sizes.full_tokens,
        swa_tokens=sizes.swa_tokens,
        cache_hit_rate=summary["hit_rate"],
        tombstones=summary["tree"]["tombstones"],
        evicted_full_tokens=summary["evictions"]["full_evicted"],
        evicted_swa_tokens=summary["evictions"]["swa_evicted"],
    )
    if as_json:
        print_json(out)
        return
    table = Table(title=f"kvplan demo: {trace.name} on {spec.name}, {gpu} x TP{tp}, page {page_size}")
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_row("requests", f"{out['requests']}")
    table.add_row("full pool (tokens)", f"{out['full_tokens']:,}")
    table.add_row("SWA pool (tokens)", f"{out['swa_tokens']:,}")
    table.add_row("sliding window", f"{window}")
    table.add_row("infinite-cache hit rate (bound)", f"{out['infinite_cache_hit_rate']:.4f}")
    table.add_row("SGLang 0.5.23 cache hit rate", f"{out['cache_hit_rate']:.4f}")
    table.add_row("SWA tombstones in tree at end", f"{out['tombstones']}")
    table.add_row(
        "evicted FULL / SWA tokens", f"{out['evicted_full_tokens']:,} / {out['evicted_swa_tokens']:,}"
    )
    Console().print(table)
