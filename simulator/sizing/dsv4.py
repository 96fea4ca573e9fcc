"""DeepSeek-V4 pool sizes (pool_configurator.py::DSV4PoolConfigurator, default CUDA path)."""

from __future__ import annotations

from dataclasses import dataclass

from simulator.errors import ConfigError
from simulator.kv_geometry import dsv4_indexer_bytes_per_token, dsv4_paged_bytes_per_token
from simulator.models import Dsv4Geometry, ModelSpec
from simulator.request_kv import ceil_page, floor_page
from simulator.server_args import ResolvedServerArgs
from simulator.sizing.limits import (
    check_positive,
    max_total_tokens_limit,
    resolve_max_num_reqs,
    validate_swa_pool_size,
)
from simulator.sizing.results import GpuMemoryPlan, PoolSizes

# deepseek_v4_memory_pool.py::get_compress_state_ring_size without speculative decoding.
_C4_RING = 8
_C128_RING = 128
# env SGLANG_DSV4_COMPRESS_STATE_DTYPE default float32.
_STATE_DTYPE_BYTES = 4


@dataclass(frozen=True)
class Dsv4Cells:
    """Bytes per token of DeepSeek-V4's pools on one rank."""

    n_layers: int
    n_c4: int
    n_c128: int
    attn_head_dim: int
    bytes_per_swa: float  # one SWA slot on every layer, plus the c4 compress state per slot
    compressed: float  # compressed KV + indexer per full token
    bytes_per_full: float  # compressed + ratio x SWA slot


def dsv4_cells(geom: Dsv4Geometry, page: int, ratio: float) -> Dsv4Cells:
    """_get_bytes_per_swa_token and _compressed_bytes_per_full_token of DSV4PoolConfigurator."""
    n_layers = len(geom.compress_ratios)
    n_c4, n_c128 = geom.layers_with_ratio(4), geom.layers_with_ratio(128)
    attn_head_dim = geom.qk_nope_head_dim + geom.qk_rope_head_dim
    indexer_bytes = dsv4_indexer_bytes_per_token(geom.index_head_dim)
    # _get_bytes_per_swa_token: one paged SWA slot on every layer, plus the c4 compress state
    # (kv + indexer, two fp32 rows of 2 x dim) priced per SWA slot via the ring.
    c4_state = 2 * 2 * attn_head_dim * _STATE_DTYPE_BYTES
    c4_index_state = 2 * 2 * geom.index_head_dim * _STATE_DTYPE_BYTES
    bytes_per_swa = (
        dsv4_paged_bytes_per_token(page) * n_layers + (_C4_RING / page) * (c4_state + c4_index_state) * n_c4
    )
    # _compressed_bytes_per_full_token per layer, summed: c4 = 1/4 paged KV + 1/4 indexer,
    # c128 = 1/128 paged KV; plus ratio x SWA slot.
    compressed = (0.25 * dsv4_paged_bytes_per_token(page // 4) + 0.25 * indexer_bytes) * n_c4 + (
        1 / 128
    ) * dsv4_paged_bytes_per_token(page // 128) * n_c128
    return Dsv4Cells(
        n_layers, n_c4, n_c128, attn_head_dim, bytes_per_swa, compressed, ratio * bytes_per_swa + compressed
    )


def c128_state_bytes(requests: int, c: Dsv4Cells) -> int:
    """_get_c128_state_fixed_bytes: the c128 compress-state ring of ``requests`` requests."""
    rows = (requests + 1) * _C128_RING + _C128_RING + 1
    rows = ceil_page(rows, 128)
    return rows * 2 * c.attn_head_dim * _STATE_DTYPE_BYTES * c.n_c128 if c.n_c128 else 0


def solve_dsv4(tokens: int, page: int, ratio: float, window: int | None) -> tuple[int, int]:
    """_compute_dsv4_sizes: (full, SWA) tokens for ``tokens`` full tokens."""
    f = floor_page(tokens, page)
    s = floor_page(int(f * ratio), page)
    validate_swa_pool_size(s, window, page)
    return f, s


def dsv4_host_tokens(args: ResolvedServerArgs, full: int, swa: int, notes: list[str]) -> tuple[int, int]:
    """hybrid_pool_assembler.py::_deepseek_v4_num_host_pages: pages x ratio, no --hicache-size."""
    if not args.hicache_enabled:
        return 0, 0
    if args.hicache_size > 0:
        raise ConfigError(
            "DeepSeek V4 HiCache currently does not support --hicache-size; use --hicache-ratio instead."
        )
    if args.hicache_auto_size_fraction is not None:
        # hicache_auto_size.py::_estimate_hicache_bytes has no DeepSeek-V4 pool type.
        raise ConfigError(
            "HiCache auto-sizing does not support DeepSeekV4TokenToKVPool; "
            "set --hicache-ratio or --hicache-size explicitly."
        )
    page = args.page_size
    notes.append("DeepSeek-V4 host pool bytes are not modelled (token counts only)")
    host_full = int(ceil_page(full, page) // page * args.hicache_ratio) * page
    host_swa = int(ceil_page(swa, page) // page * args.hicache_ratio) * page
    return host_full, host_swa


def size_dsv4_pools(
    model: ModelSpec, args: ResolvedServerArgs, budget: int, memory: GpuMemoryPlan | None
) -> PoolSizes:
    """DSV4PoolConfigurator for DeepSeek-V4 (not V4.1) on CUDA with the default flashmla backend:
    ratio sizing (the model override declares ratio 0.1, so cap mode does not apply), no
    speculative decoding, no HiSparse, no unified-KV ring, float32 compress state."""
    geom = model.dsv4
    assert geom is not None
    notes: list[str] = list(args.notes)
    page, ratio, window = args.page_size, args.swa_full_tokens_ratio, model.sliding_window
    if page % 128:
        raise ConfigError("page_size must be multiple of 128 for compressed attention")
    c = dsv4_cells(geom, page, ratio)
    # _get_c128_state_fixed_bytes with the requested max_running_requests (256 by default).
    assert args.max_running_requests is not None
    fixed = c128_state_bytes(max(1, args.max_running_requests), c)
    full = floor_page(int(max(budget - fixed, 0) / c.bytes_per_full), page)
    if full <= 0:
        check_positive(full, args)
    full, swa = solve_dsv4(full, page, ratio, window)
    profiled = full
    limit = max_total_tokens_limit(profiled, args, notes)
    if limit is not None:
        full, swa = solve_dsv4(limit, page, ratio, window)
        check_positive(full, args)
    max_running = resolve_max_num_reqs(full, args, notes)
    notes.append(
        "DeepSeek-V4 byte split is approximate: full_bytes = compressed KV + indexer, swa_bytes = SWA "
        "slots + c4 compress state, fixed_bytes = c128 compress state"
    )
    host_full, host_swa = dsv4_host_tokens(args, full, swa, notes)
    return PoolSizes(
        model=model.name,
        configurator="DSV4PoolConfigurator",
        hybrid_swa=True,
        tp_size=args.tp_size,
        page_size=page,
        swa_full_tokens_ratio=ratio,
        sliding_window=window,
        kv_dtype_bytes=args.kv_dtype_bytes,
        num_full_layers=c.n_c4 + c.n_c128,
        num_swa_layers=c.n_layers,
        full_bytes_per_token=round(c.compressed),
        swa_bytes_per_token=round(c.bytes_per_swa),
        cell_size=c.bytes_per_full,
        kv_budget_bytes=budget,
        profiled_max_total_tokens=profiled,
        capped_by_max_total_tokens=limit is not None,
        full_tokens=full,
        swa_tokens=swa,
        full_bytes=int(full * c.compressed),
        swa_bytes=int(swa * c.bytes_per_swa),
        fixed_bytes=fixed,
        max_running_requests=max_running,
        hicache_ratio=args.hicache_ratio,
        host_full_tokens=host_full,
        host_swa_tokens=host_swa,
        c4_tokens=full // 4,
        c128_tokens=full // 128,
        c4_state_pool_size=swa // page * _C4_RING,
        # finalize_with_max_running_requests: (requests + 1) x c128 ring.
        c128_state_pool_size=(max_running + 1) * _C128_RING,
        memory=memory,
        server_args=args,
        notes=tuple(notes),
    )
