"""Copy-engine page transfers as 3D batch ops: one driver op per page run, every layer and both
components in it (direct backend, impl ``cxx_3d``).

Why: the copy engines move random 32 KiB page copies at 97-99% of the copy peak once queued, but
the driver costs 0.5-1 us per copy issued through ``cudaMemcpyBatchAsync`` against 0.6 us of
transfer per copy (docs/benchmarks.md, "GPU replay, fourth session"), which held bulk transfers
of random pages at 90-94%. ``cudaMemcpy3DBatchAsync`` (CUDA >= 12.8) takes pitched operands: one
op moves ``width`` bytes x ``height`` rows x ``depth`` slices, so where layers sit a constant stride
apart on both sides (a stacked device pool against a layer_first or page_first_direct host pool)
and V one fixed stride after K (``kv_joint`` pools, SGLang's own ``[2, ...]`` host buffer), one op
moves a page of every layer and both components (gpt-oss-120b TP 2, page 64: 18 x 2 x 32 KiB =
1.15 MiB in a bulk transfer; 64 KiB in a one-layer load, where the per-page copies need two).

The ops are planned here with numpy (pages adjacent on both sides merge into one op, as SGLang's
direct backend would issue them page by page: ``transfer_kv_direct`` in sgl-kernel's
``kvcacheio/transfer.cu``); the driver calls are made by ``kvt_ce_3d`` in
``gpu_replay/csrc/kv_transfer.cu``. On CPU tensors the same plan runs through ``ctypes.memmove``,
which is how the CPU tests check its addresses, pitches and merging. Pools whose layers or
components are not a constant stride apart fall back to smaller ops (per component, then per
layer and component), never to a wrong copy.

Measured on an H100 (docs/benchmarks.md, "GPU replay, sixth session"): slower than the 1D batches,
not faster. The driver spends 3-4 us per 3D op (the batch call does not batch pitched ops), and
the engines execute the pitched ops at 66-86% of the copy peak even when queued (27-30% where the
K-to-V stride passes 4 GiB), so this is an implementation to compare, not a default.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from gpu_replay.pools import DevicePool, HostPool

__all__ = ["Batch3DTransfer", "OpShape", "page_ops", "shapes_3d"]


@dataclass(frozen=True)
class OpShape:
    """What every op of one ``kvt_ce_3d`` call shares: each side's base address (the first
    component's first layer), bytes between rows (layers; 0 packed) and rows between slices
    (components; 0 packed), and the copy's rows and slices."""

    src_base: int
    src_row: int
    src_layer_h: int
    dst_base: int
    dst_row: int
    dst_layer_h: int
    height: int
    depth: int


def page_ops(
    src_pages: np.ndarray,
    dst_pages: np.ndarray,
    src_page_bytes: int,
    dst_page_bytes: int,
    page_bytes: int,
    merge: bool,
    sort_key: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Byte offsets (from a slot's base) and widths of one op per page run: pages adjacent on both
    sides merge where a side's pages are ``page_bytes`` apart; ``sort_key`` orders the pages first."""
    sp, dp = np.asarray(src_pages, dtype=np.int64), np.asarray(dst_pages, dtype=np.int64)
    if sort_key is not None:
        order = np.argsort(sort_key, kind="stable")
        sp, dp = sp[order], dp[order]
    n = sp.size
    width = np.full(n, page_bytes, dtype=np.int64)
    if merge and n > 1 and src_page_bytes == page_bytes and dst_page_bytes == page_bytes:
        cut = np.ones(n, dtype=bool)
        cut[1:] = (np.diff(sp) != 1) | (np.diff(dp) != 1)
        starts = np.flatnonzero(cut)
        width = np.diff(np.append(starts, n)).astype(np.int64) * page_bytes
        sp, dp = sp[starts], dp[starts]
    return (
        np.ascontiguousarray(sp * src_page_bytes),
        np.ascontiguousarray(dp * dst_page_bytes),
        np.ascontiguousarray(width),
    )


def _rows(b: np.ndarray, width: int, max_pitch: int | None = None) -> int | None:
    """The constant layer stride of ``b`` ([component, layer] byte addresses) if every component
    has it, it holds ``width`` and is at most ``max_pitch``; 0 for one layer; None otherwise."""
    if b.shape[1] == 1:
        return 0
    steps = np.diff(b, axis=1)
    row = int(steps.flat[0])
    if max_pitch is not None and row > max_pitch:
        return None
    return row if row >= width and (steps == row).all() else None


def _joint(src: np.ndarray, dst: np.ndarray, width: int, max_pitch: int | None) -> OpShape | None:
    """One shape for both components (V a fixed stride after K on both sides, at most
    ``max_pitch`` bytes), or None."""
    if src.shape[0] != 2:
        return None
    order = [0, 1] if src[1, 0] > src[0, 0] else [1, 0]
    sides = []
    for b in (src[order], dst[order]):
        cs = int(b[1, 0] - b[0, 0])
        row = _rows(b, width, max_pitch)
        if cs <= 0 or row is None or not (np.diff(b, axis=0) == cs).all():
            return None
        if max_pitch is not None and cs > max_pitch:
            return None
        if row == 0:  # one layer: a row is the component stride, one row per slice
            if cs < width:
                return None
            sides.append((int(b[0, 0]), cs, 1))
        elif cs % row or cs // row < b.shape[1]:
            return None
        else:
            sides.append((int(b[0, 0]), row, cs // row))
    (sb, sr, sh), (db, dr, dh) = sides
    return OpShape(sb, sr, sh, db, dr, dh, height=src.shape[1], depth=2)


def _same(*allocs: np.ndarray | None) -> bool:
    return all(a is None or (a == a.flat[0]).all() for a in allocs)


def shapes_3d(
    src: np.ndarray,
    dst: np.ndarray,
    width: int,
    joint: bool = True,
    max_pitch: int | None = None,
    allocs: tuple[np.ndarray, np.ndarray] | None = None,
) -> list[OpShape]:
    """The op shapes that cover every (component, layer) slot of ``src`` / ``dst`` ([component,
    layer] base byte addresses) for ops up to ``width`` bytes wide: one for both components where
    they allow it (``joint``), else one per component with a constant layer stride, else one per
    component and layer; no row or slice pitch above ``max_pitch`` bytes (None: no limit).
    ``allocs`` (source, destination: an allocation id per slot) keeps each op inside one
    allocation on each side: the driver refuses an op whose extent spans two (seen on an H100)."""
    sa, da = allocs if allocs is not None else (None, None)
    if joint and _same(sa, da):
        shape = _joint(src, dst, width, max_pitch)
        if shape is not None:
            return [shape]
    out = []
    for c in range(src.shape[0]):
        rs, rd = _rows(src[c : c + 1], width, max_pitch), _rows(dst[c : c + 1], width, max_pitch)
        one = _same(*(None if a is None else a[c] for a in (sa, da)))
        if rs is not None and rd is not None and one:
            out.append(OpShape(int(src[c, 0]), rs, 0, int(dst[c, 0]), rd, 0, height=src.shape[1], depth=1))
            continue
        for lay in range(src.shape[1]):
            out.append(OpShape(int(src[c, lay]), 0, 0, int(dst[c, lay]), 0, 0, height=1, depth=1))
    return out


def run_cpu(shape: OpShape, src_off: np.ndarray, dst_off: np.ndarray, width: np.ndarray) -> None:
    """Execute the ops with ``memmove`` (CPU pools): the plan's addresses, checked by the tests."""
    for so, do, w in zip(src_off.tolist(), dst_off.tolist(), width.tolist(), strict=True):
        s_row, d_row = shape.src_row or w, shape.dst_row or w
        s_sl = s_row * (shape.src_layer_h or shape.height)
        d_sl = d_row * (shape.dst_layer_h or shape.height)
        for z in range(shape.depth):
            for y in range(shape.height):
                ctypes.memmove(
                    shape.dst_base + do + z * d_sl + y * d_row, shape.src_base + so + z * s_sl + y * s_row, w
                )


class Batch3DTransfer:
    """Direct-backend pages as ``cudaMemcpy3DBatchAsync`` ops (CPU index tensors, whole pages).

    ``streams`` 0 issues on the current stream (a side stream when that is the legacy default
    stream, which the call refuses); n > 0 fans the ops out over n shared side streams, each
    issued by its own persistent host thread, in batches of at most ``max_batch`` ops (0: one).
    ``sort`` orders the pages by host page id; ``joint`` allows one op for K and V; ``hint`` sets
    ``cudaMemcpyFlagPreferOverlapWithCompute``; ``max_pitch`` caps the pitches an op may use."""

    def __init__(
        self,
        host: HostPool,
        dev: DevicePool,
        streams: int = 0,
        max_batch: int = 0,
        sort: bool = False,
        merge: bool = True,
        joint: bool = True,
        hint: bool = True,
        max_pitch: int | None = None,
    ) -> None:
        if host.layout == "page_first":
            raise ValueError("page_first host pages of one layer are not contiguous: no direct copies")
        self.host, self.dev = host, dev
        self.streams, self.max_batch, self.sort, self.merge = streams, max_batch, sort, merge
        self.joint, self.hint, self.max_pitch = joint, hint, max_pitch
        self.esize = dev.k[0].element_size()
        self.on_cuda = dev.k[0].is_cuda
        self._shapes: dict[tuple, tuple] = {}
        self._allocs: dict[tuple, tuple] = {}
        self._last: tuple | None = None
        self._handles: np.ndarray | None = None

    def _groups(self) -> list[tuple[tuple[str, ...], int]]:
        g = self.host.geo
        if g.k_row_bytes == g.v_row_bytes:
            return [(("k", "v"), g.k_row_bytes)]
        return [(("k",), g.k_row_bytes), (("v",), g.v_row_bytes)]

    def _bases(self, comps, layers, direction) -> tuple[np.ndarray, np.ndarray, int, int]:
        """[component, layer] base addresses of source and destination, and their page strides."""
        h = [self.host.addressing(c) for c in comps]
        d = [self.dev.addressing(c) for c in comps]
        src, dst = (h, d) if direction == "h2d" else (d, h)
        ha = np.array([[self._host_alloc(a.bases[lay]) for lay in layers] for a in h], dtype=np.int64)
        da = np.array(
            [
                [(self.dev.k if c == "k" else self.dev.v)[lay].untyped_storage().data_ptr() for lay in layers]
                for c in comps
            ],
            dtype=np.int64,
        )
        self._allocs[(comps, layers, direction)] = (ha, da) if direction == "h2d" else (da, ha)
        arrs = [
            np.array([[a.bases[lay] for lay in layers] for a in side], dtype=np.int64) for side in (src, dst)
        ]
        return arrs[0], arrs[1], src[0].page_stride * self.esize, dst[0].page_stride * self.esize

    def _host_alloc(self, addr: int) -> int:
        """The registered range (cudaHostRegister chunk) holding ``addr``, else its buffer."""
        for ptr, size in self.host.registered:
            if ptr <= addr < ptr + size:
                return ptr
        for buf in (self.host.k, self.host.v):
            if buf.data_ptr() <= addr < buf.data_ptr() + buf.numel() * buf.element_size():
                return buf.untyped_storage().data_ptr()
        return addr

    def _plan(self, host_indices, device_indices, direction: str, comps, row_bytes: int, sps: int, dps: int):
        key = (
            direction,
            comps,
            id(host_indices),
            host_indices._version,
            id(device_indices),
            device_indices._version,
        )
        if self._last is not None and self._last[0] == key:
            return self._last[1]
        page = self.host.geo.page_size
        hi, di = host_indices.cpu().numpy(), device_indices.cpu().numpy()
        if hi.size != di.size or hi.size % page:
            raise ValueError("the direct backend moves whole pages (equal, page-aligned index lists)")
        hp, dp = hi[::page] // page, di[::page] // page
        sp, tp = (hp, dp) if direction == "h2d" else (dp, hp)
        ops = page_ops(sp, tp, sps, dps, page * row_bytes, self.merge, hp if self.sort else None)
        self._last = (key, ops, host_indices, device_indices)  # the tensors keep their ids unique
        return ops

    def __call__(self, host_indices, device_indices, layers: Sequence[int], direction: str) -> None:
        if direction not in ("h2d", "d2h"):
            raise ValueError(f"direction must be 'h2d' or 'd2h', got {direction!r}")
        layers = tuple(layers)
        if host_indices.numel() == 0 or not layers:
            return
        for comps, row_bytes in self._groups():
            key = (comps, layers, direction)
            if key not in self._shapes:
                self._shapes[key] = self._bases(comps, layers, direction)
            src, dst, sps, dps = self._shapes[key]
            ops = self._plan(host_indices, device_indices, direction, comps, row_bytes, sps, dps)
            allocs = self._allocs[key]
            for shape in shapes_3d(src, dst, int(ops[2].max()), self.joint, self.max_pitch, allocs):
                if self.on_cuda:
                    self._issue(shape, ops)
                else:
                    run_cpu(shape, *ops)

    def _issue(self, shape: OpShape, ops) -> None:
        from gpu_replay.cuda_build import library
        from gpu_replay.transfer_cuda import side_streams

        cur = torch.cuda.current_stream()
        n = self.streams or (1 if cur.cuda_stream == 0 else 0)
        if n and (self._handles is None or self._handles.size != n):
            self._handles = np.array([s.cuda_stream for s in side_streams(cur.device, n)], dtype=np.uint64)
        handles = self._handles.ctypes.data if n else None
        src_off, dst_off, width = ops
        rc = library().kvt_ce_3d(
            shape.src_base,
            shape.src_row,
            shape.src_layer_h,
            shape.dst_base,
            shape.dst_row,
            shape.dst_layer_h,
            src_off.ctypes.data,
            dst_off.ctypes.data,
            width.ctypes.data,
            width.size,
            shape.height,
            shape.depth,
            int(self.hint),
            self.max_batch,
            n,
            handles,
            cur.cuda_stream,
        )
        if rc != 0:
            raise RuntimeError(f"kvt_ce_3d failed with code {rc}")
