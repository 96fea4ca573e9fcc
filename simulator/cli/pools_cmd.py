"""``kvplan pools``: SGLang's full / SWA / host KV pool sizes for a model, GPU and flags.

A thin wrapper over :mod:`simulator.pool_sizing`: parse flags (SGLang's names), pick the GPU
memory model or an explicit ``--kv-budget-gib``, print a table or one JSON object.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from simulator.cli.common import print_json, user_errors_exit
from simulator.gpus import get_gpu, gpu_names
from simulator.models import load_model, model_names
from simulator.pool_sizing import GIB, PoolSizes, compute_pool_sizes, compute_pool_sizes_from_budget
from simulator.server_args import KV_CACHE_DTYPES, ServerArgs

DEFAULT_GPU = "H100"


@user_errors_exit
def pools(
    model: Annotated[
        str,
        typer.Option(
            "--model",
            help=f"Preset ({', '.join(model_names())}), a Hugging Face config.json (or its "
            "directory), or a kvplan YAML/JSON model spec.",
        ),
    ],
    gpu: Annotated[
        str | None,
        typer.Option(
            "--gpu",
            help=f"GPU preset ({', '.join(gpu_names())}). Default {DEFAULT_GPU}; "
            "optional with --kv-budget-gib.",
        ),
    ] = None,
    tp: Annotated[int, typer.Option("--tp", "--tp-size", help="Tensor-parallel size (attention TP).")] = 1,
    page_size: Annotated[
        int | None, typer.Option("--page-size", help="Tokens per KV page (SGLang default: 1 on CUDA).")
    ] = None,
    swa_full_tokens_ratio: Annotated[
        float | None,
        typer.Option("--swa-full-tokens-ratio", help="SWA pool tokens / full pool tokens, in (0, 1]."),
    ] = None,
    mem_fraction_static: Annotated[
        float | None,
        typer.Option(
            "--mem-fraction-static", help="Weights + KV share of GPU memory (default: SGLang heuristic)."
        ),
    ] = None,
    max_total_tokens: Annotated[
        int | None, typer.Option("--max-total-tokens", help="Cap on full-pool tokens.")
    ] = None,
    max_running_requests: Annotated[
        int | None, typer.Option("--max-running-requests", help="Concurrent request cap.")
    ] = None,
    chunked_prefill_size: Annotated[
        int | None, typer.Option("--chunked-prefill-size", help="Prefill chunk (default by GPU memory).")
    ] = None,
    context_length: Annotated[
        int | None, typer.Option("--context-length", help="Override the model's context length.")
    ] = None,
    kv_cache_dtype: Annotated[
        str, typer.Option("--kv-cache-dtype", help=f"One of {', '.join(KV_CACHE_DTYPES)}.")
    ] = "auto",
    kv_budget_gib: Annotated[
        float | None,
        typer.Option("--kv-budget-gib", help="KV byte budget per rank in GiB; skips the GPU memory model."),
    ] = None,
    enable_hierarchical_cache: Annotated[
        bool, typer.Option("--enable-hierarchical-cache", help="Size HiCache host pools (ratio 2.0 default).")
    ] = False,
    hicache_ratio: Annotated[
        float | None,
        typer.Option("--hicache-ratio", help="Host pool tokens / device pool tokens (implies HiCache)."),
    ] = None,
    hicache_size: Annotated[
        float, typer.Option("--hicache-size", help="Host pool GB (1e9 B) per rank; overrides the ratio.")
    ] = 0.0,
    disable_hybrid_swa_memory: Annotated[
        bool, typer.Option("--disable-hybrid-swa-memory", help="Size every layer as full attention.")
    ] = False,
    disable_radix_cache: Annotated[
        bool,
        typer.Option("--disable-radix-cache", help="With --max-running-requests: request-cap SWA sizing."),
    ] = False,
    attention_backend: Annotated[
        str | None, typer.Option("--attention-backend", help="Override SGLang's default attention backend.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Print SGLang's full / SWA / host pool sizes for a model, GPU and flags."""
    spec = load_model(model)
    args = ServerArgs(
        tp_size=tp,
        page_size=page_size,
        swa_full_tokens_ratio=swa_full_tokens_ratio,
        mem_fraction_static=mem_fraction_static,
        max_total_tokens=max_total_tokens,
        max_running_requests=max_running_requests,
        chunked_prefill_size=chunked_prefill_size,
        context_length=context_length,
        kv_cache_dtype=kv_cache_dtype,
        disable_hybrid_swa_memory=disable_hybrid_swa_memory,
        disable_radix_cache=disable_radix_cache,
        attention_backend=attention_backend,
        enable_hierarchical_cache=enable_hierarchical_cache,
        hicache_ratio=hicache_ratio,
        hicache_size=hicache_size,
    )
    if kv_budget_gib is not None:
        gpu_spec = get_gpu(gpu) if gpu is not None else None
        sizes = compute_pool_sizes_from_budget(spec, int(kv_budget_gib * GIB), args, gpu_spec)
    else:
        sizes = compute_pool_sizes(spec, get_gpu(gpu or DEFAULT_GPU), args)
    if as_json:
        out = sizes.to_dict()
        out["gpu"] = None if sizes.memory is None else sizes.memory.gpu
        print_json(out)
    else:
        _print_table(sizes)


def _gib(n: int | float) -> str:
    return f"{n / GIB:,.2f} GiB"


def _print_table(p: PoolSizes) -> None:
    console = Console()
    head = f"{p.model}  tp={p.tp_size}  page={p.page_size}  {p.configurator}" + (
        f"  swa_full_tokens_ratio={p.swa_full_tokens_ratio:g}" if p.hybrid_swa else "  (one full pool)"
    )
    table = Table(title=head, title_justify="left")
    table.add_column("pool")
    table.add_column("tokens", justify="right")
    table.add_column("bytes", justify="right")
    table.add_column("per token", justify="right")
    full_label = "device full" if p.hybrid_swa else "device (all layers)"
    table.add_row(full_label, f"{p.full_tokens:,}", _gib(p.full_bytes), f"{p.full_bytes_per_token:,} B")
    if p.hybrid_swa:
        window = "" if p.sliding_window is None else f" (window {p.sliding_window})"
        table.add_row(
            f"device SWA{window}", f"{p.swa_tokens:,}", _gib(p.swa_bytes), f"{p.swa_bytes_per_token:,} B"
        )
    if p.fixed_bytes:
        table.add_row("device fixed state", "", _gib(p.fixed_bytes), "")
    if p.hicache_ratio or p.host_full_tokens:
        table.add_row("host full", f"{p.host_full_tokens:,}", _gib(p.host_full_bytes), "")
        if p.hybrid_swa:
            table.add_row("host SWA", f"{p.host_swa_tokens:,}", _gib(p.host_swa_bytes), "")
    console.print(table)
    lines = [f"KV budget per rank: {_gib(p.kv_budget_bytes)}  (cell {p.cell_size:,.1f} B per full token)"]
    if p.memory is not None:
        m = p.memory
        lines.append(
            f"GPU {m.gpu}: free before weights {_gib(m.preload_free_bytes)}, weights/rank "
            f"{_gib(m.weight_bytes_per_rank)}, mem_fraction_static {m.mem_fraction_static:.4g}, "
            f"slack {_gib(m.slack_bytes)}"
        )
    lines.append(f"max_running_requests: {p.max_running_requests:,}")
    if p.capped_by_max_total_tokens:
        lines.append(f"capped by --max-total-tokens (profiled {p.profiled_max_total_tokens:,})")
    for line in lines:
        console.print(line)
    for note in p.notes:
        console.print(f"[dim]- {note}[/dim]")
