"""Coefficients of the roofline: achievable rates and overheads, what a calibration profile fits.

Peaks default to the GPU preset; the TP all-reduce bus bandwidth comes from a per-GPU table
(measured on H100, scaled from link speeds elsewhere).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

from simulator.errors import ConfigError
from simulator.gpus import GpuSpec

# and 361 GB/s (8); H200 shares H100's NVLink 4. The others are scaled from their link speed.
_ALLREDUCE_BUS_GBPS: dict[str, float] = {
    "h100": 350.0,
    "h200": 350.0,
    "b200": 700.0,  # NVLink 5 is twice NVLink 4 (estimate)
    "a100": 230.0,  # NVLink 3, 600 GB/s bidirectional (estimate)
    "l40s": 20.0,  # no NVLink; PCIe Gen4 x16 (estimate)
}
_ALLREDUCE_BUS_GBPS_DEFAULT = 100.0


@dataclass(frozen=True, kw_only=True)
class CostCoefficients:
    """Achievable-rate and overhead coefficients of the roofline.

    Peaks come from the GPU preset (``None`` = take the preset's value). Efficiencies are the
    fraction of that peak real kernels reach; they are separate per kernel group because a
    calibration fits them separately: a prefill dominated by MoE GEMMs and one dominated by
    long-context attention move different coefficients. Times are seconds.
    """

    peak_tflops: float | None = None
    hbm_bandwidth_gbps: float | None = None
    allreduce_bus_gbps: float | None = None
    # Fraction of peak FLOP/s: dense GEMMs, MoE grouped GEMMs (routing imbalance, W4A16 dequant on
    # Hopper), attention (causal tile waste, small head dims).
    dense_flops_efficiency: float = 0.65
    moe_flops_efficiency: float = 0.45
    attention_flops_efficiency: float = 0.45
    # Fraction of peak HBM bandwidth: streaming weights (large, contiguous) and reading paged KV.
    weight_bandwidth_efficiency: float = 0.80
    kv_bandwidth_efficiency: float = 0.70
    # TP all-reduces: count per layer (after attention and after the MLP) and fixed latency each.
    allreduces_per_layer: float = 2.0
    allreduce_latency_s: float = 10e-6
    # Decode runs from CUDA graphs: a small per-step cost (sampling, graph launch, bookkeeping not
    # overlapped by the scheduler) and a per-layer floor of ~12-15 tiny kernels.
    decode_step_overhead_s: float = 200e-6
    decode_layer_overhead_s: float = 40e-6
    decode_per_request_s: float = 1e-6
    # Prefill runs eagerly: batch preparation, per-layer launch floors, per-request metadata.
    prefill_step_overhead_s: float = 1e-3
    prefill_layer_overhead_s: float = 30e-6
    prefill_per_request_s: float = 20e-6
    # Step-shape terms fitted from measured steps (docs/cost-model.md, "Beyond the roofline"); the
    # defaults leave the plain roofline. ``*_unhidden_fraction``: the share of the shorter of a
    # group's FLOP and byte times not hidden under the longer one (0 = max, the roofline; 1 = the
    # sum), which rounds the roofline's corner where a grouped GEMM turns from memory- to
    # compute-bound (prefill of 1k-4k tokens). ``moe_flops_half_tokens``: the token count at which
    # the MoE GEMMs reach half their FLOP efficiency (0 = always full). The attention term applies
    # to prefill only (decode attention is priced by ``decode_terms``' closed form).
    dense_unhidden_fraction: float = 0.0
    moe_unhidden_fraction: float = 0.0
    prefill_attention_unhidden_fraction: float = 0.0
    moe_flops_half_tokens: float = 0.0
    # ``moe_tile_tokens``: the row tile of the prefill MoE grouped GEMM; when > 0 the MoE FLOP time
    # counts the rows the kernel computes, each expert's token count rounded up to whole tiles
    # (simulator/cost/moe_tiles.py), instead of the routed rows. ``moe_decode_tile_tokens``: the
    # same for decode (kernels pick smaller tiles for decode's few rows). 0 = off (the roofline).
    moe_tile_tokens: float = 0.0
    moe_decode_tile_tokens: float = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ConfigError(f"cost coefficient {f.name} must be a finite number, got {v!r}")
            if v < 0:
                raise ConfigError(f"cost coefficient {f.name} must be >= 0, got {v}")
            if f.name.endswith("_unhidden_fraction") and v > 1:
                raise ConfigError(f"cost coefficient {f.name} must lie in [0, 1], got {v}")
            if f.name.endswith("tile_tokens") and v and (v < 1 or v != int(v)):
                raise ConfigError(f"cost coefficient {f.name} must be 0 or a whole number >= 1, got {v}")
            if f.name.endswith("_efficiency") and not 0 < v <= 1.5:
                raise ConfigError(f"cost coefficient {f.name} must lie in (0, 1.5], got {v}")
            if f.name in ("peak_tflops", "hbm_bandwidth_gbps", "allreduce_bus_gbps") and v <= 0:
                raise ConfigError(f"cost coefficient {f.name} must be positive, got {v}")

    def resolved(self, gpu: GpuSpec) -> CostCoefficients:
        """The same coefficients with every ``None`` peak filled from the GPU preset."""
        return replace(
            self,
            peak_tflops=self.peak_tflops if self.peak_tflops is not None else float(gpu.bf16_dense_tflops),
            hbm_bandwidth_gbps=(
                self.hbm_bandwidth_gbps
                if self.hbm_bandwidth_gbps is not None
                else float(gpu.hbm_bandwidth_gbps)
            ),
            allreduce_bus_gbps=(
                self.allreduce_bus_gbps
                if self.allreduce_bus_gbps is not None
                else _ALLREDUCE_BUS_GBPS.get(gpu.name.strip().lower(), _ALLREDUCE_BUS_GBPS_DEFAULT)
            ),
        )


def allreduce_bus_source(gpu: GpuSpec) -> str:
    """Where :meth:`CostCoefficients.resolved` takes the all-reduce bandwidth from (for reports)."""
    return f"table for {gpu.name}" if gpu.name.strip().lower() in _ALLREDUCE_BUS_GBPS else "generic default"
