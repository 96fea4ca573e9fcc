"""How long HiCache's transfers take: D->H backups, H->D load-backs (with their layer-wise
overlap with the prefill), and the storage tier's H->L3 writes and L3->H reads.

The model, per TP rank (each rank moves its own KV shard over its own PCIe link):

* **Kernel io-backend** (SGLang's SM copy kernels, ``transfer_kv_per_layer`` /
  ``transfer_kv_all_layer``): one kernel call per layer for a per-layer load, one per pool for an
  all-layer backup; ``t = calls x call_overhead + bytes / (peak x efficiency)``. A write-back
  submission (one flush of queued backups) may also pay ``kernel_first_call_extra_d2h_s`` once,
  for its first call (measured: the first call of a step costs about twice the calls behind it,
  the host's issue path being cold after the scheduler's work; 0 by default).
* **Direct io-backend** (``transfer_kv_direct`` / ``*_direct_pf_lf``: one ``cudaMemcpyAsync`` per
  page, per layer, per K and V): the copy engines move bytes at the link peak but each copy costs
  the issuing CPU a fixed time; ``t = copies x copy_overhead + bytes / peak``.
* **Layer-wise overlap** of a load-back with the prefill that needs it (SGLang issues the L
  per-layer loads back to back on the load stream; layer i's attention waits only for layer i's
  load, ``LayerDoneCounter``). With ``l`` the per-layer load and ``c`` the per-layer compute, the
  pipeline ends at ``max_k((k+1) l + (L-k) c)``, so the time the load adds to the prefill is
  ``exposed = max(l, load - overlap)`` with ``overlap = e x (L-1) x c``: the loads of layers 1..L-1
  hide under the compute of the layers before them, the first layer's load never hides, and
  ``e`` (overlap efficiency) is the share of that window a copy really gets while the forward
  runs (SM copies compete with the compute kernels, copy engines do not).
* **Storage** (``SimHiCacheStorage``'s own model, ``mem_cache/storage/sim_storage.py``):
  ``t = ops x op_latency + bytes / bandwidth`` per direction.

Every default comes from kvplan's H100 measurements (``gpu_replay/results``, docs/gpu-replay.md),
named beside it; a calibration profile's ``hicache_transfer`` section overrides any of them
(:func:`simulator.cost.profile.validate_profile`). Formulas and a worked example:
docs/cost-model.md, "HiCache transfers".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from simulator.errors import ConfigError
from simulator.gpus import GpuSpec
from simulator.hicache_args import ResolvedHiCache, StorageTier

DIRECTIONS = ("h2d", "d2h")


@dataclass(frozen=True, kw_only=True)
class TransferCoefficients:
    """Host-link rates and overheads (seconds, GB/s = 1e9 B/s, efficiencies as fractions).

    Sources (kvplan's H100, PCIe Gen5 x16, 64-token pages of gpt-oss-120b at TP 2; fits checked by
    tests/test_hicache_transfer.py against the JSON files):

    * ``*_peak_gbps`` None: the GPU preset's measured pinned copy peak (55.2 GB/s on H100).
    * ``kernel_efficiency_*``, ``kernel_call_overhead_*``: a least-squares line through the
      per-layer transfers of the ``cuda`` row kernel (SM copies with 16-byte accesses, the closest
      of kvplan's kernels to SGLang's), prefixes 1k-32k, layer_first,
      gpu_cuda_transfer-h100-2026-11-26-run3.json: 48.4 GB/s H2D and 50.1 GB/s D2H of a
      55.07/55.19 GB/s peak, 7.8 us and 5.8 us per call.
    * ``direct_copy_overhead_*``: the ``cxx_loop`` transfers (one cudaMemcpyAsync per page, layer
      and K/V, issued from C++), same file, layer_first: the fitted time per 32 KiB copy minus its
      bytes at peak (2.8 us H2D, 2.1 us D2H; page_first_direct gave 3.1 / 2.6 us).
    * ``page_first_kernel_factor``: page_first vs layer_first with the same kernel, same file
      (bulk 48.3 vs 48.0 GB/s H2D, 50.1 vs 50.1 D2H): 1.0. ``page_head`` is not measured and
      is priced as page_first.
    * ``kernel_first_call_extra_d2h_s``: what the first write-back call of a submission costs
      beyond ``kernel_call_overhead_d2h_s`` (the ``first_next`` form of
      :mod:`gpu_replay.transfer_model`: first call ``a + extra``, every next call ``a``). 0 here
      (every call alike, the form of the defaults' fit); a one-machine profile sets it
      (gpu_replay/machine_profile.py).
    * ``*_overlap_efficiency``: the overlap runs (32k-prefix per-layer loads beside a causal
      attention 1.2-1.3x as long, compute issued first): copy engines hid 94-100 % of the load
      (0.97), the ``cuda`` kernel with 16-32 blocks 78-91 % (0.85); docs/gpu-replay.md.
    """

    h2d_peak_gbps: float | None = None
    d2h_peak_gbps: float | None = None
    kernel_efficiency_h2d: float = 0.879
    kernel_efficiency_d2h: float = 0.908
    kernel_call_overhead_h2d_s: float = 7.8e-6
    kernel_call_overhead_d2h_s: float = 5.8e-6
    kernel_first_call_extra_d2h_s: float = 0.0
    direct_copy_overhead_h2d_s: float = 2.8e-6
    direct_copy_overhead_d2h_s: float = 2.1e-6
    page_first_kernel_factor: float = 1.0
    kernel_overlap_efficiency: float = 0.85
    direct_overlap_efficiency: float = 0.97

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ConfigError(f"hicache_transfer.{f.name} must be a finite number >= 0, got {v!r}")
            positive = f.name.endswith(("_gbps", "_factor")) or f.name.startswith("kernel_efficiency")
            if positive and v <= 0:
                raise ConfigError(f"hicache_transfer.{f.name} must be > 0, got {v}")
            if (f.name.endswith("_efficiency") or "efficiency_" in f.name) and v > 1.5:
                raise ConfigError(f"hicache_transfer.{f.name} must be <= 1.5, got {v}")

    @classmethod
    def from_profile(cls, section: Mapping[str, Any] | None) -> TransferCoefficients:
        """The coefficients a profile's ``hicache_transfer`` section sets, defaults elsewhere."""
        return cls(**dict(section or {}))


TRANSFER_KEYS = tuple(f.name for f in fields(TransferCoefficients))


@dataclass(frozen=True)
class PoolGeometry:
    """One KV pool of one rank as a transfer sees it: its layers and the K + V bytes of one token
    on one layer (the host pool mirrors the device pool, pool_host/mha.py)."""

    layers: int
    bytes_per_token_layer: int

    @property
    def bytes_per_token(self) -> int:
        return self.layers * self.bytes_per_token_layer


@dataclass(frozen=True)
class TransferGeometry:
    """A rank's pools: full and (hybrid SWA) sliding-window; ``swa`` None for one pool."""

    full: PoolGeometry
    swa: PoolGeometry | None = None

    @property
    def layers(self) -> int:
        return self.full.layers + (self.swa.layers if self.swa else 0)


def transfer_geometry(model: Any, tp: int, kv_dtype_bytes: int, hybrid_swa: bool = True) -> TransferGeometry:
    """The pools of ``model`` (a ModelSpec) at attention TP ``tp``."""
    from simulator.kv_geometry import full_layer_kv_bytes, swa_layer_kv_bytes

    full_layer = full_layer_kv_bytes(model, tp, kv_dtype_bytes)
    if not hybrid_swa or not model.num_swa_layers:
        return TransferGeometry(PoolGeometry(model.num_layers, full_layer))
    swa = PoolGeometry(model.num_swa_layers, swa_layer_kv_bytes(model, tp, kv_dtype_bytes))
    return TransferGeometry(PoolGeometry(model.num_full_layers, full_layer), swa)


class HostTransferModel:
    """Times of HiCache's host transfers for one GPU, io-backend and host layout (resolved:
    :func:`simulator.hicache_args.resolve_hicache_args`)."""

    def __init__(
        self,
        gpu: GpuSpec,
        io_backend: str,
        mem_layout: str,
        page_size: int,
        coefficients: TransferCoefficients | None = None,
    ) -> None:
        if io_backend not in ("kernel", "direct"):
            raise ConfigError(f"no transfer model for --hicache-io-backend {io_backend}")
        if page_size < 1:
            raise ConfigError(f"page size must be >= 1, got {page_size}")
        self.c = coefficients or TransferCoefficients()
        self.io_backend, self.mem_layout, self.page_size = io_backend, mem_layout, page_size
        self.peak_gbps = {
            "h2d": self.c.h2d_peak_gbps or gpu.host_copy_gbps("h2d"),
            "d2h": self.c.d2h_peak_gbps or gpu.host_copy_gbps("d2h"),
        }

    @classmethod
    def from_resolved(
        cls,
        gpu: GpuSpec,
        hicache: ResolvedHiCache,
        page_size: int,
        profile: Mapping[str, Any] | None = None,
    ) -> HostTransferModel:
        """The model of a resolved configuration; ``profile`` is a validated calibration profile
        (its ``hicache_transfer`` section, if any, overrides the defaults)."""
        section = None if profile is None else profile.get("hicache_transfer")
        coefficients = TransferCoefficients.from_profile(section)
        return cls(gpu, hicache.io_backend, hicache.mem_layout, page_size, coefficients)

    def bandwidth_gbps(self, direction: str) -> float:
        """The rate bytes move at once a transfer runs (GB/s)."""
        peak = self.peak_gbps[direction]
        if self.io_backend == "direct":
            return peak
        eff = self.c.kernel_efficiency_h2d if direction == "h2d" else self.c.kernel_efficiency_d2h
        if self.mem_layout in ("page_first", "page_head"):
            eff *= self.c.page_first_kernel_factor
        return peak * eff

    def pool_time(self, direction: str, tokens: int, pool: PoolGeometry, *, per_layer: bool) -> float:
        """Seconds to move ``tokens`` of one pool (all its layers) in one direction. ``per_layer``:
        one call per layer (load_to_device_per_layer), else one all-layer call
        (backup_from_device_all_layer)."""
        if tokens <= 0 or pool.layers == 0:
            return 0.0
        nbytes = tokens * pool.bytes_per_token
        seconds = nbytes / (self.bandwidth_gbps(direction) * 1e9)
        if self.io_backend == "kernel":
            calls = pool.layers if per_layer else 1
            over = (
                self.c.kernel_call_overhead_h2d_s if direction == "h2d" else self.c.kernel_call_overhead_d2h_s
            )
            return seconds + calls * over
        pages = -(-tokens // self.page_size)
        copies = pages * pool.layers * 2  # one per page, layer and K / V
        over = self.c.direct_copy_overhead_h2d_s if direction == "h2d" else self.c.direct_copy_overhead_d2h_s
        return seconds + copies * over

    def backup_time(self, geometry: TransferGeometry, full_tokens: int, swa_tokens: int = 0) -> float:
        """D->H write of a backup: ``full_tokens`` of the full pool and ``swa_tokens`` of the
        SWA pool (one window at most per node), all layers, one call per pool; the first call
        of the submission pays ``kernel_first_call_extra_d2h_s`` on top (kernel io-backend)."""
        t = self.pool_time("d2h", full_tokens, geometry.full, per_layer=False)
        if geometry.swa is not None:
            t += self.pool_time("d2h", swa_tokens, geometry.swa, per_layer=False)
        extra = self.c.kernel_first_call_extra_d2h_s
        if extra and t > 0 and self.io_backend == "kernel":  # 0: today's pricing, bit for bit
            t += extra
        return t

    def load_time(self, geometry: TransferGeometry, full_tokens: int, swa_tokens: int = 0) -> float:
        """H->D load-back of ``full_tokens`` full and ``swa_tokens`` SWA tokens, layer by layer."""
        t = self.pool_time("h2d", full_tokens, geometry.full, per_layer=True)
        if geometry.swa is not None:
            t += self.pool_time("h2d", swa_tokens, geometry.swa, per_layer=True)
        return t

    @property
    def overlap_efficiency(self) -> float:
        return (
            self.c.kernel_overlap_efficiency
            if self.io_backend == "kernel"
            else self.c.direct_overlap_efficiency
        )

    def exposed_load_time(self, load_s: float, prefill_s: float, layers: int) -> float:
        """What a layer-wise load-back adds to the prefill that waits for it (module doc):
        ``max(l, load - e x (L-1) x c)`` with ``l = load / L`` and ``c = prefill / L``."""
        return exposed_load_time(load_s, prefill_s, layers, self.overlap_efficiency)


def exposed_load_time(load_s: float, prefill_s: float, layers: int, efficiency: float = 1.0) -> float:
    """Seconds a layer-wise H->D load of ``load_s`` adds to a prefill forward of ``prefill_s``
    over ``layers`` equal layers: layer i's load overlaps the compute of layers < i, so
    ``exposed = max(load / L, load - efficiency x (L - 1) x prefill / L)``; 0 without a load."""
    if load_s <= 0:
        return 0.0
    if layers < 1:
        raise ConfigError(f"layers must be >= 1, got {layers}")
    per_layer = load_s / layers
    overlap = efficiency * (layers - 1) * prefill_s / layers
    return max(per_layer, load_s - overlap)


def storage_time(tier: StorageTier, direction: str, nbytes: int, ops: int = 1) -> float:
    """H->L3 (``"write"``) or L3->H (``"read"``) of ``nbytes`` in ``ops`` backend calls
    (SimHiCacheStorage._sleep_io: ``latency + bytes / bandwidth`` per call; 0 GB/s = infinite)."""
    if direction not in ("read", "write"):
        raise ConfigError(f"storage direction must be 'read' or 'write', got {direction!r}")
    gbps = tier.read_gbps if direction == "read" else tier.write_gbps
    seconds = ops * tier.op_latency_s
    if gbps > 0 and nbytes > 0:
        seconds += nbytes / (gbps * 1e9)
    return seconds
