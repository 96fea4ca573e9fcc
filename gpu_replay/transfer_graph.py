"""Copy-engine page copies as the memcpy nodes of an instantiated CUDA graph (not an SGLang path).

Why: the copy engines move random 32 KiB page copies at 95-99% of the copy peak once queued, but
each copy issued through ``cudaMemcpyBatchAsync`` costs the driver 0.5-1 us (about a copy's own
transfer time), which caps bulk transfers at 90-94% and one-layer loads at 48-79% at 4k tokens,
and the issuing thread's driver calls hold up the compute's kernel launches, so loads issued
before the compute hide 0-55% (docs/benchmarks.md, "GPU replay, sixth session"). Here the copies
are the nodes of a graph instantiated once per node count (``kvt_graph_create``); a transfer
rewrites the nodes' addresses in the executable graph (``cudaGraphExecMemcpyNodeSetParams1D``,
unused nodes disabled) and launches it with one call (``kvt_graph_copy``), whether rewriting a
node is cheaper than issuing a copy is what the benchmark measures.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import numpy as np
import torch

from gpu_replay.cuda_build import library
from gpu_replay.pools import DevicePool, HostPool
from gpu_replay.transfer_cuda import _direction, _groups, _Tables

__all__ = ["GraphCopyTransfer"]


class GraphCopyTransfer:
    """Direct-backend page copies (adjacent pages merged) through a reusable CUDA graph; CPU page
    indices; runs on the current stream. One executable graph per node count (rounded up to a
    multiple of 64) is kept; the first transfer of a count instantiates it."""

    def __init__(self, host: HostPool, dev: DevicePool, merge: bool = True) -> None:
        if host.layout == "page_first":
            raise ValueError("page_first host pages of one layer are not contiguous: no direct copies")
        self.host, self.dev, self.merge = host, dev, merge
        self.lib = library()
        self.tables = _Tables(host, dev, on_device=False)
        self._graphs: dict[int, ctypes.c_void_p] = {}

    def _pages(self, idx: torch.Tensor) -> np.ndarray:
        page = self.host.geo.page_size
        if idx.numel() % page:
            raise ValueError("the direct backend moves whole pages")
        return np.ascontiguousarray(idx.cpu().numpy()[::page] // page, dtype=np.int64)

    def _graph(self, n: int, sb: np.ndarray, db: np.ndarray, size: int) -> ctypes.c_void_p:
        """A graph of at least ``n`` nodes (counts rounded up to a multiple of 64; the extra
        nodes are disabled in each launch)."""
        cap = -(-n // 64) * 64
        if cap not in self._graphs:
            h = ctypes.c_void_p()
            rc = self.lib.kvt_graph_create(cap, int(db[0]), int(sb[0]), size, ctypes.byref(h))
            if rc != 0:
                raise RuntimeError(f"kvt_graph_create failed with code {rc}")
            self._graphs[cap] = h
        return self._graphs[cap]

    def __call__(self, host_indices, device_indices, layers: Sequence[int], direction: str) -> None:
        src_idx, dst_idx = _direction(direction, host_indices, device_indices)
        sp, dp = self._pages(src_idx), self._pages(dst_idx)
        if not sp.size:
            return
        page = self.host.geo.page_size
        stream = torch.cuda.current_stream().cuda_stream
        for comps, row_bytes in _groups(self.host):
            sb, db, (sps, _, dps, _) = self.tables.get(comps, tuple(layers), direction)
            g = self._graph(sp.size * sb.size, sb, db, page * row_bytes)
            rc = self.lib.kvt_graph_copy(
                g,
                sb.ctypes.data,
                db.ctypes.data,
                sb.size,
                sp.ctypes.data,
                dp.ctypes.data,
                sp.size,
                sps,
                dps,
                page * row_bytes,
                int(self.merge),
                stream,
            )
            if rc != 0:
                raise RuntimeError(f"kvt_graph_copy failed with code {rc}")

    def close(self) -> None:
        for h in self._graphs.values():
            self.lib.kvt_graph_destroy(h)
        self._graphs.clear()
