"""Copy-engine page transfers (``io_backend="direct"``) issued as one batch.

SGLang's direct backend (sgl_kernel ``transfer_kv_direct``, ``transfer_kv_per_layer_direct_pf_lf``,
``transfer_kv_all_layer_direct_lf_pf``) issues one ``cudaMemcpyAsync`` per page, layer and
component from CPU-side indices: no SM runs, so it overlaps compute for free, but each copy costs
a driver call. Here the copies are planned with numpy (adjacent pages on both sides merge into one
copy) and submitted in one ``cudaMemcpyBatchAsync`` call (CUDA >= 12.8; SGLang's staged
write-back uses the same call), or one ``cudaMemcpyAsync`` each where that is missing. On CPU the
plan runs through ``ctypes.memmove``, which is how the tests check its addresses.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from gpu_replay.pools import DevicePool, HostPool

__all__ = ["CopyPlan", "DirectTransfer", "plan_direct"]


@dataclass(frozen=True)
class CopyPlan:
    """Byte copies: ``height[i]`` rows of ``width[i]`` bytes from ``src[i]`` to ``dst[i]``, rows
    ``src_pitch[i]`` / ``dst_pitch[i]`` bytes apart (height 1 is a plain copy)."""

    dst: np.ndarray
    src: np.ndarray
    width: np.ndarray
    height: np.ndarray
    dst_pitch: np.ndarray
    src_pitch: np.ndarray

    @property
    def count(self) -> int:
        return int(self.width.size)

    @property
    def nbytes(self) -> int:
        return int((self.width * self.height).sum())

    @property
    def pitched(self) -> bool:
        return bool((self.height > 1).any())


def _page_addrs(addr, layers: Sequence[int], pages: np.ndarray, esize: int) -> np.ndarray:
    """Byte address of each (layer, page) start: shape [len(layers), len(pages)]."""
    bases = np.array([addr.bases[layer] for layer in layers], dtype=np.int64)
    return bases[:, None] + pages[None, :] * (addr.page_stride * esize)


def plan_direct(
    host: HostPool,
    dev: DevicePool,
    host_indices: torch.Tensor,
    device_indices: torch.Tensor,
    layers: Sequence[int],
    direction: str,
    *,
    merge: bool = True,
    pitched: bool = False,
) -> CopyPlan:
    """One copy per (component, layer, page), merged where both sides continue contiguously.

    ``pitched``: where the selected layers sit a constant stride apart on both sides (a stacked
    device pool), one pitched copy moves a page (or run of pages) of every layer."""
    if host.layout == "page_first":
        raise ValueError("the direct backend has no page_first path (SGLang switches to page_first_direct)")
    if direction not in ("h2d", "d2h"):
        raise ValueError(f"direction must be 'h2d' or 'd2h', got {direction!r}")
    page = host.geo.page_size
    hp, dp = _page_ids(host_indices, page), _page_ids(device_indices, page)
    esize = dev.k[0].element_size()
    parts = []
    for comp in ("k", "v"):
        h_addr, d_addr = host.addressing(comp), dev.addressing(comp)
        if h_addr.token_stride != d_addr.token_stride:
            raise ValueError("host and device rows differ in width")
        page_bytes = page * d_addr.token_stride * esize
        h = _page_addrs(h_addr, layers, hp, esize)
        d = _page_addrs(d_addr, layers, dp, esize)
        h_pitch, d_pitch = _layer_pitch(h), _layer_pitch(d)
        rows = 1
        if pitched and h_pitch and d_pitch:
            h, d, rows = h[:1], d[:1], len(layers)
        n = np.full(h.shape, page_bytes, dtype=np.int64)
        if merge and hp.size > 1:
            h, d, n = _merge_runs(h, d, n, page_bytes)
        h, d, n = h.ravel(), d.ravel(), n.ravel()
        src, dst = (h, d) if direction == "h2d" else (d, h)
        sp, dpch = (h_pitch, d_pitch) if direction == "h2d" else (d_pitch, h_pitch)
        full = np.full_like(n, 1)
        parts.append((dst, src, n, full * rows, full * (dpch or 0), full * (sp or 0)))
    cols = [np.concatenate(c) for c in zip(*parts, strict=True)]
    return CopyPlan(*cols)


def _page_ids(indices: torch.Tensor, page: int) -> np.ndarray:
    """page_starts without a Python list (this runs once per transfer, on the issue path)."""
    idx = indices.cpu().numpy()
    if idx.size % page:
        raise ValueError(f"{idx.size} token indices are not whole pages of {page}")
    return idx[::page] // page


def _layer_pitch(addrs: np.ndarray) -> int | None:
    """The constant byte step between consecutive selected layers, if there is one."""
    if addrs.shape[0] < 2:
        return None
    steps = np.diff(addrs[:, 0])
    return int(steps[0]) if steps[0] > 0 and bool((steps == steps[0]).all()) else None


def _merge_runs(h: np.ndarray, d: np.ndarray, n: np.ndarray, page_bytes: int):
    """Per layer row: fuse page i+1 into page i's copy when both addresses follow on."""
    out_h, out_d, out_n = [], [], []
    for hr, dr in zip(h, d, strict=True):
        cont = (np.diff(hr) == page_bytes) & (np.diff(dr) == page_bytes)
        starts = np.flatnonzero(np.concatenate(([True], ~cont)))
        lengths = np.diff(np.append(starts, hr.size))
        out_h.append(hr[starts])
        out_d.append(dr[starts])
        out_n.append(lengths * page_bytes)
    return np.concatenate(out_h), np.concatenate(out_d), np.concatenate(out_n)


class _MemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _MemcpyAttributes(ctypes.Structure):
    _fields_ = [
        ("srcAccessOrder", ctypes.c_int),
        ("srcLocHint", _MemLocation),
        ("dstLocHint", _MemLocation),
        ("flags", ctypes.c_uint),
    ]


_SRC_ACCESS_ORDER_STREAM = 1  # cudaMemcpySrcAccessOrderStream
_LOC_DEVICE, _LOC_HOST = 1, 2  # cudaMemLocationTypeDevice / Host
_MEMCPY_DEFAULT = 4  # cudaMemcpyDefault (direction from unified addresses)


def _cudart() -> ctypes.CDLL:
    """The libcudart that torch already loaded (found in this process's memory map)."""
    with open("/proc/self/maps") as fh:
        for line in fh:
            path = line.split()[-1]
            if "libcudart.so" in path:
                return ctypes.CDLL(path)
    return ctypes.CDLL("libcudart.so")


class DirectTransfer:
    """Runs direct-backend plans on the current CUDA stream (or with memmove on CPU pools).

    ``mode`` "batch": one cudaMemcpyBatchAsync per transfer; "loop": one cudaMemcpyAsync per
    planned copy (ctypes, no torch dispatch); "pitched": one cudaMemcpy2DAsync per page run
    covering every selected layer (needs a stacked device pool; plain copies otherwise)."""

    def __init__(self, host: HostPool, dev: DevicePool, *, mode: str = "batch", merge: bool = True) -> None:
        self.host, self.dev, self.mode, self.merge = host, dev, mode, merge
        self.on_cuda = dev.k[0].is_cuda
        self._rt = _cudart() if self.on_cuda else None
        self._batch = None
        self._side = None
        if self._rt is not None:
            ver = ctypes.c_int()
            self._rt.cudaRuntimeGetVersion(ctypes.byref(ver))
            self.runtime_version = ver.value
            self._batch = getattr(self._rt, "cudaMemcpyBatchAsync", None) if ver.value >= 12080 else None
            self._rt.cudaMemcpyAsync.argtypes = [ctypes.c_void_p] * 2 + [
                ctypes.c_size_t,
                ctypes.c_int,
                ctypes.c_void_p,
            ]
            self._rt.cudaMemcpy2DAsync.argtypes = [ctypes.c_void_p, ctypes.c_size_t] * 2 + [
                ctypes.c_size_t,
                ctypes.c_size_t,
                ctypes.c_int,
                ctypes.c_void_p,
            ]

    def __call__(
        self, host_indices: torch.Tensor, device_indices: torch.Tensor, layers: Sequence[int], direction: str
    ) -> CopyPlan:
        plan = plan_direct(
            self.host,
            self.dev,
            host_indices,
            device_indices,
            layers,
            direction,
            merge=self.merge,
            pitched=self.mode == "pitched",
        )
        self.run(plan, direction)
        return plan

    def run(self, plan: CopyPlan, direction: str) -> None:
        if not self.on_cuda:
            _run_on_cpu(plan)
            return
        cur = torch.cuda.current_stream()
        if self.mode == "batch" and self._batch is not None and not plan.pitched:
            if cur.cuda_stream == 0:
                # cudaMemcpyBatchAsync refuses the legacy default stream: hop to a side stream.
                if self._side is None:
                    self._side = torch.cuda.Stream()
                self._side.wait_stream(cur)
                self._run_batch(plan, direction, ctypes.c_void_p(self._side.cuda_stream))
                cur.wait_stream(self._side)
            else:
                self._run_batch(plan, direction, ctypes.c_void_p(cur.cuda_stream))
            return
        self._run_each(plan, ctypes.c_void_p(cur.cuda_stream))

    def _run_each(self, plan: CopyPlan, stream: ctypes.c_void_p) -> None:
        rt = self._rt
        cols = (plan.dst, plan.src, plan.width, plan.height, plan.dst_pitch, plan.src_pitch)
        for dst, src, width, height, dpitch, spitch in zip(*(c.tolist() for c in cols), strict=True):
            if height == 1:
                rc = rt.cudaMemcpyAsync(dst, src, width, _MEMCPY_DEFAULT, stream)
            else:
                rc = rt.cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, _MEMCPY_DEFAULT, stream)
            self._check(rc, "cudaMemcpyAsync" if height == 1 else "cudaMemcpy2DAsync")

    def _run_batch(self, plan: CopyPlan, direction: str, stream: ctypes.c_void_p) -> None:
        dev_id = self.dev.k[0].device.index or 0
        attr = _MemcpyAttributes()
        attr.srcAccessOrder = _SRC_ACCESS_ORDER_STREAM
        on_dev, on_host = _MemLocation(_LOC_DEVICE, dev_id), _MemLocation(_LOC_HOST, 0)
        attr.srcLocHint, attr.dstLocHint = (on_host, on_dev) if direction == "h2d" else (on_dev, on_host)
        dst = np.ascontiguousarray(plan.dst, dtype=np.uint64)
        src = np.ascontiguousarray(plan.src, dtype=np.uint64)
        size = np.ascontiguousarray(plan.width, dtype=np.uint64)
        idx = (ctypes.c_size_t * 1)(0)
        ptr = ctypes.c_void_p
        args = [
            ptr(dst.ctypes.data),
            ptr(src.ctypes.data),
            ptr(size.ctypes.data),
            ctypes.c_size_t(plan.count),
        ]
        args += [ctypes.byref(attr), idx, ctypes.c_size_t(1)]
        if self.runtime_version < 13000:
            fail = ctypes.c_size_t(0)
            args.append(ctypes.byref(fail))
        args.append(stream)
        self._check(self._batch(*args), "cudaMemcpyBatchAsync")

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            self._rt.cudaGetLastError()  # clear it, so that torch does not trip over it later
            raise RuntimeError(f"{what} failed with CUDA error {rc}")


def _run_on_cpu(plan: CopyPlan) -> None:
    cols = (plan.dst, plan.src, plan.width, plan.height, plan.dst_pitch, plan.src_pitch)
    for dst, src, width, height, dpitch, spitch in zip(*(c.tolist() for c in cols), strict=True):
        for row in range(height):
            ctypes.memmove(dst + row * dpitch, src + row * spitch, width)
