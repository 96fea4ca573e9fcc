"""Transfers through the nvcc-built library (``gpu_replay/csrc/kv_transfer.cu``).

- :class:`CudaRowsTransfer` (kernel backend, impl "cuda"): warp-per-chunk SM copy of token rows,
  16-byte accesses with ``unroll`` loads in flight per lane; any layout, any index list.
- :class:`CudaBulkTransfer` (kernel backend, impl "cuda_bulk"): bulk-async (TMA 1D) copies of
  whole page-layer runs through a shared-memory ring; layouts whose page of one layer is
  contiguous (layer_first; page_first_direct), page-aligned index lists (as SGLang passes them).
- :class:`CxxCopyTransfer` (direct backend, impls "cxx_loop", "cxx_batch", "cxx_pitched"): copy
  engines, the per-page copies planned and issued in C++ (no Python per copy).

All run on the current torch stream; the kernel-backend indices live on the device, the direct
ones on the CPU (as in SGLang).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from gpu_replay.cuda_build import library
from gpu_replay.pools import DevicePool, HostPool

__all__ = [
    "CudaBulkTransfer",
    "CudaConfig",
    "CudaRowsTransfer",
    "CxxCopyTransfer",
    "HybridCxxTransfer",
    "cuda_ext_available",
    "side_streams",
]


def cuda_ext_available() -> bool:
    """CUDA device present and the library builds."""
    if not torch.cuda.is_available():
        return False
    try:
        library()
    except (RuntimeError, OSError):
        return False
    return True


@dataclass(frozen=True)
class CudaConfig:
    """Launch shape. ``grid`` 0 means ``blocks_per_sm`` x the SM count."""

    grid: int = 0
    blocks_per_sm: int = 2
    block: int = 256
    unroll: int = 8
    streaming: bool = True
    chunk: int = 0  # bulk: bytes per bulk op, 0 = one page of one layer and component
    stages: int = 4  # bulk: ring depth
    # Programmatic dependent launch: the next kernel of the stream may start while this one
    # drains, completion order kept (kv_transfer.cu, pdl_begin); only on a stream whose earlier
    # kernels touch none of the copied rows, such as a load stream of per-layer loads.
    pdl: bool = False


_SIDE_STREAMS: dict[torch.device, list[torch.cuda.Stream]] = {}


def side_streams(device: torch.device, n: int) -> list[torch.cuda.Stream]:
    """The first ``n`` copy side streams of ``device``, shared by every mover in the process:
    each mover making its own would multiply streams past the GPU's hardware queues, where
    unrelated streams start to wait for each other (seen as per-call cost that grew with the
    number of movers built)."""
    pool = _SIDE_STREAMS.setdefault(torch.device(device), [])
    while len(pool) < n:
        pool.append(torch.cuda.Stream(device))
    return pool[:n]


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise RuntimeError(f"{what} failed with code {rc}")


def _groups(host: HostPool) -> list[tuple[tuple[str, ...], int]]:
    """Components sharing row width go in one launch (K and V usually do)."""
    geo = host.geo
    if geo.head_dim == geo.v_head_dim:
        return [(("k", "v"), geo.k_row_bytes)]
    return [(("k",), geo.k_row_bytes), (("v",), geo.v_row_bytes)]


class _Tables:
    """Per (components, layers, direction): source and destination slot base addresses and the
    page and token strides in bytes, cached (SGLang keeps its pointer tables the same way)."""

    def __init__(self, host: HostPool, dev: DevicePool, on_device: bool) -> None:
        self.host, self.dev, self.on_device = host, dev, on_device
        self.esize = dev.k[0].element_size()
        self._cache: dict[tuple, tuple] = {}

    def get(self, comps: tuple[str, ...], layers: tuple[int, ...], direction: str):
        key = (comps, layers, direction)
        if key not in self._cache:
            h = [self.host.addressing(c) for c in comps]
            d = [self.dev.addressing(c) for c in comps]
            src, dst = (h, d) if direction == "h2d" else (d, h)
            bases = [
                np.array([a.bases[lay] for a in side for lay in layers], dtype=np.int64)
                for side in (src, dst)
            ]
            if self.on_device:
                bases = [torch.from_numpy(b).to(self.dev.k[0].device) for b in bases]
            e = self.esize
            strides = (
                src[0].page_stride * e,
                src[0].token_stride * e,
                dst[0].page_stride * e,
                dst[0].token_stride * e,
            )
            self._cache[key] = (*bases, strides)
        return self._cache[key]


def _direction(direction: str, hi: torch.Tensor, di: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if direction not in ("h2d", "d2h"):
        raise ValueError(f"direction must be 'h2d' or 'd2h', got {direction!r}")
    if hi.numel() != di.numel():
        raise ValueError(f"{hi.numel()} host indices but {di.numel()} device indices")
    return (hi, di) if direction == "h2d" else (di, hi)


class CudaRowsTransfer:
    """Token rows by index, 16-byte vector copies by the SMs (any layout)."""

    def __init__(self, host: HostPool, dev: DevicePool, config: CudaConfig | None = None) -> None:
        self.host, self.dev, self.config = host, dev, config or CudaConfig()
        self.lib = library()
        self.tables = _Tables(host, dev, on_device=True)
        sms = torch.cuda.get_device_properties(dev.k[0].device).multi_processor_count
        self.grid = self.config.grid or self.config.blocks_per_sm * sms

    def __call__(self, host_indices, device_indices, layers: Sequence[int], direction: str) -> None:
        src_idx, dst_idx = _direction(direction, host_indices, device_indices)
        n = src_idx.numel()
        if n == 0:
            return
        cfg, stream = self.config, torch.cuda.current_stream().cuda_stream
        for comps, row_bytes in _groups(self.host):
            sb, db, (sps, sts, dps, dts) = self.tables.get(comps, tuple(layers), direction)
            rc = self.lib.kvt_rows(
                sb.data_ptr(),
                db.data_ptr(),
                sb.numel(),
                src_idx.data_ptr(),
                dst_idx.data_ptr(),
                n,
                sps,
                sts,
                dps,
                dts,
                self.host.geo.page_size,
                row_bytes,
                self.grid,
                cfg.block,
                cfg.unroll,
                int(cfg.streaming) | (2 if cfg.pdl else 0),
                stream,
            )
            _check(rc, "kvt_rows")


class CudaBulkTransfer:
    """Page-layer runs by bulk-async copies through a shared-memory ring (page-aligned lists)."""

    def __init__(self, host: HostPool, dev: DevicePool, config: CudaConfig | None = None) -> None:
        esize = dev.k[0].element_size()
        for comps, row_bytes in _groups(host):
            for c in comps:
                for a in (host.addressing(c), dev.addressing(c)):
                    if a.token_stride * esize != row_bytes:
                        raise ValueError(
                            f"{host.layout}: a page of one layer is not contiguous, no bulk copy"
                        )
        self.host, self.dev, self.config = host, dev, config or CudaConfig(blocks_per_sm=1)
        self.lib = library()
        self.tables = _Tables(host, dev, on_device=True)
        sms = torch.cuda.get_device_properties(dev.k[0].device).multi_processor_count
        self.grid = self.config.grid or self.config.blocks_per_sm * sms

    def __call__(self, host_indices, device_indices, layers: Sequence[int], direction: str) -> None:
        src_idx, dst_idx = _direction(direction, host_indices, device_indices)
        page = self.host.geo.page_size
        if src_idx.numel() % page:
            raise ValueError("bulk copies need page-aligned index lists")
        n_pages = src_idx.numel() // page
        if n_pages == 0:
            return
        cfg, stream = self.config, torch.cuda.current_stream().cuda_stream
        for comps, row_bytes in _groups(self.host):
            sb, db, (sps, _, dps, _) = self.tables.get(comps, tuple(layers), direction)
            page_bytes = page * row_bytes
            chunk = min(cfg.chunk or page_bytes, page_bytes)
            rc = self.lib.kvt_bulk(
                sb.data_ptr(),
                db.data_ptr(),
                sb.numel(),
                src_idx.data_ptr(),
                dst_idx.data_ptr(),
                n_pages,
                sps,
                dps,
                page,
                page_bytes,
                chunk,
                cfg.stages,
                self.grid,
                stream,
                int(cfg.pdl),
            )
            _check(rc, "kvt_bulk")


class CxxCopyTransfer:
    """Copy-engine page copies planned and issued in C++.

    ``mode`` "loop": one cudaMemcpyAsync per (component, layer, page run); "batch": the same copies
    in one cudaMemcpyBatchAsync (off the legacy default stream, which that call refuses);
    "pitched": one cudaMemcpy2DAsync per (component, page run) covering every selected layer,
    where layers sit a constant stride apart on both sides (a stacked device pool). ``streams`` > 1
    splits the copies over that many side streams, issued from as many persistent host threads
    (the stream fan-out and fan-in done in C++); ``max_batch`` caps the copies per batch call (0:
    one call), so the engines start early; ``sort`` orders the pages by host page id first
    (adjacent ids merge into one copy, each engine walks host addresses upwards)."""

    def __init__(
        self,
        host: HostPool,
        dev: DevicePool,
        mode: str = "batch",
        merge: bool = True,
        streams: int = 1,
        max_batch: int = 0,
        side: bool = False,
        sort: bool = False,
    ) -> None:
        if mode not in ("loop", "batch", "pitched"):
            raise ValueError(f"mode must be loop, batch or pitched, not {mode!r}")
        self.host, self.dev, self.mode, self.merge = host, dev, mode, merge
        self.n_streams, self.max_batch, self.side, self.sort = max(1, streams), max_batch, side, sort
        self.lib = library()
        self.tables = _Tables(host, dev, on_device=False)
        self._side: list[torch.cuda.Stream] = []
        self._handles: np.ndarray | None = None

    def _pages(self, idx: torch.Tensor) -> np.ndarray:
        page = self.host.geo.page_size
        if idx.numel() % page:
            raise ValueError("the direct backend moves whole pages")
        return np.ascontiguousarray(idx.numpy()[::page] // page)

    def __call__(self, host_indices, device_indices, layers: Sequence[int], direction: str) -> None:
        cur = torch.cuda.current_stream()
        if self.side or self.n_streams > 1 or (self.mode == "batch" and cur.cuda_stream == 0):
            # Side streams: several issuers, a batch call (it refuses the legacy stream), or a
            # caller that runs other work beside the copies.
            if self.mode != "pitched":
                self._fan(host_indices, device_indices, tuple(layers), direction, cur)
                return
            sides = self.sides_after(cur)
            self.issue(host_indices, device_indices, layers, direction, sides)
            for st in sides:
                cur.wait_stream(st)
        else:
            self.issue(host_indices, device_indices, layers, direction, [cur])

    def _fan(self, host_indices, device_indices, layers: tuple[int, ...], direction: str, cur) -> None:
        """Side streams after ``cur``, copies on them, ``cur`` after them: all in one C++ call."""
        if self._handles is None:
            self._side = side_streams(self.dev.k[0].device, self.n_streams)
            self._handles = np.array([st.cuda_stream for st in self._side], dtype=np.uint64)
        src_idx, dst_idx = _direction(direction, host_indices, device_indices)
        sp, dp = self._pages(src_idx), self._pages(dst_idx)
        if not sp.size:
            return
        streams = self._handles
        sort = (1 if direction == "h2d" else 2) if self.sort else 0
        page = self.host.geo.page_size
        for comps, row_bytes in _groups(self.host):
            sb, db, (sps, _, dps, _) = self.tables.get(comps, layers, direction)
            rc = self.lib.kvt_ce_fan(
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
                sort,
                int(self.mode == "batch"),
                self.max_batch,
                len(self._side),
                streams.ctypes.data,
                cur.cuda_stream,
            )
            _check(rc, f"kvt_ce_fan {self.mode}")

    def sides_after(self, cur: torch.cuda.Stream) -> list[torch.cuda.Stream]:
        """The side streams, each made to wait for the work queued on ``cur`` so far."""
        if len(self._side) < self.n_streams:
            self._side = side_streams(self.dev.k[0].device, self.n_streams)
        for st in self._side:
            st.wait_stream(cur)
        return self._side

    def issue(self, host_indices, device_indices, layers, direction: str, streams) -> None:
        """Plan and issue the copies on ``streams`` (no stream synchronisation here)."""
        src_idx, dst_idx = _direction(direction, host_indices, device_indices)
        sp, dp = self._pages(src_idx), self._pages(dst_idx)
        if sp.size:
            self._issue(sp, dp, tuple(layers), direction, [st.cuda_stream for st in streams])

    def _issue(
        self, sp: np.ndarray, dp: np.ndarray, layers: tuple[int, ...], direction: str, streams: list[int]
    ) -> None:
        stream_arr = np.array(streams, dtype=np.uint64)
        page = self.host.geo.page_size
        for comps, row_bytes in _groups(self.host):
            sb, db, (sps, _, dps, _) = self.tables.get(comps, layers, direction)
            page_bytes = page * row_bytes
            if self.mode == "pitched":
                spitch, dpitch = self._pitches(sb, db, len(comps), len(layers), page_bytes)
                first = [np.ascontiguousarray(x[:: len(layers)]) for x in (sb, db)]
                rc = self.lib.kvt_ce_pitched(
                    first[0].ctypes.data,
                    first[1].ctypes.data,
                    len(comps),
                    sp.ctypes.data,
                    dp.ctypes.data,
                    sp.size,
                    sps,
                    dps,
                    page_bytes,
                    spitch,
                    dpitch,
                    len(layers),
                    int(self.merge),
                    streams[0],
                )
            else:
                rc = self.lib.kvt_ce_pages(
                    sb.ctypes.data,
                    db.ctypes.data,
                    sb.size,
                    sp.ctypes.data,
                    dp.ctypes.data,
                    sp.size,
                    sps,
                    dps,
                    page_bytes,
                    int(self.merge),
                    int(self.mode == "batch"),
                    self.max_batch,
                    len(streams),
                    stream_arr.ctypes.data,
                )
            _check(rc, f"kvt_ce {self.mode}")

    @staticmethod
    def _pitches(sb: np.ndarray, db: np.ndarray, n_comp: int, n_layers: int, width: int) -> tuple[int, int]:
        """The constant layer stride of each side, or ValueError."""
        out = []
        for b in (sb, db):
            steps = np.diff(b.reshape(n_comp, n_layers), axis=1)
            if n_layers > 1 and not (steps == steps.flat[0]).all():
                raise ValueError("pitched copies need layers a constant stride apart (a stacked device pool)")
            out.append(int(steps.flat[0]) if n_layers > 1 else width)
        return out[0], out[1]


class HybridCxxTransfer:
    """Not an SGLang backend: the first ``fraction`` of the pages by the copy engines (C++ batch
    issue, side streams) while the row kernel moves the rest on the current stream, so that the
    driver's per-copy cost and the SM path's lower link efficiency each carry part of the load.
    Indices on the CPU (as the direct backend); the kernel's share goes to the device through a
    pinned buffer in stream order (torch's pinned allocator keeps it until the copy is done)."""

    def __init__(
        self,
        host: HostPool,
        dev: DevicePool,
        fraction: float = 0.5,
        config: CudaConfig | None = None,
        streams: int = 1,
        max_batch: int = 0,
    ) -> None:
        self.fraction, self.page = fraction, host.geo.page_size
        self.ce = CxxCopyTransfer(host, dev, "batch", streams=streams, max_batch=max_batch, side=True)
        self.sm = CudaRowsTransfer(host, dev, config)
        self.device = dev.k[0].device

    def __call__(self, host_indices, device_indices, layers: Sequence[int], direction: str) -> None:
        _direction(direction, host_indices, device_indices)
        n_pages = host_indices.numel() // self.page
        cut = round(n_pages * self.fraction) * self.page
        rest = host_indices.numel() - cut
        cur = torch.cuda.current_stream()
        sides = self.ce.sides_after(cur)  # before the kernel, so the engines need not wait for it
        if rest:
            pinned = torch.empty(2 * rest, dtype=torch.int64, pin_memory=True)
            pinned[:rest].copy_(host_indices[cut:])
            pinned[rest:].copy_(device_indices[cut:])
            idx = pinned.to(self.device, non_blocking=True)
            self.sm(idx[:rest], idx[rest:], layers, direction)
        if cut:
            self.ce.issue(host_indices[:cut], device_indices[:cut], layers, direction, sides)
        for st in sides:
            cur.wait_stream(st)
