"""Everything a simulation run needs besides the workload, with SGLang's flag names."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from policies.swa_eviction import SWA_EVICTION_INTERVAL
from simulator.errors import ConfigError
from simulator.hicache_args import HiCacheArgs
from simulator.kv_geometry import GIB

if TYPE_CHECKING:
    from simulator.pool_sizing import PoolSizes
    from simulator.server_args import ServerArgs

# --schedule-policy values kvplan models (SGLang's schedule_policy.py has more).
SCHEDULE_POLICIES: tuple[str, ...] = ("fcfs", "lpm")


@dataclass(frozen=True)
class SimConfig:
    """One what-if configuration. Server fields mirror SGLang's launch flags (None = SGLang's
    default resolution); policy fields select registered policies by name.

    Frozen and hashable, so a sweep can key results by configuration. The command-line flag of
    each field is declared once, in ``simulator/cli/server_flags.py``.
    """

    model: str = "gpt-oss-120b"
    gpu: str = "H200"
    tp: int = 1
    # --- SGLang server flags ------------------------------------------------------------
    page_size: int | None = None
    swa_full_tokens_ratio: float | None = None
    mem_fraction_static: float | None = None
    max_total_tokens: int | None = None
    max_running_requests: int | None = None
    chunked_prefill_size: int | None = None
    max_prefill_tokens: int = 16384
    schedule_policy: str = "fcfs"
    schedule_conservativeness: float = 1.0
    disable_radix_cache: bool = False
    radix_eviction_policy: str = "lru"
    # SGLang's default is the overlapped scheduler; kvplan's is still the plain one: both are
    # fast-forwarded, the overlap loop (one step late result processing) at 0.86-0.87x the plain
    # loop's speed, below the 0.9x issue 11 asks of a default (docs/benchmarks.md).
    disable_overlap_schedule: bool = True
    # SGLANG_ENABLE_WAITING_PREFIX_REFRESH (on by default in SGLang 0.5.23): "on" or "off"
    waiting_prefix_refresh: str = "on"
    kv_budget_gib: float | None = None
    # HiCache flags (SGLang's names; declared in simulator/cli/server_flags.py).
    hicache: HiCacheArgs = HiCacheArgs()
    allow_auto_truncate: bool = False  # cut prompts that do not fit instead of rejecting them
    # --- kvplan policies ------------------------------------------------------------------
    swa_eviction: str = "interval"
    tombstone: str = "unified"
    swa_eviction_interval: int = SWA_EVICTION_INTERVAL
    # --- cost model -----------------------------------------------------------------------
    profile: str | None = None  # calibration profile JSON path
    # --- workload timing (open loop) -------------------------------------------------------
    time_scale: float = 1.0  # multiply trace inter-arrival times
    request_rate: float | None = None  # override: Poisson arrivals at this rate (req/s)
    think_time_s: float = 0.0  # sessions: delay between a turn's finish and the next turn
    # Admission's view of the outputs. None: bench_multiturn workloads are ignore_eos (as the
    # script sends them), trace requests stop at EOS. max_new_tokens "trace": each request's own
    # (its output length unless the trace says); "context": none sent, SGLang's
    # context - input - 1; a number N: the client's value (a longer output stops at N). Clipped
    # at arrival as Scheduler.init_req_max_new_tokens does.
    ignore_eos: bool | None = None
    max_new_tokens: str = "trace"
    seed: int = 0
    # --- observability --------------------------------------------------------------------
    log_decode: bool = False
    decode_log_interval: int = 40
    check_invariants: bool = False
    fast_forward: bool = True  # jump quiet decode steps arithmetically (off: one step at a time)

    def max_new_tokens_mode(self) -> str | int:
        """``max_new_tokens`` parsed: "trace", "context" or a client value N >= 1."""
        v = str(self.max_new_tokens)
        if v in ("trace", "context"):
            return v
        if v.isdigit() and int(v) >= 1:
            return int(v)
        raise ConfigError(f"--max-new-tokens must be trace, context or an integer >= 1, got {v!r}")

    def server_args(self, **more: Any) -> ServerArgs:
        """SGLang's pool-sizing flags of this configuration; ``more`` sets the flags SimConfig
        does not carry (``context_length``, ``kv_cache_dtype``, HiCache, ...)."""
        from simulator.server_args import ServerArgs

        return ServerArgs(
            tp_size=self.tp,
            page_size=self.page_size,
            swa_full_tokens_ratio=self.swa_full_tokens_ratio,
            mem_fraction_static=self.mem_fraction_static,
            max_total_tokens=self.max_total_tokens,
            max_running_requests=self.max_running_requests,
            chunked_prefill_size=self.chunked_prefill_size,
            max_prefill_tokens=self.max_prefill_tokens,
            disable_radix_cache=self.disable_radix_cache,
            **{**self.hicache.sizing_fields(), **more},
        )

    def pool_sizes(self, **more: Any) -> PoolSizes:
        """SGLang's pool sizes for this configuration (``more`` as in :meth:`server_args`): from
        the GPU memory model, or from ``kv_budget_gib`` when set (the GPU then still picks the
        attention backend and so the default page size)."""
        from simulator.gpus import get_gpu
        from simulator.models import load_model
        from simulator.pool_sizing import compute_pool_sizes, compute_pool_sizes_from_budget

        model, gpu, args = load_model(self.model), get_gpu(self.gpu), self.server_args(**more)
        if self.kv_budget_gib is not None:
            if not (self.kv_budget_gib > 0 and math.isfinite(self.kv_budget_gib)):
                raise ConfigError(f"--kv-budget-gib must be a finite number > 0, got {self.kv_budget_gib}")
            return compute_pool_sizes_from_budget(model, int(self.kv_budget_gib * GIB), args, gpu)
        return compute_pool_sizes(model, gpu, args)
