"""HiCache launch flags (SGLang 0.5.23's names and defaults) and how SGLang resolves them.

:class:`HiCacheArgs` is what a user passes; :func:`resolve_hicache_args` applies SGLang's own
normalisation (``arg_groups/hicache_hook.py::handle_hicache``: host-memory-mode validation, the
layout/io-backend rewrites, the storage/layout rewrite), refuses what SGLang refuses for an MHA
model on an NVIDIA GPU, and parses ``--hicache-storage-backend-extra-config`` the way
``HybridCacheController.parse_storage_backend_extra_config`` does. The result,
:class:`ResolvedHiCache`, is plain data the tree, the transfer-time model and the prefetch
policies read. Flag declarations: ``simulator/cli/server_flags.py`` (SERVER_FLAGS).

The ``storage_*`` fields are kvplan's own (SGLang's ``file`` backend has no capacity or speed;
kvplan needs both to price L3): capacity, read/write bandwidth and per-operation latency of the
simulated storage tier. For ``--hicache-storage-backend sim`` they default to SGLang's
``SimHiCacheStorage`` knobs (extra-config ``sim_write_gbps``/``sim_read_gbps``/
``sim_op_latency_us``, ``mem_cache/storage/sim_storage.py``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simulator.errors import ConfigError

# arg_groups/fields/memory.py choices (SGLang 0.5.23).
WRITE_POLICIES: tuple[str, ...] = ("write_through", "write_through_selective", "write_back")
IO_BACKENDS: tuple[str, ...] = ("kernel", "direct", "kernel_ascend")
MEM_LAYOUTS: tuple[str, ...] = (
    "page_first",
    "layer_first",
    "page_first_direct",
    "page_first_kv_split",
    "page_head",
)
HOST_MEMORY_MODES: tuple[str, ...] = ("cache", "buffer_only")
PREFETCH_POLICIES: tuple[str, ...] = ("timeout", "best_effort", "wait_complete")
STORAGE_BACKENDS: tuple[str, ...] = (
    "file",
    "sim",
    "mooncake",
    "npu_memcache",
    "hf3fs",
    "nixl",
    "aibrix",
    "dynamic",
    "eic",
    "simm",
    "mori",
    "shm",
    "tensorcast",
    "seaweedfs",
)
# The backends kvplan simulates: SGLang's HiCacheFile (a directory of page files) and its
# directory-less SimHiCacheStorage; both become kvplan's keyed-by-page-hash storage tier.
SIMULATED_STORAGE_BACKENDS: tuple[str, ...] = ("file", "sim")

# HybridCacheController.parse_storage_backend_extra_config defaults.
DEFAULT_PREFETCH_THRESHOLD = 256
DEFAULT_PREFETCH_TIMEOUT_BASE = 1.0
DEFAULT_PREFETCH_TIMEOUT_PER_KI_TOKEN = 0.25
# sim_storage.py::SimHiCacheStorage.__init__ defaults (per rank).
SIM_WRITE_GBPS = 5.0
SIM_OP_LATENCY_US = 100.0


@dataclass(frozen=True, kw_only=True)
class HiCacheArgs:
    """HiCache flags as given (SGLang's ServerArgs names; ``None`` = SGLang's default applies).

    ``hicache_size`` is in GB (1e9 B) per rank; SGLang's CLI takes an int, kvplan also accepts
    fractions (the sizing code is unit-agnostic). ``storage_*`` are kvplan's own (module doc).
    """

    enable_hierarchical_cache: bool = False
    hicache_ratio: float | None = None
    hicache_size: float = 0.0
    hicache_host_memory_mode: str = "cache"
    hicache_host_memory_fraction: float = 0.8
    hicache_write_policy: str = "write_through"
    hicache_io_backend: str = "kernel"
    hicache_mem_layout: str = "page_first"
    hicache_storage_backend: str | None = None
    hicache_storage_prefetch_policy: str = "timeout"
    hicache_storage_backend_extra_config: str | None = None
    storage_capacity_gb: float = 0.0  # 0 = unlimited
    storage_read_gbps: float | None = None
    storage_write_gbps: float | None = None
    storage_op_latency_us: float | None = None

    def __post_init__(self) -> None:
        _choice("--hicache-write-policy", self.hicache_write_policy, WRITE_POLICIES)
        _choice("--hicache-io-backend", self.hicache_io_backend, IO_BACKENDS)
        _choice("--hicache-mem-layout", self.hicache_mem_layout, MEM_LAYOUTS)
        _choice("--hicache-host-memory-mode", self.hicache_host_memory_mode, HOST_MEMORY_MODES)
        _choice("--hicache-storage-prefetch-policy", self.hicache_storage_prefetch_policy, PREFETCH_POLICIES)
        if self.hicache_storage_backend is not None:
            _choice("--hicache-storage-backend", self.hicache_storage_backend, STORAGE_BACKENDS)
        if self.hicache_ratio is not None and not (
            self.hicache_ratio > 0 and math.isfinite(self.hicache_ratio)
        ):
            raise ConfigError(f"--hicache-ratio must be a finite number > 0, got {self.hicache_ratio}")
        if not (self.hicache_size >= 0 and math.isfinite(self.hicache_size)):
            raise ConfigError(f"--hicache-size must be a finite number >= 0, got {self.hicache_size}")
        if not 0 < self.hicache_host_memory_fraction <= 1:
            # hicache_hook.py::handle_hicache_ratio_default
            raise ConfigError("--hicache-host-memory-fraction must be in (0, 1].")
        for name in (
            "storage_capacity_gb",
            "storage_read_gbps",
            "storage_write_gbps",
            "storage_op_latency_us",
        ):
            v = getattr(self, name)
            if v is not None and not (v >= 0 and math.isfinite(v)):
                flag = "--" + name.replace("_", "-")
                raise ConfigError(f"{flag} must be a finite number >= 0, got {v}")

    @property
    def enabled(self) -> bool:
        """HiCache is on if enabled explicitly or implied by a host-size flag (kvplan convenience:
        SGLang ignores --hicache-ratio without --enable-hierarchical-cache)."""
        return self.enable_hierarchical_cache or self.hicache_ratio is not None or self.hicache_size > 0

    def sizing_fields(self) -> dict[str, Any]:
        """The fields :class:`simulator.server_args.ServerArgs` sizes host pools from."""
        return dict(
            enable_hierarchical_cache=self.enable_hierarchical_cache,
            hicache_ratio=self.hicache_ratio,
            hicache_size=self.hicache_size,
            hicache_host_memory_mode=self.hicache_host_memory_mode,
            hicache_host_memory_fraction=self.hicache_host_memory_fraction,
        )


def _choice(flag: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{flag} {value!r} is not one of: {', '.join(allowed)}")


@dataclass(frozen=True)
class StorageTier:
    """The simulated L3 tier: capacity (bytes, 0 = unlimited), bandwidth per direction (GB/s per
    rank, 0 = infinite, as SimHiCacheStorage reads ``<= 0``) and fixed latency per operation."""

    backend: str
    capacity_bytes: int
    read_gbps: float
    write_gbps: float
    op_latency_s: float


@dataclass(frozen=True, kw_only=True)
class ResolvedHiCache:
    """HiCache flags after SGLang's resolution: what the simulator runs with."""

    enabled: bool
    host_memory_mode: str
    write_policy: str
    io_backend: str
    mem_layout: str
    storage: StorageTier | None
    prefetch_policy: str
    prefetch_threshold: int = DEFAULT_PREFETCH_THRESHOLD
    prefetch_timeout_base: float = DEFAULT_PREFETCH_TIMEOUT_BASE
    prefetch_timeout_per_ki_token: float = DEFAULT_PREFETCH_TIMEOUT_PER_KI_TOKEN
    storage_extra_config: dict[str, Any] = field(default_factory=dict, compare=False)
    notes: tuple[str, ...] = ()

    @property
    def write_through_threshold(self) -> int:
        """Hits before a node is backed up (unified_radix_cache.py: 1 for write_through, else 2)."""
        return 1 if self.write_policy == "write_through" else 2


def load_extra_config(text: str | None) -> dict[str, Any]:
    """The extra-config object: inline JSON, or ``@path`` to a .json/.toml/.yaml/.yml file
    (HybridCacheController.parse_storage_backend_extra_config)."""
    if not text:
        return {}
    flag = "--hicache-storage-backend-extra-config"
    try:
        if text.startswith("@"):
            path = Path(text[1:])
            ext = path.suffix.lower()
            if ext == ".json":
                data = json.loads(path.read_text(encoding="utf-8"))
            elif ext == ".toml":
                import tomllib  # Python 3.11+

                data = tomllib.loads(path.read_text(encoding="utf-8"))
            elif ext in (".yaml", ".yml"):
                try:
                    import yaml
                except ImportError:
                    raise ConfigError(f"{flag}: reading {path} needs PyYAML") from None
                data = yaml.safe_load(path.read_text(encoding="utf-8"))
            else:
                raise ConfigError(f"{flag}: unsupported config file {path} (config format: {ext})")
        else:
            data = json.loads(text)
    except (OSError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"{flag}: cannot read {text!r}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{flag} must be a JSON object, got {type(data).__name__}")
    return dict(data)


def parse_prefetch_knobs(extra: dict[str, Any]) -> tuple[int, float, float, dict[str, Any]]:
    """(prefetch_threshold, prefetch_timeout_base, prefetch_timeout_per_ki_token, the rest),
    with SGLang's defaults and type checks (parse_storage_backend_extra_config)."""
    rest = dict(extra)
    threshold = rest.pop("prefetch_threshold", DEFAULT_PREFETCH_THRESHOLD)
    base = rest.pop("prefetch_timeout_base", DEFAULT_PREFETCH_TIMEOUT_BASE)
    per_ki = rest.pop("prefetch_timeout_per_ki_token", DEFAULT_PREFETCH_TIMEOUT_PER_KI_TOKEN)
    pass_keys = rest.pop("hicache_storage_pass_prefix_keys", False)
    if not isinstance(threshold, int):
        raise ConfigError(f"prefetch_threshold must be int, got {type(threshold).__name__}")
    if not isinstance(base, (int, float)):
        raise ConfigError(f"prefetch_timeout_base must be number, got {type(base).__name__}")
    if not isinstance(per_ki, (int, float)):
        raise ConfigError(f"prefetch_timeout_per_ki_token must be number, got {type(per_ki).__name__}")
    if not isinstance(pass_keys, bool):
        raise ConfigError(f"hicache_storage_pass_prefix_keys must be bool, got {type(pass_keys).__name__}")
    return threshold, float(base), float(per_ki), rest


def _resolve_layout_io(io: str, layout: str, notes: list[str]) -> tuple[str, str]:
    """hicache_hook.py::resolve_layout_io_compatibility: page_first_direct needs the direct
    backend; direct cannot do page_first, which becomes page_first_direct."""
    if layout == "page_first_direct" and io == "kernel":
        notes.append("hicache_io_backend kernel -> direct (kernel does not support page_first_direct)")
        io = "direct"
    if layout == "page_first" and io == "direct":
        notes.append("hicache_mem_layout page_first -> page_first_direct (direct io backend)")
        layout = "page_first_direct"
    return io, layout


def _resolve_storage_layout(backend: str | None, io: str, layout: str, notes: list[str]) -> str:
    """hicache_hook.py::resolve_storage_layout_compatibility: Mooncake and Ascend MemCache do not
    take layer_first."""
    if backend not in ("mooncake", "npu_memcache") or layout != "layer_first":
        return layout
    new = {"direct": "page_first_direct", "kernel": "page_first"}.get(io, layout)
    notes.append(f"hicache_mem_layout layer_first -> {new} ({backend} storage does not take layer_first)")
    return new


def _check_mha_transfer(io: str, layout: str) -> None:
    """What an MHA host pool on CUDA can transfer (pool_host/mha.py load_to_device_per_layer /
    backup_from_device_all_layer); anything else raises 'Unsupported layout' in SGLang."""
    if io == "kernel_ascend":
        raise ConfigError(
            "--hicache-io-backend kernel_ascend is the Ascend NPU backend; kvplan models NVIDIA GPUs"
        )
    supported = {
        "kernel": ("layer_first", "page_first", "page_head"),
        "direct": ("layer_first", "page_first_direct"),
    }
    if layout not in supported[io]:
        raise ConfigError(
            f"--hicache-mem-layout {layout} with --hicache-io-backend {io}: SGLang's MHA host pool "
            f"does not support it (Unsupported layout); {io} takes {', '.join(supported[io])}"
        )


def _storage_tier(args: HiCacheArgs, extra: dict[str, Any], notes: list[str]) -> StorageTier | None:
    backend = args.hicache_storage_backend
    if backend is None:
        return None
    if backend not in SIMULATED_STORAGE_BACKENDS:
        raise ConfigError(
            f"--hicache-storage-backend {backend}: kvplan simulates only "
            f"{', '.join(SIMULATED_STORAGE_BACKENDS)} (use sim with --storage-read-gbps/"
            "--storage-write-gbps/--storage-op-latency-us to stand in for another medium)"
        )
    # SimHiCacheStorage: read defaults to write; <= 0 GB/s means infinite.
    write = float(extra.get("sim_write_gbps", SIM_WRITE_GBPS))
    read = float(extra.get("sim_read_gbps", write))
    latency_us = float(extra.get("sim_op_latency_us", SIM_OP_LATENCY_US))
    if args.storage_write_gbps is not None:
        write = args.storage_write_gbps
    if args.storage_read_gbps is not None:
        read = args.storage_read_gbps
    elif args.storage_write_gbps is not None and "sim_read_gbps" not in extra:
        read = write
    if args.storage_op_latency_us is not None:
        latency_us = args.storage_op_latency_us
    if backend == "file" and args.storage_write_gbps is None and args.storage_read_gbps is None:
        notes.append(
            f"file storage timed with SimHiCacheStorage's defaults ({write:g} GB/s write, {read:g} GB/s "
            f"read, {latency_us:g} us per operation); set --storage-*-gbps for the real medium"
        )
    return StorageTier(
        backend=backend,
        capacity_bytes=int(args.storage_capacity_gb * 1e9),
        read_gbps=max(read, 0.0),
        write_gbps=max(write, 0.0),
        op_latency_s=latency_us / 1e6,
    )


def resolve_hicache_args(args: HiCacheArgs, *, disable_radix_cache: bool = False) -> ResolvedHiCache:
    """SGLang's HiCache flag resolution (hicache_hook.py::handle_hicache, kv_cache_hook.py's
    radix-cache exclusion, parse_storage_backend_extra_config), as data with notes."""
    notes: list[str] = []
    if args.enabled and disable_radix_cache:
        raise ConfigError("--disable-radix-cache and --enable-hierarchical-cache are mutually exclusive")
    policy, io, layout = args.hicache_write_policy, args.hicache_io_backend, args.hicache_mem_layout
    if args.enabled and args.hicache_host_memory_mode == "buffer_only":
        # hicache_hook.py::validate_hicache_host_memory_mode
        if args.hicache_storage_backend is None:
            raise ConfigError(
                "--hicache-host-memory-mode buffer_only requires a storage backend "
                "(--hicache-storage-backend)"
            )
        if policy == "write_back":
            notes.append("hicache_write_policy write_back -> write_through (buffer_only host memory)")
            policy = "write_through"
    io, layout = _resolve_layout_io(io, layout, notes)
    layout = _resolve_storage_layout(args.hicache_storage_backend, io, layout, notes)
    if args.enabled:
        _check_mha_transfer(io, layout)
    # SGLang parses the extra config only when a storage backend is set (init_hicache).
    extra: dict[str, Any] = {}
    if args.hicache_storage_backend is not None:
        extra = load_extra_config(args.hicache_storage_backend_extra_config)
    elif args.hicache_storage_backend_extra_config:
        notes.append("--hicache-storage-backend-extra-config ignored: no --hicache-storage-backend")
    threshold, base, per_ki, rest = parse_prefetch_knobs(extra)
    storage = _storage_tier(args, rest, notes) if args.enabled else None
    return ResolvedHiCache(
        enabled=args.enabled,
        host_memory_mode=args.hicache_host_memory_mode,
        write_policy=policy,
        io_backend=io,
        mem_layout=layout,
        storage=storage,
        prefetch_policy=args.hicache_storage_prefetch_policy,
        prefetch_threshold=threshold,
        prefetch_timeout_base=base,
        prefetch_timeout_per_ki_token=per_ki,
        storage_extra_config=rest,
        notes=tuple(notes),
    )
