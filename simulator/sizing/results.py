"""What pool sizing returns: one rank's GPU memory plan and its device and host KV pool sizes."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from simulator.server_args import ResolvedServerArgs


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
