"""All-layer page transfers through a bounded device ring (not an SGLang backend).

The copy engines reach the link's peak only on large copies, and the driver charges about a
microsecond per copy; the SM path stops near 90% of the peak on PCIe. For a page_first_direct
host pool a page's K (or V) of every layer is one contiguous run (18 x 32 KiB for gpt-oss-120b
TP 2), so an all-layer transfer can move whole pages by copy engine if the device side is made
contiguous too: the row kernel gathers ``ring_pages`` pages of every layer from the per-layer
device buffers into one ring slot (device to device), and one batch of copy-engine copies moves
the slot's pages to their host pages (reverse order for host to device). ``slots`` ring slots
pipeline the two. The ring is a fixed ``slots x ring_pages`` pages of device memory, whatever
the transfer's size (SGLang's staging path stages the whole transfer).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import torch

from gpu_replay.pools import DevicePool, HostPool, build_host_pool
from gpu_replay.transfer_cuda import CudaConfig, CudaRowsTransfer, _check, library

__all__ = ["StagedTransfer"]


class StagedTransfer:
    """Bounded-ring all-layer page mover for a page_first_direct host pool (indices on the CPU)."""

    def __init__(
        self,
        host: HostPool,
        dev: DevicePool,
        *,
        ring_pages: int = 16,
        slots: int = 3,
        config: CudaConfig | None = None,
    ) -> None:
        if host.layout != "page_first_direct":
            raise ValueError("staged transfers need page_first_direct (a page of every layer contiguous)")
        self.host, self.dev, self.ring_pages = host, dev, ring_pages
        self.lib = library()
        device = dev.k[0].device
        ring_geo = replace(host.geo, host_tokens=ring_pages * host.geo.page_size)
        self.rings = []
        for _ in range(slots):
            ring = build_host_pool(ring_geo, "page_first_direct", pin=False)
            ring.k, ring.v = ring.k.to(device), ring.v.to(device)  # same layout, on the device
            self.rings.append((ring, CudaRowsTransfer(ring, dev, config)))
        self.ring_idx = torch.arange(ring_pages * host.geo.page_size, dtype=torch.int64, device=device)
        self.ce_stream = torch.cuda.Stream(device)
        self.freed = [torch.cuda.Event() for _ in range(slots)]
        self.filled = [torch.cuda.Event() for _ in range(slots)]
        esize = host.k.element_size()
        self.page_bytes = [(t.stride(0) * esize) for t in (host.k, host.v)]

    def __call__(self, host_indices, device_indices, layers: Sequence[int], direction: str) -> None:
        if tuple(layers) != tuple(range(self.host.geo.layer_num)):
            raise ValueError("staged transfers move every layer")
        page = self.host.geo.page_size
        n_pages = host_indices.numel() // page
        host_pages = np.ascontiguousarray(host_indices.numpy()[::page] // page)
        dev_idx = device_indices.pin_memory().to(self.dev.k[0].device, non_blocking=True)
        cur = torch.cuda.current_stream()
        self.ce_stream.wait_stream(cur)
        for i, start in enumerate(range(0, n_pages, self.ring_pages)):
            s = i % len(self.rings)
            ring, mover = self.rings[s]
            n = min(self.ring_pages, n_pages - start)
            tok = slice(start * page, (start + n) * page)
            if direction == "d2h":
                if i >= len(self.rings):
                    cur.wait_event(self.freed[s])  # the engines have drained this slot
                mover(self.ring_idx[: n * page], dev_idx[tok], layers, "d2h")  # device -> ring
                self.filled[s].record(cur)
                self.ce_stream.wait_event(self.filled[s])
                self._engines(ring, host_pages[start : start + n], "d2h")
                self.freed[s].record(self.ce_stream)
            else:
                if i >= len(self.rings):
                    self.ce_stream.wait_event(self.freed[s])  # the kernel has read this slot
                self._engines(ring, host_pages[start : start + n], "h2d")
                self.filled[s].record(self.ce_stream)
                cur.wait_event(self.filled[s])
                mover(self.ring_idx[: n * page], dev_idx[tok], layers, "h2d")  # ring -> device
                self.freed[s].record(cur)
        cur.wait_stream(self.ce_stream)

    def _engines(self, ring: HostPool, host_pages: np.ndarray, direction: str) -> None:
        """One copy-engine copy per (component, page): every layer of the page at once."""
        ring_pages = np.arange(host_pages.size, dtype=np.int64)
        for comp, pb in zip(("k", "v"), self.page_bytes, strict=True):
            h, r = getattr(self.host, comp), getattr(ring, comp)
            src, dst = (h, r) if direction == "h2d" else (r, h)
            sp, dp = (host_pages, ring_pages) if direction == "h2d" else (ring_pages, host_pages)
            sb, db = np.array([src.data_ptr()], dtype=np.int64), np.array([dst.data_ptr()], dtype=np.int64)
            streams = np.array([self.ce_stream.cuda_stream], dtype=np.uint64)
            rc = self.lib.kvt_ce_pages(
                sb.ctypes.data, db.ctypes.data, 1, sp.ctypes.data, dp.ctypes.data, sp.size,
                pb, pb, pb, 0, 1, 0, 1, streams.ctypes.data,
            )  # fmt: skip
            _check(rc, "staged copy-engine batch")
