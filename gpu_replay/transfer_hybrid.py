"""Split one transfer between the copy engines and the SMs, run side by side.

Neither SGLang backend does this; it is measured because each path alone stops short of the
link's peak for scattered 32 KiB pieces (the SM kernel's requests and the copy engines'
per-copy cost), so the two may fill the link together. The first ``dma_fraction`` of the pages go
through :class:`~gpu_replay.transfer_direct.DirectTransfer` on a side stream, the rest through
:class:`~gpu_replay.transfer_triton.TritonTransfer` on the current stream.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from gpu_replay.pools import DevicePool, HostPool
from gpu_replay.transfer_direct import DirectTransfer
from gpu_replay.transfer_triton import KernelConfig, TritonTransfer

__all__ = ["HybridTransfer"]


class HybridTransfer:
    """Takes CPU index lists (page-aligned); the SM share is copied to the device once and cached
    per index tensor, as SGLang moves host indices to the GPU before a kernel transfer."""

    def __init__(
        self,
        host: HostPool,
        dev: DevicePool,
        *,
        dma_fraction: float = 0.3,
        config: KernelConfig | None = None,
        dma_mode: str = "pitched",
    ) -> None:
        if not 0.0 <= dma_fraction <= 1.0:
            raise ValueError(f"dma_fraction must lie in [0, 1], got {dma_fraction}")
        self.page = host.geo.page_size
        self.fraction = dma_fraction
        self.dma = DirectTransfer(host, dev, mode=dma_mode)
        self.sm = TritonTransfer(host, dev, config)
        self.device = dev.k[0].device
        self._side = torch.cuda.Stream() if dev.k[0].is_cuda else None
        self._split: dict[tuple, tuple] = {}

    def _parts(self, hi: torch.Tensor, di: torch.Tensor):
        key = (hi.data_ptr(), di.data_ptr(), hi.numel())
        hit = self._split.get(key)
        if hit is None:
            n_pages = hi.numel() // self.page
            cut = round(n_pages * self.fraction) * self.page
            hit = (hi[:cut], di[:cut], hi[cut:].to(self.device), di[cut:].to(self.device))
            self._split[key] = hit
        return hit

    def __call__(
        self, host_indices: torch.Tensor, device_indices: torch.Tensor, layers: Sequence[int], direction: str
    ) -> None:
        dma_h, dma_d, sm_h, sm_d = self._parts(host_indices, device_indices)
        if self._side is None:
            if dma_h.numel():
                self.dma(dma_h, dma_d, layers, direction)
            self.sm(sm_h, sm_d, layers, direction)
            return
        cur = torch.cuda.current_stream()
        if dma_h.numel():
            self._side.wait_stream(cur)
            with torch.cuda.stream(self._side):
                self.dma(dma_h, dma_d, layers, direction)
        self.sm(sm_h, sm_d, layers, direction)
        if dma_h.numel():
            cur.wait_stream(self._side)
