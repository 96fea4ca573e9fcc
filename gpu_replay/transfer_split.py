"""Scattered pages split between the copy engines and the SM row kernel, run at the same time.

Measured on an H100 (docs/benchmarks.md, "GPU replay, fourth session"): queued ahead, the copy
engines move random 32 KiB page copies at 97-99% of the copy peak, but the driver takes 0.5-0.9 us
to issue each copy (threads barely help), which is about one copy's transfer time, so they reach
only 91-93% end to end; the SM kernel needs no per-copy issue but its PCIe reads and writes are
less efficient (92% H2D, 94.5% D2H of the peak with 2 MiB host pages, 86-91% with 4 KiB ones).
Both at once fill the link: the engines take ``fraction`` of the pages (issued by persistent C++
threads on side streams), the kernel the rest on its own stream. Not an SGLang backend.

Indices on the CPU (as the direct backend). The split and the kernel's device indices are
cached per index pair, since a load-back issues the same pages for every layer.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from gpu_replay.pools import DevicePool, HostPool
from gpu_replay.transfer_cuda import CudaConfig, CudaRowsTransfer, CxxCopyTransfer

__all__ = ["SplitTransfer", "split_pages"]


_KERNEL_STREAMS: dict[torch.device, torch.cuda.Stream] = {}


def _kernel_stream(device: torch.device) -> torch.cuda.Stream:
    """One stream per device for the kernel's share, shared by every split mover (see
    ``transfer_cuda.side_streams`` for why streams are not made per mover)."""
    if device not in _KERNEL_STREAMS:
        _KERNEL_STREAMS[device] = torch.cuda.Stream(device)
    return _KERNEL_STREAMS[device]


def split_pages(n_pages: int, fraction: float) -> int:
    """Pages for the copy engines (the first ones); the rest go to the kernel."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be in [0, 1], got {fraction}")
    return min(n_pages, max(0, round(n_pages * fraction)))


class SplitTransfer:
    """Copy engines for the first ``fraction`` of the pages, the row kernel for the rest."""

    def __init__(
        self,
        host: HostPool,
        dev: DevicePool,
        fraction: float = 0.55,
        streams: int = 4,
        max_batch: int = 128,
        sort: bool = True,
        config: CudaConfig | None = None,
    ) -> None:
        split_pages(1, fraction)
        self.fraction, self.page = fraction, host.geo.page_size
        self.ce = CxxCopyTransfer(
            host, dev, "batch", streams=streams, max_batch=max_batch, side=True, sort=sort
        )
        self.sm = CudaRowsTransfer(host, dev, config)
        self.device = dev.k[0].device
        self._sm_stream = _kernel_stream(self.device)
        self._key: tuple | None = None
        self._parts: tuple | None = None

    def parts(self, host_indices: torch.Tensor, device_indices: torch.Tensor) -> tuple:
        """(engine host slots, engine device slots, kernel host slots, kernel device slots on
        the GPU); the last pair is None when the engines take every page."""
        key = (
            host_indices.data_ptr(),
            device_indices.data_ptr(),
            host_indices.numel(),
            host_indices._version,
            device_indices._version,
        )
        if key != self._key:
            if host_indices.numel() != device_indices.numel() or host_indices.numel() % self.page:
                raise ValueError("split transfers move whole pages, as many host as device slots")
            cut = split_pages(host_indices.numel() // self.page, self.fraction) * self.page
            sm = None
            if cut < host_indices.numel():
                both = np.concatenate([host_indices[cut:].numpy(), device_indices[cut:].numpy()])
                dev_idx = torch.from_numpy(both).pin_memory().to(self.device, non_blocking=True)
                dev_idx.record_stream(self._sm_stream)
                sm = (dev_idx[: both.size // 2], dev_idx[both.size // 2 :])
            self._parts = (host_indices[:cut], device_indices[:cut], sm)
            self._key = key
        return self._parts

    def __call__(self, host_indices, device_indices, layers: Sequence[int], direction: str) -> None:
        ce_h, ce_d, sm = self.parts(host_indices, device_indices)
        cur = torch.cuda.current_stream()
        if sm is not None:
            self._sm_stream.wait_stream(cur)
            with torch.cuda.stream(self._sm_stream):
                self.sm(sm[0], sm[1], layers, direction)
        if ce_h.numel():
            self.ce(ce_h, ce_d, layers, direction)
        if sm is not None:
            cur.wait_stream(self._sm_stream)
