"""``kvplan pools``: SGLang's full / SWA / host KV pool sizes for a model, GPU and flags.

A thin wrapper over :mod:`simulator.pool_sizing`: the shared server flags (``server_flags.py``)
plus the sizing-only ones, the GPU memory model or an explicit ``--kv-budget-gib``, then a table
or one JSON object.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from simulator.cli.common import print_json, user_errors_exit
from simulator.cli.server_flags import POOL_FLAGS, choice_check, server_options
from simulator.engine.config import SimConfig
from simulator.hicache_args import ResolvedHiCache, resolve_hicache_args
from simulator.pool_sizing import GIB, PoolSizes
from simulator.server_args import KV_CACHE_DTYPES
from simulator.sglang_bugs import warn_if_sglang_misbehaves


@user_errors_exit
@server_options(*POOL_FLAGS)
def pools(
    context_length: Annotated[
        int | None, typer.Option("--context-length", help="Override the model's context length.")
    ] = None,
    kv_cache_dtype: Annotated[
        str,
        typer.Option(
            "--kv-cache-dtype",
            help=f"One of {', '.join(KV_CACHE_DTYPES)}.",
            callback=choice_check(lambda: list(KV_CACHE_DTYPES), "--kv-cache-dtype"),
        ),
    ] = "auto",
    disable_hybrid_swa_memory: Annotated[
        bool, typer.Option("--disable-hybrid-swa-memory", help="Size every layer as full attention.")
    ] = False,
    attention_backend: Annotated[
        str | None, typer.Option("--attention-backend", help="Override SGLang's default attention backend.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    *,
    server: dict[str, Any],
) -> None:
    """Print SGLang's full / SWA / host pool sizes for a model, GPU and flags."""
    config = SimConfig(**server)
    hicache = resolve_hicache_args(config.hicache, disable_radix_cache=config.disable_radix_cache)
    sizes = config.pool_sizes(
        context_length=context_length,
        kv_cache_dtype=kv_cache_dtype,
        disable_hybrid_swa_memory=disable_hybrid_swa_memory,
        attention_backend=attention_backend,
    )
    resolved = sizes.server_args
    if resolved is not None:
        warn_if_sglang_misbehaves(
            sizes.swa_tokens, resolved.chunked_prefill_size, sizes.page_size, sizes.hybrid_swa
        )
    if as_json:
        out = sizes.to_dict()
        out["gpu"] = None if sizes.memory is None else sizes.memory.gpu
        if hicache.enabled:
            out["hicache"] = hicache_summary(sizes, hicache)
        from simulator.provenance import provenance

        out["provenance"] = provenance(profile_path=config.profile)
        print_json(out)
    else:
        _print_table(sizes)
        if hicache.enabled:
            _print_hicache(sizes, hicache)


def hicache_summary(p: PoolSizes, h: ResolvedHiCache) -> dict[str, Any]:
    """The resolved HiCache settings and the host RAM they need per GPU (one TP rank per GPU)."""
    out: dict[str, Any] = {
        "host_memory_mode": h.host_memory_mode,
        "write_policy": h.write_policy,
        "write_through_threshold": h.write_through_threshold,
        "io_backend": h.io_backend,
        "mem_layout": h.mem_layout,
        "host_full_tokens": p.host_full_tokens,
        "host_swa_tokens": p.host_swa_tokens,
        "host_bytes_per_gpu": p.host_bytes,
        "host_bytes_per_server": p.host_bytes * p.tp_size,
        "storage": None,
        "notes": list(h.notes),
    }
    if h.storage is not None:
        out["storage"] = {
            **dataclasses.asdict(h.storage),
            "prefetch_policy": h.prefetch_policy,
            "prefetch_threshold": h.prefetch_threshold,
            "prefetch_timeout_base": h.prefetch_timeout_base,
            "prefetch_timeout_per_ki_token": h.prefetch_timeout_per_ki_token,
        }
    return out


def _print_hicache(p: PoolSizes, h: ResolvedHiCache) -> None:
    console = Console()
    console.print(
        f"HiCache: {h.write_policy}, io {h.io_backend}, layout {h.mem_layout}, host memory "
        f"{h.host_memory_mode}; host RAM per GPU {_gib(p.host_bytes)} "
        f"({_gib(p.host_bytes * p.tp_size)} for {p.tp_size} GPU(s))"
    )
    s = h.storage
    if s is not None:
        cap = "unlimited" if not s.capacity_bytes else f"{s.capacity_bytes / 1e9:,.1f} GB"
        console.print(
            f"L3 {s.backend}: capacity {cap}, read {s.read_gbps:g} GB/s, write {s.write_gbps:g} GB/s, "
            f"{s.op_latency_s * 1e6:g} us per op; prefetch {h.prefetch_policy}, threshold "
            f"{h.prefetch_threshold} tokens, timeout {h.prefetch_timeout_base:g} s + "
            f"{h.prefetch_timeout_per_ki_token:g} s per 1024 tokens"
        )
    for note in h.notes:
        console.print(f"[dim]- {note}[/dim]")


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
