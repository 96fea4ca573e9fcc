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
from gpu_replay.transfer_ref import page_starts

__all__ = ["CopyPlan", "DirectTransfer", "plan_direct"]


@dataclass(frozen=True)
class CopyPlan:
    """Byte copies: ``dst[i] <- src[i]`` of ``size[i]`` bytes."""

    dst: np.ndarray
    src: np.ndarray
    size: np.ndarray

    @property
    def count(self) -> int:
        return int(self.size.size)

    @property
    def nbytes(self) -> int:
        return int(self.size.sum())


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
) -> CopyPlan:
    """One copy per (component, layer, page), merged where both sides continue contiguously."""
    if host.layout == "page_first":
        raise ValueError("the direct backend has no page_first path (SGLang switches to page_first_direct)")
    if direction not in ("h2d", "d2h"):
        raise ValueError(f"direction must be 'h2d' or 'd2h', got {direction!r}")
    page = host.geo.page_size
    hp = np.asarray(page_starts(host_indices.cpu(), page), dtype=np.int64)
    dp = np.asarray(page_starts(device_indices.cpu(), page), dtype=np.int64)
    esize = dev.k[0].element_size()
    dsts, srcs, sizes = [], [], []
    for comp in ("k", "v"):
        h_addr, d_addr = host.addressing(comp), dev.addressing(comp)
        page_bytes = page * d_addr.token_stride * esize
        if h_addr.token_stride != d_addr.token_stride:
            raise ValueError("host and device rows differ in width")
        h = _page_addrs(h_addr, layers, hp, esize)
        d = _page_addrs(d_addr, layers, dp, esize)
        n = np.full(h.shape, page_bytes, dtype=np.int64)
        if merge and hp.size > 1:
            h, d, n = _merge_runs(h, d, n, page_bytes)
        src, dst = (h, d) if direction == "h2d" else (d, h)
        dsts.append(dst.ravel())
        srcs.append(src.ravel())
        sizes.append(n.ravel())
    return CopyPlan(dst=np.concatenate(dsts), src=np.concatenate(srcs), size=np.concatenate(sizes))


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
    planned copy (ctypes, no torch dispatch)."""

    def __init__(self, host: HostPool, dev: DevicePool, *, mode: str = "batch", merge: bool = True) -> None:
        self.host, self.dev, self.mode, self.merge = host, dev, mode, merge
        self.on_cuda = dev.k[0].is_cuda
        self._rt = _cudart() if self.on_cuda else None
        if self._rt is not None:
            ver = ctypes.c_int()
            self._rt.cudaRuntimeGetVersion(ctypes.byref(ver))
            self.runtime_version = ver.value
            self._batch = getattr(self._rt, "cudaMemcpyBatchAsync", None) if ver.value >= 12080 else None

    def __call__(
        self, host_indices: torch.Tensor, device_indices: torch.Tensor, layers: Sequence[int], direction: str
    ) -> CopyPlan:
        plan = plan_direct(
            self.host, self.dev, host_indices, device_indices, layers, direction, merge=self.merge
        )
        self.run(plan, direction)
        return plan

    def run(self, plan: CopyPlan, direction: str) -> None:
        if not self.on_cuda:
            for dst, src, size in zip(plan.dst.tolist(), plan.src.tolist(), plan.size.tolist(), strict=True):
                ctypes.memmove(dst, src, size)
            return
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        if self.mode == "batch" and self._batch is not None:
            self._run_batch(plan, direction, stream)
            return
        fn = self._rt.cudaMemcpyAsync
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        for dst, src, size in zip(plan.dst.tolist(), plan.src.tolist(), plan.size.tolist(), strict=True):
            _check(fn(dst, src, size, _MEMCPY_DEFAULT, stream), "cudaMemcpyAsync")

    def _run_batch(self, plan: CopyPlan, direction: str, stream: ctypes.c_void_p) -> None:
        dev_id = self.dev.k[0].device.index or 0
        attr = _MemcpyAttributes()
        attr.srcAccessOrder = _SRC_ACCESS_ORDER_STREAM
        on_dev, on_host = _MemLocation(_LOC_DEVICE, dev_id), _MemLocation(_LOC_HOST, 0)
        attr.srcLocHint, attr.dstLocHint = (on_host, on_dev) if direction == "h2d" else (on_dev, on_host)
        dst = np.ascontiguousarray(plan.dst, dtype=np.uint64)
        src = np.ascontiguousarray(plan.src, dtype=np.uint64)
        size = np.ascontiguousarray(plan.size, dtype=np.uint64)
        idx = (ctypes.c_size_t * 1)(0)
        args = [dst.ctypes.data, src.ctypes.data, size.ctypes.data, ctypes.c_size_t(plan.count)]
        args += [ctypes.byref(attr), idx, ctypes.c_size_t(1)]
        if self.runtime_version < 13000:
            fail = ctypes.c_size_t(0)
            args.append(ctypes.byref(fail))
        args.append(stream)
        _check(
            self._batch(*[ctypes.c_void_p(a) if isinstance(a, int) else a for a in args]),
            "cudaMemcpyBatchAsync",
        )


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise RuntimeError(f"{what} failed with CUDA error {rc}")
