"""The cost of a configuration for ``kvplan plan``: GiB of GPU KV memory and of host RAM.

A configuration costs ``gpu_kv_gib * gpu_price + host_gib * host_price`` per hour, with:

* ``gpu_kv_gib``: the KV byte budget SGLang carves out of every rank's GPU memory, summed over
  the TP ranks. The budget follows from ``--mem-fraction-static`` and the GPU preset
  (``simulator/sizing/gpu_memory.py``, SGLang's ``_profile_available_bytes``):
  ``budget = free_after_weights - preload_free * (1 - mem_fraction_static)``, so it grows
  linearly with the fraction from 0 at ``f0 = 1 - free_after_weights / preload_free``.
  ``--swa-full-tokens-ratio`` only splits the budget between the full and SWA pools: it costs
  nothing.
  With ``--max-total-tokens`` (not searched by the planner; a sweep's axis in a report), the
  pools take only the capped tokens: the smaller of the budget and the pools' bytes.
* ``host_gib``: the HiCache host pools (``--hicache-ratio`` times the device pools' tokens, at
  the host layout's bytes per token), summed over the ranks; 0 without HiCache.

The prices are per GiB-hour. The defaults are rough cloud rates of late 2026: GPU HBM at
$0.03 (an H100/H200 at about $2.50-4.20 an hour over its 80-141 GiB), host DRAM at $0.004 (the
memory share of a memory-optimised instance). Only their ratio matters for the ranking; pass
your own with ``--gpu-price`` and ``--host-price``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from simulator.engine.config import SimConfig
from simulator.errors import KvplanError
from simulator.kv_geometry import GIB

DEFAULT_GPU_PRICE = 0.03  # $ per GiB-hour of GPU (HBM) memory
DEFAULT_HOST_PRICE = 0.004  # $ per GiB-hour of host RAM


@dataclass(frozen=True)
class Prices:
    """$ per GiB-hour of GPU KV memory and of host RAM."""

    gpu_gib_hour: float = DEFAULT_GPU_PRICE
    host_gib_hour: float = DEFAULT_HOST_PRICE


@dataclass(frozen=True)
class Cost:
    """What one configuration takes, over all TP ranks, and its price per hour."""

    gpu_kv_gib: float
    host_gib: float
    per_hour: float

    def to_dict(self) -> dict[str, float]:
        return {"gpu_kv_gib": self.gpu_kv_gib, "host_gib": self.host_gib, "per_hour": self.per_hour}


def config_cost(cfg: SimConfig, prices: Prices) -> Cost | None:
    """The cost of ``cfg`` from SGLang's pool sizing (no simulation); None when SGLang refuses
    the configuration (its sizing raises)."""
    sized = kv_memory_gib(cfg)
    if sized is None:
        return None
    gpu_gib, host_gib = sized
    return Cost(gpu_gib, host_gib, price_per_hour(gpu_gib, host_gib, prices))


def price_per_hour(gpu_kv_gib: float, host_gib: float, prices: Prices) -> float:
    """The hourly price of that much GPU KV memory and host RAM (the plan's and the reports'
    one formula)."""
    return gpu_kv_gib * prices.gpu_gib_hour + host_gib * prices.host_gib_hour


@functools.lru_cache(maxsize=4096)
def kv_memory_gib(cfg: SimConfig) -> tuple[float, float] | None:
    """(GPU KV GiB, host GiB) of ``cfg`` over all TP ranks, as the module docstring defines
    them; None when SGLang refuses the configuration."""
    try:
        pools = cfg.pool_sizes()
    except KvplanError:
        return None
    ranks = cfg.tp
    budget = pools.kv_budget_bytes if pools.memory is None else pools.memory.kv_budget_bytes
    if cfg.max_total_tokens is not None:  # the pools take only the capped tokens (a sweep's axis)
        budget = min(budget, pools.device_bytes)
    return budget * ranks / GIB, pools.host_bytes * ranks / GIB


@dataclass(frozen=True)
class MemoryRange:
    """The ``--mem-fraction-static`` range of one configuration: ``f0`` gives a KV budget of 0,
    ``f_max`` the most the planner may use (SGLang's own default unless overridden)."""

    f0: float
    f_max: float
    max_budget_gib: float  # per rank, at f_max


def memory_range(cfg: SimConfig, f_max: float | None = None) -> MemoryRange:
    """The fraction range of ``cfg``'s model, GPU and TP (``cfg.mem_fraction_static`` is
    ignored; ``f_max`` None: SGLang's heuristic default for this configuration)."""
    import dataclasses

    from simulator.gpus import get_gpu
    from simulator.models import load_model
    from simulator.server_args import resolve_server_args
    from simulator.sizing.gpu_memory import plan_gpu_memory

    plain = dataclasses.replace(cfg, mem_fraction_static=f_max)
    model, gpu = load_model(cfg.model), get_gpu(cfg.gpu)
    resolved = resolve_server_args(model, gpu, plain.server_args())
    plan = plan_gpu_memory(model, gpu, resolved)
    f0 = 1.0 - plan.free_after_weights_bytes / plan.preload_free_bytes
    return MemoryRange(f0, float(plan.mem_fraction_static), plan.kv_budget_bytes / GIB)
