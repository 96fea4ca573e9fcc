"""KV pool sizes exactly as SGLang 0.5.23 computes them.

The pipeline, with the SGLang code it mirrors:

1. GPU memory -> KV byte budget (``mem_cache/kv_cache_configurator.py::_profile_available_bytes``).
2. Budget -> pool sizes by the configurator SGLang would pick
   (``model_executor/pool_configurator.py::create_memory_pool_configurator``):
   ``HybridSWAPoolConfigurator`` (ratio split), ``SWARequestCapPoolConfigurator`` (radix cache off
   + --max-running-requests), ``DefaultPoolConfigurator`` (one pool; Gemma 2/3 and
   --disable-hybrid-swa-memory) or ``DSV4PoolConfigurator`` (DeepSeek-V4).
3. ``--max-total-tokens`` cap and re-derivation (``KVCacheConfigurator.config_from_budget`` /
   ``_apply_token_constraints``), the SWA floor check (``validate_swa_pool_size``).
4. ``--max-running-requests`` resolution (``KVCacheConfigurator.resolve_max_num_reqs``).
5. HiCache host pools (``mem_cache/pool_host/base.py::HostKVCache.__init__``,
   ``pool_host/mha.py::get_size_per_token``,
   ``hybrid_cache/hybrid_pool_assembler.py::build_hybrid_swa_stack`` / ``_split_hicache_size``).

The simulator calls :func:`compute_pool_sizes` (GPU memory model) or
:func:`compute_pool_sizes_from_budget` (explicit KV byte budget).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from policies.swa_eviction import SWA_EVICTION_INTERVAL
from simulator.errors import ConfigError
from simulator.gpus import GpuSpec
from simulator.models import ModelSpec
from simulator.server_args import ResolvedServerArgs, ServerArgs, resolve_server_args

__all__ = [
    "GIB",
    "GpuMemoryPlan",
    "PoolSizes",
    "compute_pool_sizes",
    "compute_pool_sizes_from_budget",
    "plan_gpu_memory",
]

GIB = 1 << 30
# env SGLANG_VLM_CACHE_SIZE_MB default (environ.py), reserved out of the KV budget for VLMs.
VLM_CACHE_SIZE_MB = 100
# pool_host/base.py::HICACHE_HOST_MEMORY_RESERVE_BYTES.
HICACHE_HOST_MEMORY_RESERVE = 10 * GIB


@dataclass(frozen=True, kw_only=True)
class GpuMemoryPlan:
    """How one rank's GPU memory turns into the KV byte budget.

    ``kv_budget_bytes = int((free_after_weights - preload_free * (1 - f) - mm_reservation) GiB)``,
    with ``free_after_weights = preload_free - weight_bytes / tp``. The weights-per-rank figure is
    an approximation: it assumes every weight shards evenly over TP ranks (replicated norms,
    routers and embeddings, and any activation buffers allocated during load, are ignored).
    """

    gpu: str
    tp_size: int
    memory_total_bytes: int
    preload_free_bytes: int
    weight_bytes_per_rank: int
    free_after_weights_bytes: int
    mem_fraction_static: float
    slack_bytes: int
    mm_reservation_bytes: int
    kv_budget_bytes: int


@dataclass(frozen=True, kw_only=True)
class PoolSizes:
    """Device and host KV pool sizes of one rank, as SGLang would allocate them.

    Token counts are what SGLang logs as ``full_layer_tokens`` / ``swa_layer_tokens`` (the
    allocator sizes). ``full_bytes`` / ``swa_bytes`` are the device bytes the pools allocate,
    including SGLang's one padding page per pool (each layer buffer has ``size + page_size`` rows).
    For a non-hybrid model there is one pool: ``swa_tokens`` is 0 and ``full_*`` describe it.
    ``cell_size`` is bytes per full-pool token (full layers plus ``ratio`` x SWA layers).
    """

    model: str
    configurator: str
    hybrid_swa: bool
    tp_size: int
    page_size: int
    swa_full_tokens_ratio: float
    sliding_window: int | None
    kv_dtype_bytes: int
    num_full_layers: int
    num_swa_layers: int
    full_bytes_per_token: int
    swa_bytes_per_token: int
    cell_size: float
    kv_budget_bytes: int
    profiled_max_total_tokens: int
    capped_by_max_total_tokens: bool
    full_tokens: int
    swa_tokens: int
    full_bytes: int
    swa_bytes: int
    fixed_bytes: int = 0
    max_running_requests: int
    hicache_ratio: float = 0.0
    host_full_tokens: int = 0
    host_swa_tokens: int = 0
    host_full_bytes: int = 0
    host_swa_bytes: int = 0
    # DeepSeek-V4 compressed pools (0 elsewhere).
    c4_tokens: int = 0
    c128_tokens: int = 0
    c4_state_pool_size: int = 0
    c128_state_pool_size: int = 0
    memory: GpuMemoryPlan | None = None
    server_args: ResolvedServerArgs | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def device_bytes(self) -> int:
        return self.full_bytes + self.swa_bytes + self.fixed_bytes

    @property
    def host_bytes(self) -> int:
        return self.host_full_bytes + self.host_swa_bytes

    def to_dict(self) -> dict[str, Any]:
        """Flat JSON-friendly dict (nested memory plan and resolved args as sub-objects)."""
        out = asdict(self)
        out["notes"] = list(self.notes)
        out["device_bytes"] = self.device_bytes
        out["host_bytes"] = self.host_bytes
        if self.server_args is not None:
            out["server_args"]["notes"] = list(self.server_args.notes)
        return out


# --------------------------------------------------------------------------------------------------
# Public entry points
# --------------------------------------------------------------------------------------------------


def compute_pool_sizes(model: ModelSpec, gpu: GpuSpec, server_args: ServerArgs) -> PoolSizes:
    """Pool sizes for ``model`` on ``gpu`` under ``server_args``, from the GPU memory model."""
    resolved = resolve_server_args(model, gpu, server_args)
    memory = plan_gpu_memory(model, gpu, resolved)
    return _size_pools(model, resolved, memory.kv_budget_bytes, memory, _host_memory(gpu))


def compute_pool_sizes_from_budget(
    model: ModelSpec, kv_budget_bytes: int, server_args: ServerArgs, gpu: GpuSpec | None = None
) -> PoolSizes:
    """Pool sizes from an explicit per-rank KV byte budget (what SGLang's ``available_bytes``
    would be), skipping the GPU memory model. ``gpu`` only feeds default resolution (attention
    backend -> page size) when given."""
    if kv_budget_bytes <= 0:
        raise ConfigError(f"KV budget must be positive, got {kv_budget_bytes} bytes")
    resolved = resolve_server_args(model, gpu, server_args)
    return _size_pools(model, resolved, int(kv_budget_bytes), None, _host_memory(gpu))


def _host_memory(gpu: GpuSpec | None) -> int | None:
    if gpu is None or gpu.host_memory_per_node_gb is None:
        return None
    return int(gpu.host_memory_per_node_gb * 1e9)


def plan_gpu_memory(model: ModelSpec, gpu: GpuSpec, resolved: ResolvedServerArgs) -> GpuMemoryPlan:
    """kv_cache_configurator.py::_profile_available_bytes, in SGLang's GB-float arithmetic:
    ``rest = available_now - pre_model_load * (1 - mem_fraction_static) - mm_reservation``."""
    if model.weight_bytes is None:
        raise ConfigError(
            f"model {model.name!r} has no weight size; give weight_bytes in the spec, put "
            "model.safetensors.index.json next to config.json, or pass --kv-budget-gib"
        )
    assert resolved.mem_fraction_static is not None  # resolved with a GPU
    fraction = resolved.mem_fraction_static
    pre = gpu.preload_free_bytes
    weights = model.weight_bytes // resolved.tp_size
    free_after = pre - weights
    pre_gb = pre / GIB
    available_gb = free_after / GIB
    slack_gb = pre_gb * (1 - fraction)
    # kv_cache_configurator.py::mm_runtime_reservation_gb (CPU feature transport, the default).
    mm_gb = VLM_CACHE_SIZE_MB / 1024 if model.is_multimodal else 0.0
    rest_gb = available_gb - slack_gb - mm_gb
    if rest_gb <= 0:
        minimum = 1 - available_gb / pre_gb
        raise ConfigError(
            f"Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static={fraction:.4g} "
            f"({model.name}, {weights / GIB:.1f} GiB weights per rank on {gpu.name}, tp={resolved.tp_size}). "
            f"Raise --mem-fraction-static above {math.ceil(minimum * 1000) / 1000:.3f} or use more GPUs"
        )
    return GpuMemoryPlan(
        gpu=gpu.name,
        tp_size=resolved.tp_size,
        memory_total_bytes=gpu.memory_total_bytes,
        preload_free_bytes=pre,
        weight_bytes_per_rank=weights,
        free_after_weights_bytes=free_after,
        mem_fraction_static=fraction,
        slack_bytes=int(slack_gb * GIB),
        mm_reservation_bytes=int(mm_gb * GIB),
        kv_budget_bytes=int(rest_gb * GIB),
    )


# --------------------------------------------------------------------------------------------------
# Sizing
# --------------------------------------------------------------------------------------------------


def _floor_page(x: int, page: int) -> int:
    return (x // page) * page


def _ceil_align(x: int, page: int) -> int:
    return -(-x // page) * page


@dataclass(frozen=True)
class _Split:
    """One configurator's answer before the token cap: tokens of each pool (and DSV4 extras)."""

    max_total: int  # SGLang's max_total_num_tokens (full tokens; SWA tokens when all-SWA)
    full: int
    swa: int


def _size_pools(
    model: ModelSpec,
    args: ResolvedServerArgs,
    budget: int,
    memory: GpuMemoryPlan | None,
    host_memory: int | None,
) -> PoolSizes:
    if model.is_dsv4:
        return _size_dsv4(model, args, budget, memory)
    notes: list[str] = list(args.notes)
    tp, page, ratio, kvb = args.tp_size, args.page_size, args.swa_full_tokens_ratio, args.kv_dtype_bytes

    if args.hybrid_swa:
        # pool_configurator.py::HybridSWAPoolConfigurator.__init__ (MHA): per-layer bytes per token
        # = heads_per_rank x (k_dim + v_dim) x dtype bytes; heads floored at 1 per rank.
        f_layer = model.kv_heads_per_rank(tp) * (model.head_dim + model.v_head_dim) * kvb
        s_layer = model.swa_kv_heads_per_rank(tp) * (model.swa_head_dim + model.swa_v_head_dim) * kvb
        n_full, n_swa = model.num_full_layers, model.num_swa_layers
    else:
        # pool_configurator.py::DefaultPoolConfigurator._compute_cell_size: every layer priced
        # with the full-attention geometry.
        f_layer = model.kv_heads_per_rank(tp) * (model.head_dim + model.v_head_dim) * kvb
        s_layer = 0
        n_full, n_swa = model.num_layers, 0
    full_cell = f_layer * n_full
    swa_cell = s_layer * n_swa
    window = model.sliding_window if args.hybrid_swa else None

    cap_mode = (
        args.hybrid_swa
        and args.disable_radix_cache
        and args.max_running_requests is not None
        and args.chunked_prefill_size > 0
        and window is not None
        and n_full > 0
    )
    if not args.hybrid_swa:
        configurator = "DefaultPoolConfigurator"
        cell: float = float(full_cell)
    elif cap_mode:
        configurator = "SWARequestCapPoolConfigurator"
        cell = float(full_cell)
    else:
        configurator = "HybridSWAPoolConfigurator"
        # _recompute_cell_size: all-SWA prices SWA tokens with no ratio.
        cell = float(swa_cell) if n_full == 0 else full_cell + ratio * swa_cell

    def solve(max_total: int) -> _Split:
        """calculate_pool_sizes_from_max_tokens of the chosen configurator."""
        if not args.hybrid_swa:
            t = _floor_page(max_total, page)
            return _Split(t, t, 0)
        if cap_mode:
            swa = _ceil_align(swa_cap, page)
            return _Split(_floor_page(max_total, page), _floor_page(max_total, page), min(swa, max_total))
        if n_full == 0:
            swa = _floor_page(max_total, page)
            return _Split(swa, 0, swa)
        # HybridSWAPoolConfigurator._solve_pool_sizes
        full = _floor_page(max_total, page)
        swa = _floor_page(int(full * ratio), page)
        _validate_swa_pool_size(swa, window, page)
        return _Split(full, full, swa)

    swa_cap = 0
    if cap_mode:
        # pool_configurator.py::compute_swa_request_cap (no speculative decoding, overlap on):
        # per request = window + eviction interval + page (eviction padding) + page (decode alloc).
        assert window is not None and args.max_running_requests is not None
        per_request = window + SWA_EVICTION_INTERVAL * 1 + page + page
        swa_cap = per_request * max(1, args.max_running_requests) + 2 * args.chunked_prefill_size + page
        swa_tokens = _ceil_align(swa_cap, page)
        fixed_swa = swa_tokens * swa_cell
        full = (int((budget - fixed_swa) // full_cell) // page) * page
        if full <= 0:
            raise ConfigError(
                f"SWA pool cap ({swa_tokens} tokens, {fixed_swa / GIB:.2f} GiB) leaves no room for the full "
                f"KV pool within the available {budget / GIB:.2f} GiB. Reduce --max-running-requests or "
                "increase --mem-fraction-static"
            )
        split = _Split(full, full, swa_tokens)
        notes.append(
            "radix cache off + --max-running-requests: SWA pool sized from the request cap "
            f"({swa_cap} tokens)"
        )
    else:
        if args.hybrid_swa:
            max_total = int(budget // cell)  # calculate_pool_sizes
        else:
            max_total = _floor_page(int(budget // cell), page)
        split = solve(max_total)
    _check_positive(split.max_total, args)

    profiled = split.max_total
    capped = False
    if args.max_total_tokens is not None:
        # kv_cache_configurator.py::_apply_token_constraints / config_from_budget.
        if args.max_total_tokens > profiled:
            notes.append(
                f"max_total_tokens={args.max_total_tokens} is larger than the profiled value {profiled}; "
                "SGLang uses the profiled value"
            )
        limit = min(profiled, args.max_total_tokens)
        if limit != profiled:
            split = solve(limit)
            capped = True
            _check_positive(split.max_total, args)

    max_running = _resolve_max_num_reqs(split.max_total, args, notes)

    # Allocated bytes: every pool has size + page_size rows per layer (memory_pool.py
    # MHATokenToKVPool). Non-"compress" hybrid archs allocate SWA layers with the full-layer
    # geometry (kv_cache_configurator.py::_build_hybrid_swa_kv_pool); the host pools mirror the
    # device pools' geometry (pool_host/mha.py::get_size_per_token).
    swa_alloc_cell = swa_cell
    if args.hybrid_swa and not model.swa_pool_uses_swa_geometry:
        swa_alloc_cell = f_layer * n_swa
        if swa_alloc_cell != swa_cell:
            notes.append(
                f"{model.architecture} allocates SWA layers with the full-layer geometry "
                f"({swa_alloc_cell} B/token) although sizing priced {swa_cell} B/token"
            )
    full_bytes = (split.full + page) * full_cell if full_cell else 0
    swa_bytes = (split.swa + page) * swa_alloc_cell if args.hybrid_swa else 0
    hicache_ratio = _auto_size_hicache(args, full_bytes + swa_bytes, host_memory, notes)
    host = _host_pools_mha(
        split, args, hicache_ratio, full_cell, swa_alloc_cell, full_bytes, swa_bytes, notes
    )

    return PoolSizes(
        model=model.name,
        configurator=configurator,
        hybrid_swa=args.hybrid_swa,
        tp_size=tp,
        page_size=page,
        swa_full_tokens_ratio=ratio,
        sliding_window=window,
        kv_dtype_bytes=kvb,
        num_full_layers=n_full,
        num_swa_layers=n_swa,
        full_bytes_per_token=full_cell,
        swa_bytes_per_token=swa_cell,
        cell_size=cell,
        kv_budget_bytes=budget,
        profiled_max_total_tokens=profiled,
        capped_by_max_total_tokens=capped,
        full_tokens=split.full,
        swa_tokens=split.swa,
        full_bytes=full_bytes,
        swa_bytes=swa_bytes,
        max_running_requests=max_running,
        hicache_ratio=hicache_ratio,
        host_full_tokens=host[0],
        host_swa_tokens=host[1],
        host_full_bytes=host[0] * full_cell,
        host_swa_bytes=host[1] * swa_alloc_cell,
        memory=memory,
        server_args=args,
        notes=tuple(notes),
    )


def _validate_swa_pool_size(swa_tokens: int, window: int | None, page: int) -> None:
    """pool_configurator.py::MemoryPoolConfigurator.validate_swa_pool_size: prefill admission
    charges window + page of SWA headroom per request, so a pool at or below that floor could
    never admit anything and SGLang refuses to start."""
    if window is None:
        return
    if window + page >= swa_tokens:
        raise ConfigError(
            f"SWA pool ({swa_tokens} tokens) cannot hold even one request: the prefill admission floor is "
            f"sliding_window_size ({window}) + page_size ({page}). Increase --swa-full-tokens-ratio or the "
            "total KV budget."
        )


def _check_positive(max_total: int, args: ResolvedServerArgs) -> None:
    # pool_configurator.py::MemoryPoolConfig.__post_init__
    if max_total <= 0:
        msg = "Not enough memory. Please try to increase --mem-fraction-static."
        if args.mem_fraction_static is not None:
            msg += f" Current value: mem_fraction_static={args.mem_fraction_static:.4g}"
        raise ConfigError(msg)


def _resolve_max_num_reqs(tokens: int, args: ResolvedServerArgs, notes: list[str]) -> int:
    """kv_cache_configurator.py::KVCacheConfigurator.resolve_max_num_reqs (one DP worker):
    the 512-per-context estimate clamped to [2048, 4096], never more than half the token pool."""
    estimated = int(tokens / args.context_length * 512)
    estimated = max(min(estimated, 4096), 2048)
    if args.max_running_requests is not None:
        requested = max(1, args.max_running_requests)
        value = min(requested, tokens // 2)
        if value < requested:
            notes.append(
                f"max_running_requests reduced from the requested {requested} to {value} by the KV capacity"
            )
        return value
    return min(estimated, tokens // 2)


def _host_tokens(device_tokens: int, ratio: float, size_gb: float, per_token: int, page: int) -> int:
    """pool_host/base.py::HostKVCache.__init__: from --hicache-size (GB = 1e9 B) when set, else
    device tokens x ratio; then whole pages plus one padding page."""
    if size_gb > 0:
        size = int(size_gb * 1e9 // per_token)
    else:
        size = int(device_tokens * ratio)
    return (size // page + 1) * page


def _auto_size_hicache(
    args: ResolvedServerArgs, device_bytes: int, host_memory: int | None, notes: list[str]
) -> float:
    """hicache_auto_size.py::auto_size_hicache: without an explicit --hicache-ratio/--hicache-size,
    lower the default ratio to ``budget x (1 - 0.05) / device_kv_bytes`` where budget =
    ``(host RAM - 10 GiB) / ranks_per_host x --hicache-host-memory-fraction``. kvplan takes the
    GPU preset's host DRAM per node as SGLang's available host memory and the TP ranks as the
    ranks on the host (one server per node); without a host-memory figure the default stands."""
    ratio = args.hicache_ratio
    if args.hicache_auto_size_fraction is None or not args.hicache_enabled:
        return ratio
    if host_memory is None:
        notes.append("host RAM unknown: SGLang's HiCache auto-sizing (hicache_auto_size.py) not applied")
        return ratio
    per_rank = (host_memory - HICACHE_HOST_MEMORY_RESERVE) // args.tp_size
    budget = int(per_rank * args.hicache_auto_size_fraction)
    fitted = min(ratio, budget * (1 - 0.05) / device_bytes)
    if fitted <= 0:
        raise ConfigError(
            "No host memory is left for HiCache after the 10 GiB reserve; "
            "set --hicache-ratio or --hicache-size explicitly."
        )
    if fitted < ratio:
        notes.append(
            f"HiCache auto-sizing lowers the ratio {ratio:g} -> {fitted:.3f} to fit "
            f"{host_memory / 1e9:,.0f} GB host RAM over {args.tp_size} rank(s)"
        )
    return fitted


def _host_pools_mha(
    split: _Split,
    args: ResolvedServerArgs,
    ratio: float,
    full_cell: int,
    swa_cell: int,
    full_bytes: int,
    swa_bytes: int,
    notes: list[str],
) -> tuple[int, int]:
    """Host token capacities (full, SWA). Hybrid SWA builds two host pools
    (hybrid_pool_assembler.py::build_hybrid_swa_group); --hicache-size is split between them in
    proportion to the device pool bytes (_split_hicache_size)."""
    if not args.hicache_enabled:
        return 0, 0
    page, size = args.page_size, args.hicache_size
    if not args.hybrid_swa:
        host_full = _host_tokens(split.full, ratio, size, full_cell, page)
        host_swa = 0
    else:
        full_share = swa_share = 0.0
        if size > 0:
            total = full_bytes + swa_bytes
            full_share, swa_share = size * full_bytes / total, size * swa_bytes / total
        host_full = _host_tokens(split.full, ratio, full_share, full_cell, page) if full_cell else 0
        host_swa = _host_tokens(split.swa, ratio, swa_share, swa_cell, page) if swa_cell else 0
    for label, host, dev in (("full", host_full, split.full), ("swa", host_swa, split.swa)):
        if dev and host <= dev:
            notes.append(
                f"HiCache {label} host pool ({host} tokens) is smaller than the device pool ({dev} tokens)"
            )
    return host_full, host_swa


# --------------------------------------------------------------------------------------------------
# DeepSeek-V4 (pool_configurator.py::DSV4PoolConfigurator, default CUDA path)
# --------------------------------------------------------------------------------------------------

# kernels/ops/attention/dsv4/kv_layout.py::KVLayout.V4 (the default SGLANG_DSV4_KV_LAYOUT="v4"):
# 448 fp8 nope + 64 bf16 rope + 8 scale bytes per token, pages padded to 576-byte rows.
_V4_BYTES_PER_TOKEN = 584
_V4_PAGE_ALIGN = 576
# deepseek_v4_memory_pool.py::get_compress_state_ring_size without speculative decoding.
_C4_RING = 8
_C128_RING = 128
# env SGLANG_DSV4_COMPRESS_STATE_DTYPE default float32.
_STATE_DTYPE_BYTES = 4


def _v4_paged_bytes_per_token(page: int) -> float:
    """KVLayout.page_bytes(page) / page for the V4 layout."""
    raw = page * _V4_BYTES_PER_TOKEN
    return (-(-raw // _V4_PAGE_ALIGN) * _V4_PAGE_ALIGN) / page


def _size_dsv4(
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
    n_layers = len(geom.compress_ratios)
    n_c4, n_c128 = geom.layers_with_ratio(4), geom.layers_with_ratio(128)
    attn_head_dim = geom.qk_nope_head_dim + geom.qk_rope_head_dim
    # deepseek_v4_memory_pool.py::get_dsv4_indexer_bytes_per_token (fp8 indexer on CUDA).
    indexer_bytes = geom.index_head_dim + geom.index_head_dim // 128 * 4

    # _get_bytes_per_swa_token: one paged SWA slot on every layer, plus the c4 compress state
    # (kv + indexer, two fp32 rows of 2 x dim) priced per SWA slot via the ring.
    c4_state = 2 * 2 * attn_head_dim * _STATE_DTYPE_BYTES
    c4_index_state = 2 * 2 * geom.index_head_dim * _STATE_DTYPE_BYTES
    bytes_per_swa = (
        _v4_paged_bytes_per_token(page) * n_layers + (_C4_RING / page) * (c4_state + c4_index_state) * n_c4
    )
    # _compressed_bytes_per_full_token per layer, summed: c4 = 1/4 paged KV + 1/4 indexer,
    # c128 = 1/128 paged KV; plus ratio x SWA slot.
    compressed = (0.25 * _v4_paged_bytes_per_token(page // 4) + 0.25 * indexer_bytes) * n_c4 + (
        1 / 128
    ) * _v4_paged_bytes_per_token(page // 128) * n_c128
    bytes_per_full = ratio * bytes_per_swa + compressed

    # _get_c128_state_fixed_bytes with the requested max_running_requests (256 by default).
    assert args.max_running_requests is not None
    mrr = max(1, args.max_running_requests)

    def c128_state_bytes(req: int) -> int:
        rows = (req + 1) * _C128_RING + _C128_RING + 1
        rows = -(-rows // 128) * 128
        return rows * 2 * attn_head_dim * _STATE_DTYPE_BYTES * n_c128 if n_c128 else 0

    fixed = c128_state_bytes(mrr)
    avail = max(budget - fixed, 0)
    full = _floor_page(int(avail / bytes_per_full), page)

    def solve(tokens: int) -> tuple[int, int]:
        # _compute_dsv4_sizes
        f = _floor_page(tokens, page)
        s = int(f * ratio) // page * page
        _validate_swa_pool_size(s, window, page)
        return f, s

    if full <= 0:
        _check_positive(full, args)
    full, swa = solve(full)
    profiled, capped = full, False
    if args.max_total_tokens is not None:
        if args.max_total_tokens > profiled:
            notes.append(
                f"max_total_tokens={args.max_total_tokens} is larger than the profiled value {profiled}; "
                "SGLang uses the profiled value"
            )
        limit = min(profiled, args.max_total_tokens)
        if limit != profiled:
            full, swa = solve(limit)
            capped = True
            _check_positive(full, args)
    max_running = _resolve_max_num_reqs(full, args, notes)
    notes.append(
        "DeepSeek-V4 byte split is approximate: full_bytes = compressed KV + indexer, swa_bytes = SWA "
        "slots + c4 compress state, fixed_bytes = c128 compress state"
    )

    host_full = host_swa = 0
    if args.hicache_enabled:
        # hybrid_pool_assembler.py::_deepseek_v4_num_host_pages: pages x ratio, no --hicache-size.
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
        host_full = int(-(-full // page) * args.hicache_ratio) * page
        host_swa = int(-(-swa // page) * args.hicache_ratio) * page
        notes.append("DeepSeek-V4 host pool bytes are not modelled (token counts only)")

    return PoolSizes(
        model=model.name,
        configurator="DSV4PoolConfigurator",
        hybrid_swa=True,
        tp_size=args.tp_size,
        page_size=page,
        swa_full_tokens_ratio=ratio,
        sliding_window=window,
        kv_dtype_bytes=args.kv_dtype_bytes,
        num_full_layers=n_c4 + n_c128,
        num_swa_layers=n_layers,
        full_bytes_per_token=round(compressed),
        swa_bytes_per_token=round(bytes_per_swa),
        cell_size=bytes_per_full,
        kv_budget_bytes=budget,
        profiled_max_total_tokens=profiled,
        capped_by_max_total_tokens=capped,
        full_tokens=full,
        swa_tokens=swa,
        full_bytes=int(full * compressed),
        swa_bytes=int(swa * bytes_per_swa),
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
