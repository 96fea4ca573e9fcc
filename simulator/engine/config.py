"""Everything a simulation run needs besides the workload, with SGLang's flag names."""

from __future__ import annotations

from dataclasses import dataclass, field

from policies.swa_eviction import SWA_EVICTION_INTERVAL


@dataclass(frozen=True)
class SimConfig:
    """One what-if configuration. Server fields mirror SGLang's launch flags (None = SGLang's
    default resolution); policy fields select registered policies by name."""

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
    # SGLang's default is the overlapped scheduler; kvplan's is the plain one, whose decode
    # steps it can fast-forward exactly. --enable-overlap-schedule models the overlap (one step
    # late result processing) one forward at a time.
    disable_overlap_schedule: bool = True
    kv_budget_gib: float | None = None
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
    # script sends them), trace requests stop at EOS. max_new_tokens None: each request's own
    # output length; a number: the client's max_tokens (at least the output length).
    ignore_eos: bool | None = None
    max_new_tokens: int | None = None
    seed: int = 0
    # --- observability --------------------------------------------------------------------
    log_decode: bool = False
    decode_log_interval: int = 40
    check_invariants: bool = False
    fast_forward: bool = True  # jump quiet decode steps arithmetically (off: one step at a time)
    extra: dict = field(default_factory=dict)
