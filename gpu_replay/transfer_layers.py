"""A request's load of every layer in one launch of a few persistent blocks (issue 13, ninth
session; ``kvt_layers`` in ``gpu_replay/csrc/kv_transfer.cu``).

Per-layer loads as separate kernels (one per layer, sixth and seventh sessions) ask the block
scheduler for SM slots 18 times, behind the attention's queued blocks, so they hide 0-43% of
their time; on a green-context partition they hide 75-86% but the partition takes its SMs from
the compute for the whole forward. Here one kernel of ``grid`` blocks (one issuing thread each,
the bulk-async ring of :class:`~gpu_replay.transfer_cuda.CudaBulkTransfer`) walks the request's
items in layer order, and each block adds one to ``done[l]`` once its share of layer ``l`` has
landed. Layer ``l`` is loaded when ``done[l]`` has grown by ``grid``: a stream waits for that with
the driver's ``cuStreamWaitValue32`` (the shape of SGLang's ``LayerDoneCounter``, which waits for
one event per layer). The blocks are dispatched once; they leave the SMs when the load ends.

:func:`signal_plan` models the kernel's item walk and signals on the CPU (what the tests check:
every block signals every layer once, and only after its last item of that layer).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import torch

from gpu_replay.cuda_build import library
from gpu_replay.pools import DevicePool, HostPool
from gpu_replay.transfer_cuda import _check, _direction, _groups, _Tables

__all__ = ["LayersLoad", "layer_items", "signal_plan"]

_P, _I, _L = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64
_WAIT_GEQ = 0x0  # CU_STREAM_WAIT_VALUE_GEQ


def layer_items(n_pages: int, chunks_per_page: int, n_comp: int, n_layers: int) -> int:
    """Items of one launch: (layer, component, page, chunk), layer-major."""
    return n_pages * chunks_per_page * n_comp * n_layers


def signal_plan(n_pages: int, chunks_per_page: int, n_comp: int, n_layers: int, grid: int) -> list:
    """For each block, the list of (item index after which it signals, layers signalled), as the
    kernel does it: items ``b, b + grid, ...``; when the next item's layer is higher (or there is
    none) the block signals every layer below it not yet signalled; -1 marks a block with no item."""
    items = layer_items(n_pages, chunks_per_page, n_comp, n_layers)
    per_layer = items // n_layers
    out = []
    for b in range(grid):
        mine = list(range(b, items, grid))
        sig, done = [], 0
        for k, it in enumerate(mine):
            nxt = mine[k + 1] // per_layer if k + 1 < len(mine) else n_layers
            if nxt > it // per_layer:
                sig.append((it, list(range(done, nxt))))
                done = nxt
        if done < n_layers:
            sig.append((-1, list(range(done, n_layers))))
        out.append(sig)
    return out


class _Driver:
    """``cuStreamWaitValue32`` from libcuda (a stream waits until a device word reaches a value)."""

    def __init__(self) -> None:
        lib = ctypes.CDLL("libcuda.so.1")
        for name in ("cuStreamWaitValue32_v2", "cuStreamWaitValue32"):
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.argtypes = [_P, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
                fn.restype = _I
                self.wait32 = fn
                return
        raise RuntimeError("libcuda has no cuStreamWaitValue32")


class LayersLoad:
    """Every selected layer of a request in one ``kvt_layers`` launch on the current stream.

    ``grid`` persistent blocks, a ring of ``stages`` x ``chunk`` bytes each (``chunk`` 0: a page
    of one layer and component). With ``signal``, each launch raises the per-layer counters by
    ``grid`` and :meth:`wait` makes a stream wait for one layer of the last launch."""

    def __init__(
        self,
        host: HostPool,
        dev: DevicePool,
        grid: int = 8,
        chunk: int = 16 << 10,
        stages: int = 4,
        signal: bool = False,
    ) -> None:
        groups = _groups(host)
        if len(groups) != 1:
            raise ValueError("one launch needs K and V of one row width")
        esize = dev.k[0].element_size()
        for c in groups[0][0]:
            for a in (host.addressing(c), dev.addressing(c)):
                if a.token_stride * esize != groups[0][1]:
                    raise ValueError(f"{host.layout}: a page of one layer is not contiguous")
        self.host, self.dev, self.grid = host, dev, grid
        self.chunk, self.stages, self.comps = chunk, stages, groups[0][0]
        self.page_bytes = host.geo.page_size * groups[0][1]
        self.lib = library()
        self.lib.kvt_layers.argtypes = [_P, _P, _I, _I, _P, _P, _L, _L, _L, _I, _L, _I, _I, _I, _P, _P]
        self.lib.kvt_layers.restype = _I
        self.tables = _Tables(host, dev, on_device=True)
        self.done = torch.zeros(host.geo.layer_num, dtype=torch.int32, device=dev.k[0].device)
        self.signal, self.launches, self._driver = signal, 0, None

    def __call__(self, host_indices, device_indices, layers: Sequence[int], direction: str) -> None:
        src_idx, dst_idx = _direction(direction, host_indices, device_indices)
        page = self.host.geo.page_size
        if src_idx.numel() % page:
            raise ValueError("layer loads move whole pages")
        n_pages = src_idx.numel() // page
        if n_pages == 0:
            return
        layers = tuple(layers)
        if self.signal and len(layers) != self.host.geo.layer_num:
            raise ValueError("signalled loads cover every layer (one counter per layer)")
        sb, db, (sps, _, dps, _) = self.tables.get(self.comps, layers, direction)
        chunk = min(self.chunk or self.page_bytes, self.page_bytes)
        done = self.done.data_ptr() if self.signal else None
        rc = self.lib.kvt_layers(
            sb.data_ptr(),
            db.data_ptr(),
            len(self.comps),
            len(layers),
            src_idx.data_ptr(),
            dst_idx.data_ptr(),
            n_pages,
            sps,
            dps,
            page,
            self.page_bytes,
            chunk,
            self.stages,
            self.grid,
            done,
            torch.cuda.current_stream().cuda_stream,
        )
        _check(rc, "kvt_layers")
        self.launches += int(self.signal)

    def wait(self, layer: int, stream: torch.cuda.Stream) -> None:
        """``stream`` waits until the last launch's layer ``layer`` has landed."""
        if not self.signal or self.launches == 0:
            raise RuntimeError("no signalled launch to wait for")
        if self._driver is None:
            self._driver = _Driver()
        target = (self.launches * self.grid) & 0xFFFFFFFF
        addr = self.done.data_ptr() + 4 * layer
        _check(self._driver.wait32(stream.cuda_stream, addr, target, _WAIT_GEQ), "cuStreamWaitValue32")
