"""GPU presets: memory as SGLang sees it, plus bandwidth and FLOPs for a later cost model.

Two memory figures matter to SGLang 0.5.23 and they differ:

* ``memory_total_mib`` is what ``nvidia-smi`` reports. ``utils/common.py::get_device_memory_capacity``
  reads it, and ``arg_groups/memory_hook.py::handle_gpu_memory_settings`` derives the default
  ``--mem-fraction-static``, ``--chunked-prefill-size`` and CUDA-graph batch sizes from it.
* ``torch.cuda.mem_get_info`` free memory before the weights load (``pre_model_load_memory``) is
  what ``kv_cache_configurator.py::_profile_available_bytes`` multiplies by ``1 - mem_fraction``.
  It is the device total torch sees (nvidia-smi total minus a driver reservation) minus the CUDA
  context. kvplan models it as ``preload_free_bytes``; see docs/pool-sizing.md for the measured
  H100/H200 figures and the approximation for the others.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from simulator.errors import ConfigError
from simulator.preset_registry import PresetRegistry

__all__ = ["GpuSpec", "get_gpu", "gpu_names", "register_gpu"]

_MIB = 1 << 20
# kvplan's H100 reached 55.2 GB/s per direction on its 64 GB/s PCIe Gen5 x16 link
# (gpu_replay/results/gpu_transfer-h100-2026-11-26.json copy_peak); GPUs without a measurement
# get this share of their nominal link rate.
PCIE_MEASURED_SHARE = 55.2 / 64


@dataclass(frozen=True, kw_only=True)
class GpuSpec:
    """One GPU model. Bandwidths are GB/s (1e9 B/s); ``host_link_gbps`` is per direction."""

    name: str
    memory_total_mib: int
    driver_reserved_mib: int
    cuda_context_mib: int
    memory_measured: bool
    hbm_bandwidth_gbps: float
    bf16_dense_tflops: float
    host_link_gbps: float
    host_link: str
    compute_capability: int
    host_memory_per_node_gb: float | None = None
    # Pinned host<->device copy peak per direction (GB/s), measured where known; None: the link
    # rate scaled by the H100's measured share of it (:data:`PCIE_MEASURED_SHARE`).
    pcie_h2d_gbps: float | None = None
    pcie_d2h_gbps: float | None = None
    pcie_source: str = ""
    source: str = ""
    aliases: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("GPU spec needs a non-empty name")
        if self.memory_total_mib <= 0:
            raise ConfigError(f"GPU {self.name!r}: memory_total_mib must be positive")
        if self.driver_reserved_mib < 0 or self.cuda_context_mib < 0:
            raise ConfigError(f"GPU {self.name!r}: reserved and context memory must be >= 0")
        if self.driver_reserved_mib + self.cuda_context_mib >= self.memory_total_mib:
            raise ConfigError(f"GPU {self.name!r}: reserved + context memory exceed the total")

    @property
    def memory_total_bytes(self) -> int:
        """nvidia-smi total in bytes."""
        return self.memory_total_mib * _MIB

    @property
    def device_total_bytes(self) -> int:
        """Total as torch reports it (``total_memory``): nvidia-smi total minus the driver's share."""
        return (self.memory_total_mib - self.driver_reserved_mib) * _MIB

    @property
    def preload_free_bytes(self) -> int:
        """Free memory before weights load, SGLang's ``pre_model_load_memory`` (approximation: the
        device total minus the CUDA context; NCCL and custom all-reduce buffers under TP > 1 take a
        few hundred MiB more in a real server and are not modelled)."""
        return (self.memory_total_mib - self.driver_reserved_mib - self.cuda_context_mib) * _MIB

    def host_copy_gbps(self, direction: str) -> float:
        """Pinned copy peak of one direction ("h2d" or "d2h"), GB/s."""
        measured = {"h2d": self.pcie_h2d_gbps, "d2h": self.pcie_d2h_gbps}[direction]
        return measured if measured is not None else self.host_link_gbps * PCIE_MEASURED_SHARE

    @property
    def is_sm90(self) -> bool:
        return self.compute_capability == 90

    @property
    def is_sm100(self) -> bool:
        return self.compute_capability in (100, 103)

    @property
    def is_blackwell(self) -> bool:
        return 100 <= self.compute_capability < 130

    def summary(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "memory_total_mib": self.memory_total_mib,
            "preload_free_bytes": self.preload_free_bytes,
            "hbm_bandwidth_gbps": self.hbm_bandwidth_gbps,
            "bf16_dense_tflops": self.bf16_dense_tflops,
            "host_link_gbps": self.host_link_gbps,
            "pcie_h2d_gbps": self.host_copy_gbps("h2d"),
            "pcie_d2h_gbps": self.host_copy_gbps("d2h"),
            "compute_capability": self.compute_capability,
        }


def _load_presets() -> list[GpuSpec]:
    text = resources.files("simulator").joinpath("presets", "gpus.json").read_text(encoding="utf-8")
    specs = []
    for entry in json.loads(text)["gpus"]:
        entry = dict(entry)
        entry["aliases"] = tuple(entry.get("aliases", ()))
        specs.append(GpuSpec(**entry))
    return specs


_GPUS: PresetRegistry[GpuSpec] = PresetRegistry("GPU", _load_presets)


def register_gpu(spec: GpuSpec) -> None:
    """Add a GPU to the registry; rejects duplicate names or aliases."""
    _GPUS.register(spec)


def gpu_names() -> list[str]:
    """Sorted preset names."""
    return _GPUS.names()


def get_gpu(name: str) -> GpuSpec:
    """Preset by name or alias (case-insensitive); ConfigError lists the valid names."""
    return _GPUS.get(name)
