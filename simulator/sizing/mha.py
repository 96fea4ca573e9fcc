"""Pool sizes of MHA models (every preset but DeepSeek-V4), by the configurator SGLang picks
(``model_executor/pool_configurator.py::create_memory_pool_configurator``):
``HybridSWAPoolConfigurator`` (ratio split), ``SWARequestCapPoolConfigurator`` (radix cache off +
--max-running-requests) or ``DefaultPoolConfigurator`` (one pool; Gemma 2/3 and
--disable-hybrid-swa-memory).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.errors import ConfigError
from simulator.kv_geometry import GIB, full_layer_kv_bytes, swa_layer_kv_bytes
from simulator.models import ModelSpec
from simulator.request_kv import ceil_page, floor_page
from simulator.server_args import ResolvedServerArgs
from simulator.sizing.hicache import DevicePool, auto_size_hicache, host_pools_mha
from simulator.sizing.limits import (
    check_positive,
    max_total_tokens_limit,
    resolve_max_num_reqs,
    validate_swa_pool_size,
)
from simulator.sizing.results import GpuMemoryPlan, PoolSizes


@dataclass(frozen=True)
class Split:
    """One configurator's answer before the token cap: tokens of each pool."""

    max_total: int  # SGLang's max_total_num_tokens (full tokens; SWA tokens when all-SWA)
    full: int
    swa: int


@dataclass(frozen=True)
class MhaCells:
    """Bytes per token of each pool and the configurator that splits the budget between them."""

    configurator: str
    full_layer_bytes: int  # one full layer, one token, one rank
    n_full: int
    n_swa: int
    full_cell: int  # bytes per full-pool token (all layers sized as full)
    swa_cell: int  # bytes per SWA-pool token, priced with the SWA geometry
    cell: float  # bytes per max_total token the budget is divided by
    window: int | None
    cap_mode: bool  # SWARequestCapPoolConfigurator
    swa_cap: int = 0  # its SWA request cap in tokens (0 elsewhere)


def mha_cells(model: ModelSpec, args: ResolvedServerArgs, swa_eviction_interval: int) -> MhaCells:
    """Cell sizes (pool_configurator.py::HybridSWAPoolConfigurator.__init__ and
    DefaultPoolConfigurator._compute_cell_size, which prices every layer with the full-attention
    geometry) and the configurator SGLang would pick."""
    tp, kvb, page = args.tp_size, args.kv_dtype_bytes, args.page_size
    f_layer = full_layer_kv_bytes(model, tp, kvb)
    if args.hybrid_swa:
        s_layer = swa_layer_kv_bytes(model, tp, kvb)
        n_full, n_swa = model.num_full_layers, model.num_swa_layers
    else:
        s_layer, n_full, n_swa = 0, model.num_layers, 0
    full_cell, swa_cell = f_layer * n_full, s_layer * n_swa
    window = model.sliding_window if args.hybrid_swa else None
    cap_mode = (
        args.hybrid_swa
        and args.disable_radix_cache
        and args.max_running_requests is not None
        and args.chunked_prefill_size > 0
        and window is not None
        and n_full > 0
    )
    swa_cap = 0
    if not args.hybrid_swa:
        configurator, cell = "DefaultPoolConfigurator", float(full_cell)
    elif cap_mode:
        configurator, cell = "SWARequestCapPoolConfigurator", float(full_cell)
        # pool_configurator.py::compute_swa_request_cap (no speculative decoding, overlap on):
        # per request = window + eviction interval + page (eviction padding) + page (decode alloc).
        assert window is not None and args.max_running_requests is not None
        per_request = window + swa_eviction_interval * 1 + page + page
        swa_cap = per_request * max(1, args.max_running_requests) + 2 * args.chunked_prefill_size + page
    else:
        configurator = "HybridSWAPoolConfigurator"
        # _recompute_cell_size: all-SWA prices SWA tokens with no ratio.
        cell = float(swa_cell) if n_full == 0 else full_cell + args.swa_full_tokens_ratio * swa_cell
    return MhaCells(
        configurator, f_layer, n_full, n_swa, full_cell, swa_cell, cell, window, bool(cap_mode), swa_cap
    )


def solve_split(c: MhaCells, args: ResolvedServerArgs, max_total: int) -> Split:
    """calculate_pool_sizes_from_max_tokens of the chosen configurator."""
    page = args.page_size
    if not args.hybrid_swa:
        t = floor_page(max_total, page)
        return Split(t, t, 0)
    if c.cap_mode:
        swa = ceil_page(c.swa_cap, page)
        return Split(floor_page(max_total, page), floor_page(max_total, page), min(swa, max_total))
    if c.n_full == 0:
        swa = floor_page(max_total, page)
        return Split(swa, 0, swa)
    # HybridSWAPoolConfigurator._solve_pool_sizes
    full = floor_page(max_total, page)
    swa = floor_page(int(full * args.swa_full_tokens_ratio), page)
    validate_swa_pool_size(swa, c.window, page)
    return Split(full, full, swa)


def budget_split(c: MhaCells, args: ResolvedServerArgs, budget: int, notes: list[str]) -> Split:
    """The split of the whole budget (calculate_pool_sizes). The request-cap configurator first
    sets the SWA pool aside at its cap and gives the full pool the rest."""
    page = args.page_size
    if not c.cap_mode:
        if args.hybrid_swa:
            return solve_split(c, args, int(budget // c.cell))
        return solve_split(c, args, floor_page(int(budget // c.cell), page))
    swa_tokens = ceil_page(c.swa_cap, page)
    fixed_swa = swa_tokens * c.swa_cell
    full = floor_page(int((budget - fixed_swa) // c.full_cell), page)
    if full <= 0:
        raise ConfigError(
            f"SWA pool cap ({swa_tokens} tokens, {fixed_swa / GIB:.2f} GiB) leaves no room for the full "
            f"KV pool within the available {budget / GIB:.2f} GiB. Reduce --max-running-requests or "
            "increase --mem-fraction-static"
        )
    notes.append(
        f"radix cache off + --max-running-requests: SWA pool sized from the request cap ({c.swa_cap} tokens)"
    )
    return Split(full, full, swa_tokens)


def allocated_pools(
    model: ModelSpec, args: ResolvedServerArgs, c: MhaCells, split: Split, notes: list[str]
) -> tuple[DevicePool, DevicePool]:
    """The device pools as allocated: every pool has size + page_size rows per layer
    (memory_pool.py MHATokenToKVPool). Non-"compress" hybrid archs allocate SWA layers with the
    full-layer geometry (kv_cache_configurator.py::_build_hybrid_swa_kv_pool)."""
    page = args.page_size
    swa_alloc_cell = c.swa_cell
    if args.hybrid_swa and not model.swa_pool_uses_swa_geometry:
        swa_alloc_cell = c.full_layer_bytes * c.n_swa
        if swa_alloc_cell != c.swa_cell:
            notes.append(
                f"{model.architecture} allocates SWA layers with the full-layer geometry "
                f"({swa_alloc_cell} B/token) although sizing priced {c.swa_cell} B/token"
            )
    full_bytes = (split.full + page) * c.full_cell if c.full_cell else 0
    swa_bytes = (split.swa + page) * swa_alloc_cell if args.hybrid_swa else 0
    return DevicePool(split.full, c.full_cell, full_bytes), DevicePool(split.swa, swa_alloc_cell, swa_bytes)


def size_mha_pools(
    model: ModelSpec,
    args: ResolvedServerArgs,
    budget: int,
    memory: GpuMemoryPlan | None,
    host_memory: int | None,
    *,
    swa_eviction_interval: int,
) -> PoolSizes:
    """Device and host pools of an MHA model from a per-rank KV byte budget."""
    notes: list[str] = list(args.notes)
    c = mha_cells(model, args, swa_eviction_interval)
    split = budget_split(c, args, budget, notes)
    check_positive(split.max_total, args)
    profiled = split.max_total
    limit = max_total_tokens_limit(profiled, args, notes)
    if limit is not None:
        split = solve_split(c, args, limit)
        check_positive(split.max_total, args)
    max_running = resolve_max_num_reqs(split.max_total, args, notes)
    full, swa = allocated_pools(model, args, c, split, notes)
    # The host pools mirror the device pools' geometry (pool_host/mha.py::get_size_per_token).
    hicache_ratio = auto_size_hicache(args, full.bytes + swa.bytes, host_memory, notes)
    host_full, host_swa = host_pools_mha(full, swa, args, hicache_ratio, notes)
    return PoolSizes(
        model=model.name,
        configurator=c.configurator,
        hybrid_swa=args.hybrid_swa,
        tp_size=args.tp_size,
        page_size=args.page_size,
        swa_full_tokens_ratio=args.swa_full_tokens_ratio,
        sliding_window=c.window,
        kv_dtype_bytes=args.kv_dtype_bytes,
        num_full_layers=c.n_full,
        num_swa_layers=c.n_swa,
        full_bytes_per_token=c.full_cell,
        swa_bytes_per_token=c.swa_cell,
        cell_size=c.cell,
        kv_budget_bytes=budget,
        profiled_max_total_tokens=profiled,
        capped_by_max_total_tokens=limit is not None,
        full_tokens=split.full,
        swa_tokens=split.swa,
        full_bytes=full.bytes,
        swa_bytes=swa.bytes,
        max_running_requests=max_running,
        hicache_ratio=hicache_ratio,
        host_full_tokens=host_full,
        host_swa_tokens=host_swa,
        host_full_bytes=host_full * full.bytes_per_token,
        host_swa_bytes=host_swa * swa.bytes_per_token,
        memory=memory,
        server_args=args,
        notes=tuple(notes),
    )
