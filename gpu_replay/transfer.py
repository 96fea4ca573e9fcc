"""SGLang's host-pool transfer entry points over our pools, with a choice of implementation.

``load_to_device_per_layer`` and ``backup_from_device_all_layer`` keep the names and meaning of
``pool_host/mha.py::MHATokenToKVPoolHost``; :meth:`KVTransfer.transfer` is the general form (any
layer set, either direction) that the benchmark times.

Implementations per backend:
- kernel: "reference" (torch gather -> staging -> scatter), "triton" (zero-copy SM kernel),
  "triton_tma" (host side by TMA tensor copies; Hopper, page-aligned lists), "cuda" (nvcc-built
  16-byte row copy), "cuda_bulk" (nvcc-built bulk-async page copies through a shared-memory ring);
- direct: "reference" (one torch ``copy_`` per page, layer and component, as sgl_kernel),
  "batch" (one cudaMemcpyBatchAsync of the merged page copies), "loop" (one cudaMemcpyAsync each),
  "pitched" (one cudaMemcpy2DAsync per page run across all layers; needs a stacked device pool),
  "cxx_loop" / "cxx_batch" / "cxx_pitched" (the same copies planned and issued in C++),
  "cxx_3d" (one cudaMemcpy3DBatchAsync op per page run across layers and K/V,
  gpu_replay/transfer_batch3d.py);
- hybrid (not an SGLang backend): a share of the pages by the copy engines ("pitched" or "batch")
  beside the Triton kernel for the rest, or ("cxx") C++-issued batches beside the nvcc-built row
  kernel; ("staged") all-layer pages through a bounded device ring (row kernel + one copy-engine
  copy per page and component, page_first_direct); ("split") copy engines for a share of the
  pages at the same time as the row kernel for the rest (gpu_replay/transfer_split.py);
  indices on the CPU.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from gpu_replay.geometry import resolve_layout_io
from gpu_replay.pools import DevicePool, HostPool
from gpu_replay.transfer_ref import transfer_direct_ref, transfer_kernel_ref

__all__ = ["IMPLS", "KVTransfer"]

IMPLS = {
    "kernel": ("reference", "triton", "triton_tma", "cuda", "cuda_bulk"),
    "direct": ("reference", "batch", "loop", "pitched", "cxx_loop", "cxx_batch", "cxx_pitched", "cxx_3d"),
    "hybrid": ("pitched", "batch", "cxx", "staged", "split"),
}


class KVTransfer:
    """Host<->device page mover for one host pool and its device pool."""

    def __init__(self, host: HostPool, dev: DevicePool, io_backend: str, impl: str, **options) -> None:
        layout, backend = resolve_layout_io(host.layout, "direct" if io_backend == "hybrid" else io_backend)
        if io_backend != "hybrid" and (layout, backend) != (host.layout, io_backend):
            raise ValueError(
                f"--hicache-mem-layout {host.layout} with --hicache-io-backend {io_backend} is not a "
                f"pair SGLang runs (it would use {layout} with {backend})"
            )
        if impl not in IMPLS[io_backend]:
            raise ValueError(f"{io_backend} backend implementations are {IMPLS[io_backend]}, not {impl!r}")
        self.host, self.dev, self.io_backend, self.impl = host, dev, io_backend, impl
        self._fn = self._make(options)

    def _make(self, options):
        host, dev = self.host, self.dev
        if self.impl == "reference":
            ref = transfer_kernel_ref if self.io_backend == "kernel" else transfer_direct_ref
            return lambda hi, di, layers, direction: ref(host, dev, hi, di, layers, direction)
        if self.impl == "triton":
            from gpu_replay.transfer_triton import TritonTransfer

            return TritonTransfer(host, dev, options.get("config"))
        if self.impl == "triton_tma":
            from gpu_replay.transfer_tma import TmaTransfer

            return TmaTransfer(host, dev, options.get("config"))
        if self.impl in ("cuda", "cuda_bulk"):
            from gpu_replay.transfer_cuda import CudaBulkTransfer, CudaRowsTransfer

            cls = CudaRowsTransfer if self.impl == "cuda" else CudaBulkTransfer
            return cls(host, dev, options.get("config"))
        if self.impl == "cxx_3d":
            from gpu_replay.transfer_batch3d import Batch3DTransfer

            keys = ("streams", "max_batch", "sort", "merge", "joint", "hint", "max_pitch")
            return Batch3DTransfer(host, dev, **{k: options[k] for k in keys if k in options})
        if self.impl.startswith("cxx_"):
            from gpu_replay.transfer_cuda import CxxCopyTransfer

            return CxxCopyTransfer(
                host,
                dev,
                mode=self.impl.removeprefix("cxx_"),
                merge=options.get("merge", True),
                streams=options.get("streams", 1),
                max_batch=options.get("max_batch", 0),
                side=options.get("side", False),
                sort=options.get("sort", False),
            )
        if self.impl == "split":
            from gpu_replay.transfer_split import SplitTransfer

            keys = ("streams", "max_batch", "sort", "config")
            opts = {k: options[k] for k in keys if k in options}
            return SplitTransfer(host, dev, fraction=options.get("dma_fraction", 0.55), **opts)
        if self.impl == "staged":
            from gpu_replay.transfer_staged import StagedTransfer

            keys = ("ring_pages", "slots", "config")
            return StagedTransfer(host, dev, **{k: options[k] for k in keys if k in options})
        if self.impl == "cxx":
            from gpu_replay.transfer_cuda import HybridCxxTransfer

            return HybridCxxTransfer(
                host,
                dev,
                fraction=options.get("dma_fraction", 0.5),
                config=options.get("config"),
                streams=options.get("streams", 1),
                max_batch=options.get("max_batch", 0),
            )
        if self.io_backend == "hybrid":
            from gpu_replay.transfer_hybrid import HybridTransfer

            return HybridTransfer(
                host,
                dev,
                dma_fraction=options.get("dma_fraction", 0.3),
                config=options.get("config"),
                dma_mode=self.impl,
            )
        from gpu_replay.transfer_direct import DirectTransfer

        return DirectTransfer(host, dev, mode=self.impl, merge=options.get("merge", True))

    def transfer(
        self, host_indices: torch.Tensor, device_indices: torch.Tensor, layers: Sequence[int], direction: str
    ) -> None:
        """Move token slots ``host_indices`` <-> ``device_indices`` of pool-local ``layers``."""
        self._fn(host_indices, device_indices, layers, direction)

    def load_to_device_per_layer(
        self, host_indices: torch.Tensor, device_indices: torch.Tensor, layer_id: int
    ) -> None:
        """Host -> device, one layer (what HiCache's load-back issues per layer)."""
        self._fn(host_indices, device_indices, (layer_id,), "h2d")

    def backup_from_device_all_layer(self, host_indices: torch.Tensor, device_indices: torch.Tensor) -> None:
        """Device -> host, every layer of the pool (HiCache's write-back)."""
        self._fn(host_indices, device_indices, tuple(range(self.host.geo.layer_num)), "d2h")
