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
:func:`compute_pool_sizes_from_budget` (explicit KV byte budget). The steps live in
``simulator/sizing/``: ``gpu_memory`` (1), ``mha`` and ``dsv4`` (2), ``limits`` (3, 4),
``hicache`` (5), and ``results`` (what comes back). KV bytes per token: ``simulator.kv_geometry``.
"""

from __future__ import annotations

from policies.swa_eviction import SWA_EVICTION_INTERVAL
from simulator.errors import ConfigError
from simulator.gpus import GpuSpec
from simulator.kv_geometry import GIB
from simulator.models import ModelSpec
from simulator.server_args import ResolvedServerArgs, ServerArgs, resolve_server_args
from simulator.sizing.gpu_memory import VLM_CACHE_SIZE_MB, plan_gpu_memory
from simulator.sizing.hicache import HICACHE_HOST_MEMORY_RESERVE
from simulator.sizing.mha import size_mha_pools
from simulator.sizing.results import GpuMemoryPlan, PoolSizes

__all__ = [
    "GIB",
    "HICACHE_HOST_MEMORY_RESERVE",
    "SWA_EVICTION_INTERVAL",
    "VLM_CACHE_SIZE_MB",
    "GpuMemoryPlan",
    "PoolSizes",
    "compute_pool_sizes",
    "compute_pool_sizes_from_budget",
    "plan_gpu_memory",
]


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


def _size_pools(
    model: ModelSpec,
    args: ResolvedServerArgs,
    budget: int,
    memory: GpuMemoryPlan | None,
    host_memory: int | None,
) -> PoolSizes:
    """The configurator SGLang would pick for ``model``, applied to a per-rank KV byte budget."""
    if model.is_dsv4:
        from simulator.sizing.dsv4 import size_dsv4_pools  # DeepSeek-V4 only: loads on use (issue 14)

        return size_dsv4_pools(model, args, budget, memory)
    return size_mha_pools(
        model, args, budget, memory, host_memory, swa_eviction_interval=SWA_EVICTION_INTERVAL
    )
