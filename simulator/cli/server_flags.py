"""Every server flag of kvplan's commands, declared once.

:data:`SERVER_FLAGS` is the one table from a command-line flag (SGLang's launch-flag name where
SGLang has the flag) to its :class:`SimConfig` field, with the help text and, for enumerated
flags, where the allowed names come from. A flag's type and its one default are the SimConfig
field's, so every command that takes the flag agrees on both. :func:`server_options` adds a set of
these flags to a typer command and hands their values to it as one ``server`` dict (SimConfig
field -> value), in the manner of sqlite-utils' shared option decorators.

Adding a server flag: a SimConfig field, plus one row here. HiCache's flags are the fields of
:class:`simulator.hicache_args.HiCacheArgs` (``group="hicache"``): the command receives them as one
``server["hicache"]`` value. Served runs (``run``, ``bench-multiturn``, ``demo``) serve an enabled
HiCache (:data:`HICACHE_IN_SERVED_RUNS`, ``simulator/engine/hicache_steps.py``).
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Annotated, Any, TypeVar

import typer

from policies.eviction_order import EVICTION_ORDERS
from policies.swa_eviction import SWA_EVICTION
from policies.tombstone import TOMBSTONING
from simulator.cli.checks import AT_LEAST_1, FRACTION, MAX_TOKENS, NON_NEGATIVE, POSITIVE, TOKENS, Check
from simulator.cli.unmodelled import UNMODELLED_FLAGS, UNMODELLED_PANEL, UnmodelledFlag
from simulator.cli.validation import validate_flags
from simulator.engine.config import SCHEDULE_POLICIES, SimConfig
from simulator.errors import FlagError
from simulator.gpus import gpu_names
from simulator.hicache_args import (
    HOST_MEMORY_MODES,
    IO_BACKENDS,
    MEM_LAYOUTS,
    PREFETCH_POLICIES,
    STORAGE_BACKENDS,
    WRITE_POLICIES,
    HiCacheArgs,
    resolve_hicache_args,
)
from simulator.models import model_names

F = TypeVar("F", bound=Callable[..., Any])

SGLANG_PANEL = "SGLang server flags"
KVPLAN_PANEL = "kvplan policies and checks"


@dataclass(frozen=True)
class ServerFlag:
    """One flag: its SimConfig field, its option declarations (``"--a/--b"`` for an on/off
    pair), its help, whether SGLang has it (``True``, or SGLang's name where it differs) and the
    allowed names of an enumerated flag; ``check`` is what a value must satisfy (validated before
    any work starts, :mod:`simulator.cli.validation`)."""

    field: str
    decls: tuple[str, ...]
    help: str
    sglang: bool | str = True
    choices: Callable[[], Sequence[str]] | None = None
    check: Check | None = None
    group: str | None = None  # "hicache": a HiCacheArgs field, not a SimConfig one

    @property
    def name(self) -> str:
        """The flag as a user types it (the first declaration)."""
        return self.decls[0].split("/")[0]

    @property
    def sglang_name(self) -> str | None:
        """SGLang's launch flag for this field, or None for kvplan's own flags."""
        if isinstance(self.sglang, str):
            return self.sglang
        return self.name if self.sglang else None


SERVER_FLAGS: tuple[ServerFlag, ...] = (
    ServerFlag(
        "model",
        ("--model",),
        f"model preset ({', '.join(model_names())}), a Hugging Face config.json (or its "
        "directory), or a kvplan YAML/JSON model spec",
        sglang="--model-path",
    ),
    ServerFlag("gpu", ("--gpu",), "GPU preset", sglang=False, choices=gpu_names),
    ServerFlag(
        "tp",
        ("--tp", "--tp-size"),
        "tensor-parallel size (attention TP; must split the model's heads)",
        sglang="--tp-size",
        check=Check(lo=1, hi=1024),
    ),
    ServerFlag(
        "page_size", ("--page-size",), "tokens per KV page (default: SGLang's, 1 on CUDA)", check=TOKENS
    ),
    ServerFlag(
        "swa_full_tokens_ratio",
        ("--swa-full-tokens-ratio",),
        "SWA pool tokens / full pool tokens, in (0, 1] (default: SGLang's)",
        check=FRACTION,
    ),
    ServerFlag(
        "mem_fraction_static",
        ("--mem-fraction-static",),
        "weights + KV share of GPU memory (default: SGLang's heuristic)",
        check=FRACTION,
    ),
    ServerFlag("max_total_tokens", ("--max-total-tokens",), "cap on full-pool tokens", check=TOKENS),
    ServerFlag(
        "max_running_requests", ("--max-running-requests",), "concurrent request cap", check=AT_LEAST_1
    ),
    ServerFlag(
        "chunked_prefill_size",
        ("--chunked-prefill-size",),
        "prefill chunk in tokens, -1 = no chunking (default: SGLang's, by GPU memory)",
        check=Check(lo=-1, hi=MAX_TOKENS),
    ),
    ServerFlag(
        "max_prefill_tokens",
        ("--max-prefill-tokens",),
        "most prompt tokens in one prefill batch",
        check=TOKENS,
    ),
    ServerFlag(
        "disable_radix_cache",
        ("--disable-radix-cache",),
        "no prefix cache (pools: request-cap SWA sizing with --max-running-requests; "
        "the server model refuses it)",
    ),
    ServerFlag(
        "allow_auto_truncate",
        ("--allow-auto-truncate",),
        "cut a prompt longer than the context (or the KV pool) to fit, instead of rejecting it",
    ),
    ServerFlag(
        "kv_budget_gib",
        ("--kv-budget-gib",),
        "KV byte budget per rank in GiB, instead of the GPU memory model",
        sglang=False,
        check=POSITIVE,
    ),
    ServerFlag(
        "schedule_policy", ("--schedule-policy",), "waiting-queue order", choices=lambda: SCHEDULE_POLICIES
    ),
    ServerFlag(
        "schedule_conservativeness",
        ("--schedule-conservativeness",),
        "scales the decode headroom admission reserves (new_token_ratio)",
        check=NON_NEGATIVE,
    ),
    ServerFlag(
        "radix_eviction_policy",
        ("--radix-eviction-policy", "--eviction-policy"),
        "FULL leaf eviction order",
        choices=EVICTION_ORDERS.names,
    ),
    ServerFlag(
        "disable_overlap_schedule",
        ("--disable-overlap-schedule/--enable-overlap-schedule",),
        "SGLang's scheduler without (default here) or with overlap: with it, results are processed "
        "one step late (SGLang's own default; fast-forwarded too, at about 0.87x the plain loop's speed)",
    ),
    # --- issue 11: the scheduler's request-level knobs (one block) ---
    ServerFlag(
        "max_new_tokens",
        ("--max-new-tokens",),
        "max_new_tokens each request is admitted with: trace (its own), context (none sent: "
        "context - input - 1) or a client value N; clipped at arrival (init_req_max_new_tokens)",
        sglang=False,
    ),
    ServerFlag(
        "ignore_eos",
        ("--ignore-eos/--no-ignore-eos",),
        "requests sent with ignore_eos (default: bench_multiturn workloads yes, traces no)",
        sglang=False,
    ),
    ServerFlag(
        "waiting_prefix_refresh",
        ("--waiting-prefix-refresh",),
        "SGLANG_ENABLE_WAITING_PREFIX_REFRESH: FCFS touches waiting prefixes every 32 passes",
        sglang=False,
        choices=lambda: ("on", "off"),
    ),
    ServerFlag(
        "swa_eviction",
        ("--swa-eviction",),
        "decode-time SWA eviction",
        sglang=False,
        choices=SWA_EVICTION.names,
    ),
    ServerFlag(
        "swa_eviction_interval",
        ("--swa-eviction-interval",),
        "the interval of the iteration and interval SWA evictions (SGLANG_SWA_EVICTION_INTERVAL)",
        sglang=False,
        check=AT_LEAST_1,
    ),
    ServerFlag(
        "tombstone", ("--tombstone",), "SWA radix tree generation", sglang=False, choices=TOMBSTONING.names
    ),
    ServerFlag(
        "enable_hierarchical_cache",
        ("--enable-hierarchical-cache", "--enable-hicache"),
        "HiCache: a host (L2) tier behind the device KV pools, and a storage (L3) tier with "
        "--hicache-storage-backend",
        group="hicache",
    ),
    ServerFlag(
        "hicache_ratio",
        ("--hicache-ratio",),
        "host pool tokens / device pool tokens, each pool (default 2.0; 1.2 in buffer_only; implies HiCache)",
        check=POSITIVE,
        group="hicache",
    ),
    ServerFlag(
        "hicache_size",
        ("--hicache-size",),
        "host pool GB (1e9 B) per rank, split between the pools by device bytes; overrides "
        "--hicache-ratio (implies HiCache)",
        check=NON_NEGATIVE,
        group="hicache",
    ),
    ServerFlag(
        "hicache_host_memory_mode",
        ("--hicache-host-memory-mode",),
        "host memory as a cache tier or only a staging buffer for storage",
        choices=lambda: HOST_MEMORY_MODES,
        group="hicache",
    ),
    ServerFlag(
        "hicache_host_memory_fraction",
        ("--hicache-host-memory-fraction",),
        "share of host RAM (after a 10 GiB reserve) the auto-sized host pools may take",
        check=FRACTION,
        group="hicache",
    ),
    ServerFlag(
        "hicache_write_policy",
        ("--hicache-write-policy",),
        "when device KV is backed up to host",
        choices=lambda: WRITE_POLICIES,
        group="hicache",
    ),
    ServerFlag(
        "hicache_io_backend",
        ("--hicache-io-backend",),
        "host<->device copy mechanism (prices transfers; SGLang rewrites incompatible pairs)",
        choices=lambda: IO_BACKENDS,
        group="hicache",
    ),
    ServerFlag(
        "hicache_mem_layout",
        ("--hicache-mem-layout",),
        "host pool layout (prices transfers; SGLang rewrites incompatible pairs)",
        choices=lambda: MEM_LAYOUTS,
        group="hicache",
    ),
    ServerFlag(
        "hicache_storage_backend",
        ("--hicache-storage-backend",),
        "L3 storage tier; kvplan simulates file and sim",
        choices=lambda: STORAGE_BACKENDS,
        group="hicache",
    ),
    ServerFlag(
        "hicache_storage_prefetch_policy",
        ("--hicache-storage-prefetch-policy",),
        "when a storage prefetch stops",
        choices=lambda: PREFETCH_POLICIES,
        group="hicache",
    ),
    ServerFlag(
        "hicache_storage_backend_extra_config",
        ("--hicache-storage-backend-extra-config",),
        "JSON object or @file: prefetch_threshold (256), prefetch_timeout_base (1 s), "
        "prefetch_timeout_per_ki_token (0.25 s), sim_write_gbps/sim_read_gbps/sim_op_latency_us",
        group="hicache",
    ),
    ServerFlag(
        "storage_capacity_gb",
        ("--storage-capacity-gb",),
        "kvplan's own: capacity of the simulated L3 tier in GB (1e9 B), 0 = unlimited",
        sglang=False,
        check=NON_NEGATIVE,
        group="hicache",
    ),
    ServerFlag(
        "storage_read_gbps",
        ("--storage-read-gbps",),
        "kvplan's own: L3 read bandwidth per rank in GB/s, 0 = infinite (default: sim_read_gbps, "
        "SimHiCacheStorage's = write)",
        sglang=False,
        check=NON_NEGATIVE,
        group="hicache",
    ),
    ServerFlag(
        "storage_write_gbps",
        ("--storage-write-gbps",),
        "kvplan's own: L3 write bandwidth per rank in GB/s, 0 = infinite (default: sim_write_gbps, "
        "SimHiCacheStorage's 5.0)",
        sglang=False,
        check=NON_NEGATIVE,
        group="hicache",
    ),
    ServerFlag(
        "storage_op_latency_us",
        ("--storage-op-latency-us",),
        "kvplan's own: L3 latency per operation in us (default: sim_op_latency_us, 100)",
        sglang=False,
        check=NON_NEGATIVE,
        group="hicache",
    ),
    ServerFlag("profile", ("--profile",), "cost-model calibration profile JSON", sglang=False),
    ServerFlag(
        "log_decode",
        ("--log-decode",),
        "print SGLang's 'Decode batch, ...' line every 40 decode steps",
        sglang=False,
    ),
    ServerFlag(
        "check_invariants",
        ("--check-invariants",),
        "run the cache invariant checker after every step (slow)",
        sglang=False,
    ),
)
FLAGS: dict[str, ServerFlag] = {f.field: f for f in SERVER_FLAGS}

# The sets the commands take (SimConfig field names, in --help order).
POOL_FLAGS = (
    "model",
    "gpu",
    "tp",
    "page_size",
    "swa_full_tokens_ratio",
    "mem_fraction_static",
    "max_total_tokens",
    "max_running_requests",
    "chunked_prefill_size",
    "max_prefill_tokens",
    "disable_radix_cache",
    "kv_budget_gib",
)
CACHE_POLICY_FLAGS = ("radix_eviction_policy", "swa_eviction", "swa_eviction_interval", "tombstone")
HICACHE_FLAGS = tuple(f.field for f in SERVER_FLAGS if f.group == "hicache")
POOL_FLAGS = (*POOL_FLAGS, *HICACHE_FLAGS)
ALL_FLAGS = tuple(f.field for f in SERVER_FLAGS)

# Served runs serve HiCache (simulator/engine/hicache_steps.py, issue 10's engine integration).
HICACHE_IN_SERVED_RUNS = True
# A command is a served run when it takes a serving-only flag.
_SERVED_MARK = "schedule_policy"

_DEFAULTS = {f.name: f.default for f in fields(SimConfig)} | {f.name: f.default for f in fields(HiCacheArgs)}
_TYPES = typing.get_type_hints(SimConfig) | typing.get_type_hints(HiCacheArgs)


def choice_check(names: Callable[[], Sequence[str]], flag: str) -> Callable[[Any], Any]:
    """An option callback accepting exactly ``names()`` (None passes: "not given")."""

    def check(value: Any) -> Any:
        allowed = list(names())
        if value is not None and value not in allowed:
            raise typer.BadParameter(f"{value!r} is not one of: {', '.join(allowed)}", param_hint=flag)
        return value

    return check


def _option(flag: ServerFlag) -> Any:
    """The typed, annotated parameter of one flag."""
    help_text = flag.help if flag.sglang_name is None else f"SGLang {flag.sglang_name}: {flag.help}"
    if flag.choices is not None:
        help_text += f" ({', '.join(flag.choices())})"
    option = typer.Option(
        *flag.decls,
        help=help_text,
        callback=None if flag.choices is None else choice_check(flag.choices, flag.name),
        rich_help_panel=SGLANG_PANEL if flag.sglang else KVPLAN_PANEL,
    )
    return Annotated[_TYPES[flag.field], option]


def _unmodelled_option(flag: UnmodelledFlag) -> Any:
    """The parameter of one SGLang flag kvplan refuses (:mod:`simulator.cli.unmodelled`)."""
    option = typer.Option(
        flag.flag, help=f"refused: {flag.what}", rich_help_panel=UNMODELLED_PANEL, show_default=False
    )
    annotation = bool if flag.type is bool else flag.type | None
    return Annotated[annotation, option]


def server_options(*field_names: str) -> Callable[[F], F]:
    """Add the flags of ``field_names`` to a typer command, after its own parameters, and check
    every flag value of the command before it runs (:func:`validate_flags`).

    The command declares a ``server: dict`` parameter and receives there the flags' values keyed
    by SimConfig field, ready for ``SimConfig(**server)``. A command that serves a model also
    takes SGLang's flags kvplan does not model, and refuses them when set.
    """
    flags = [FLAGS[name] for name in field_names]

    def deco(fn: F) -> F:
        sig = inspect.signature(fn, eval_str=True)
        own = [p for p in sig.parameters.values() if p.name != "server"]
        clash = {p.name for p in own} & {f.field for f in flags}
        if clash:
            raise ValueError(f"{fn.__name__} declares server flags itself: {sorted(clash)}")
        added = [
            inspect.Parameter(
                f.field, inspect.Parameter.KEYWORD_ONLY, default=_DEFAULTS[f.field], annotation=_option(f)
            )
            for f in flags
        ]
        refused = [] if "model" not in field_names else _refused_for({p.name for p in own})
        added += [
            inspect.Parameter(
                u.param, inspect.Parameter.KEYWORD_ONLY, default=u.default, annotation=_unmodelled_option(u)
            )
            for u in refused
        ]

        served = _SERVED_MARK in field_names

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            validate_flags(kwargs, flags)
            for u in refused:
                kwargs.pop(u.param)
            server = {f.field: kwargs.pop(f.field) for f in flags if f.group is None}
            grouped = {f.field: kwargs.pop(f.field) for f in flags if f.group == "hicache"}
            if grouped:
                radix_off = bool(server.get("disable_radix_cache", False))
                server["hicache"] = hicache_args(grouped, served=served, disable_radix_cache=radix_off)
            return fn(*args, server=server, **kwargs)

        params = own + added
        wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        return wrapper  # type: ignore[return-value]

    return deco


def _refused_for(own: set[str]) -> list[UnmodelledFlag]:
    """The unmodelled SGLang flags a command gets: all but those it models itself."""
    return [u for u in UNMODELLED_FLAGS if u.field not in own]


def hicache_args(values: dict[str, Any], *, served: bool, disable_radix_cache: bool = False) -> HiCacheArgs:
    """The HiCache flags as :class:`HiCacheArgs`, checked by SGLang's resolution (a refused value
    names its flag); a served run refuses an enabled HiCache while the engine does not serve it."""
    try:
        args = HiCacheArgs(**values)
        resolve_hicache_args(args, disable_radix_cache=disable_radix_cache)
    except ValueError as exc:
        raise FlagError(str(exc)) from None
    if served and args.enabled and not HICACHE_IN_SERVED_RUNS:
        raise FlagError(
            "--enable-hierarchical-cache: HiCache in served runs lands with issue 10's engine "
            "integration; `kvplan pools` sizes its host pools and `kvplan cache-replay` replays it"
        )
    return args
