"""A request's per-layer loads by the copy engines, issued by background threads.

Why (docs/benchmarks.md, "GPU replay, fourth session" and this session's section): SM-side loads
(the row and TMA kernels) reach >= 90% of the copy peak per layer but hide only 1-22% of the load
behind attention, whose SMs they share; copy-engine loads hide 87-99% when issued after the
compute, but the host's cost per copy (0.5-1 us for a 32 KiB page of one layer) caps a one-layer
call at 79% of the peak at 4k tokens, and issued before the compute it delays the compute's launch.
SGLang issues every layer's load of a request up front on its load stream and the forward's layer
``i`` waits for load ``i`` (``HiCacheController``'s ``LayerDoneCounter``). Here that load is handed
to persistent C++ threads (``kvt_ce_layers_start`` in ``gpu_replay/csrc/kv_transfer.cu``): each owns
a side stream and a share of the pages, issues its copies layer after layer in
``cudaMemcpyBatchAsync`` batches and records an event per layer, while the caller returns at once
to launch compute. :meth:`LayeredCopyLoad.wait` makes a stream wait for one layer (the caller
blocks only until that layer's copies are issued).

Measured on an H100 (docs/benchmarks.md, "GPU replay, sixth session"): 55-81% of the copy peak
per layer at 4k tokens, 62-92% at 32k with one to four threads, no better than issuing on the
caller (the driver serialises the threads), and loads started before the compute still hide only
0-36%: the threads' driver calls hold up the main thread's kernel launches.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import numpy as np
import torch

from gpu_replay.cuda_build import library
from gpu_replay.pools import DevicePool, HostPool
from gpu_replay.transfer_cuda import _Tables, side_streams

__all__ = ["LayeredCopyLoad"]


class LayeredCopyLoad:
    """All layers of one transfer by the copy engines, one event per layer (CPU page indices).

    ``streams`` background threads each issue their share of the pages on their own side stream;
    ``max_batch`` caps the copies per batch call (0: one call per layer and thread); ``sort``
    orders the pages by host page id; ``batch`` False issues one ``cudaMemcpyAsync`` per copy."""

    def __init__(
        self,
        host: HostPool,
        dev: DevicePool,
        streams: int = 2,
        max_batch: int = 0,
        sort: bool = True,
        merge: bool = True,
        batch: bool = True,
    ) -> None:
        geo = host.geo
        if geo.k_row_bytes != geo.v_row_bytes:
            raise ValueError("layered loads need equal K and V row widths")
        if host.layout == "page_first":
            raise ValueError("page_first host pages of one layer are not contiguous: no direct copies")
        self.host, self.dev = host, dev
        self.max_batch, self.sort, self.merge, self.batch = max_batch, sort, merge, batch
        self.lib = library()
        self.tables = _Tables(host, dev, on_device=False)
        sides = side_streams(dev.k[0].device, streams)
        self._handles = np.array([s.cuda_stream for s in sides], dtype=np.uint64)
        self._job: ctypes.c_void_p | None = None
        self._n = 0

    def _pages(self, idx: torch.Tensor) -> np.ndarray:
        page = self.host.geo.page_size
        if idx.numel() % page:
            raise ValueError("the direct backend moves whole pages")
        return np.ascontiguousarray(idx.cpu().numpy()[::page] // page, dtype=np.int64)

    def start(
        self, host_indices, device_indices, layers: Sequence[int], direction: str = "h2d", after: bool = True
    ) -> None:
        """Hand the load of ``layers`` to the issue threads and return. ``after`` False lets the
        copies start without waiting for the work queued on the current stream."""
        if self._job is not None:
            self.finish()
        if direction not in ("h2d", "d2h"):
            raise ValueError(f"direction must be 'h2d' or 'd2h', got {direction!r}")
        layers = tuple(layers)
        hp, dp = self._pages(host_indices), self._pages(device_indices)
        if hp.size != dp.size:
            raise ValueError(f"{hp.size} host pages but {dp.size} device pages")
        sp, tp = (hp, dp) if direction == "h2d" else (dp, hp)
        sb, db, (sps, _, dps, _) = self.tables.get(("k", "v"), layers, direction)
        page_bytes = self.host.geo.page_size * self.host.geo.k_row_bytes
        job = ctypes.c_void_p()
        cur = torch.cuda.current_stream().cuda_stream
        rc = self.lib.kvt_ce_layers_start(
            sb.ctypes.data,
            db.ctypes.data,
            2,
            len(layers),
            sp.ctypes.data,
            tp.ctypes.data,
            sp.size,
            sps,
            dps,
            page_bytes,
            int(self.merge),
            (1 if direction == "h2d" else 2) if self.sort else 0,
            self.max_batch,
            self._handles.size,
            self._handles.ctypes.data,
            cur,
            (0 if self.batch else 1) | (0 if after else 2),
            ctypes.byref(job),
        )
        if rc != 0:
            raise RuntimeError(f"kvt_ce_layers_start failed with code {rc}")
        self._job, self._n = job, len(layers)

    def wait(self, i: int, stream: torch.cuda.Stream | None = None) -> None:
        """``stream`` (default: the current one) waits for the ``i``-th layer of the load."""
        if self._job is None:
            raise RuntimeError("no load in flight")
        s = (stream or torch.cuda.current_stream()).cuda_stream
        rc = self.lib.kvt_ce_layers_wait(self._job, i, s)
        if rc != 0:
            raise RuntimeError(f"kvt_ce_layers_wait failed with code {rc}")

    def finish(self) -> None:
        """Join the issue threads (every copy issued) and release the load's events."""
        if self._job is None:
            return
        job, self._job = self._job, None
        rc = self.lib.kvt_ce_layers_finish(job)
        if rc != 0:
            raise RuntimeError(f"kvt_ce_layers failed with code {rc}")

    def __call__(self, host_indices, device_indices, layers: Sequence[int], direction: str) -> None:
        """A whole transfer: start, the current stream waits for the last layer, finish."""
        self.start(host_indices, device_indices, layers, direction)
        self.wait(self._n - 1)
        self.finish()
