"""HiCache host pools: their token capacities and SGLang's auto-sizing of the host ratio."""

from __future__ import annotations

from dataclasses import dataclass

from simulator.errors import ConfigError
from simulator.kv_geometry import GIB
from simulator.server_args import ResolvedServerArgs

# pool_host/base.py::HICACHE_HOST_MEMORY_RESERVE_BYTES.
HICACHE_HOST_MEMORY_RESERVE = 10 * GIB


def host_tokens(device_tokens: int, ratio: float, size_gb: float, per_token: int, page: int) -> int:
    """pool_host/base.py::HostKVCache.__init__: from --hicache-size (GB = 1e9 B) when set, else
    device tokens x ratio; then whole pages plus one page. SGLang's free list covers every slot
    (base.py ``free_slots = arange(logical_size)``), so the extra page is allocatable: capacity
    ``floor(size / page) * page + page`` (HICACHE.md fact 22). ``per_token`` is the host pool's
    size_per_token, ``(head_dim + v_head_dim) x head_num x layers x itemsize`` for MHA
    (pool_host/mha.py::get_size_per_token), i.e. the device pool's bytes per token."""
    if size_gb > 0:
        size = int(size_gb * 1e9 // per_token)
    else:
        size = int(device_tokens * ratio)
    return (size // page + 1) * page


def auto_size_hicache(
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


@dataclass(frozen=True)
class DevicePool:
    """One device pool as the host pool that mirrors it sees it."""

    tokens: int
    bytes_per_token: int  # with the geometry the pool is allocated with
    bytes: int


def split_hicache_size(size_gb: float, device_bytes: tuple[int, ...]) -> tuple[float, ...]:
    """hybrid_pool_assembler.py::_split_hicache_size: --hicache-size GB shared between the host
    pools in proportion to their device pools' bytes (padding page included)."""
    total = sum(device_bytes)
    return tuple(size_gb * b / total for b in device_bytes)


def host_pool_tokens(
    full: DevicePool, swa: DevicePool | None, page: int, ratio: float, size_gb: float
) -> tuple[int, int]:
    """Host token capacities (full, SWA) of the pools that mirror ``full`` and ``swa`` (None: a
    single-pool model). Hybrid SWA builds two host pools (build_hybrid_swa_stack); a pool with
    no device bytes (no layers of that kind) gets none."""
    if swa is None:
        return host_tokens(full.tokens, ratio, size_gb, full.bytes_per_token, page), 0
    full_share = swa_share = 0.0
    if size_gb > 0:
        full_share, swa_share = split_hicache_size(size_gb, (full.bytes, swa.bytes))
    host_full = host_tokens(full.tokens, ratio, full_share, full.bytes_per_token, page) if full.bytes else 0
    host_swa = host_tokens(swa.tokens, ratio, swa_share, swa.bytes_per_token, page) if swa.bytes else 0
    return host_full, host_swa


def host_pools_mha(
    full: DevicePool, swa: DevicePool, args: ResolvedServerArgs, ratio: float, notes: list[str]
) -> tuple[int, int]:
    """Host token capacities (full, SWA) for resolved server args (0, 0 without HiCache), with
    SGLang's warning when a host pool is not larger than its device pool
    (pool_host/base.py::_allocate_host_buffer)."""
    if not args.hicache_enabled:
        return 0, 0
    host_full, host_swa = host_pool_tokens(
        full, swa if args.hybrid_swa else None, args.page_size, ratio, args.hicache_size
    )
    for label, host, dev in (("full", host_full, full.tokens), ("swa", host_swa, swa.tokens)):
        if dev and host <= dev:
            notes.append(
                f"HiCache {label} host pool ({host} tokens) is smaller than the device pool ({dev} tokens)"
            )
    return host_full, host_swa
