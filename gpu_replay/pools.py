"""Torch KV pools shaped like SGLang's: per-layer device K/V buffers and a host pool per layout.

Device (``memory_pool.py::MHATokenToKVPool._create_buffers_normal``): one K and one V tensor per
layer, ``[size + page_size, head_num, head_dim]``; page 0 is the padding page.

Host (``pool_host/mha.py::MHATokenToKVPoolHost.init_kv_buffer``), per component (K or V):
- ``layer_first``: ``[layer, tokens, head, dim]``
- ``page_first``: ``[tokens, layer, head, dim]`` (a token's rows of all layers are adjacent)
- ``page_first_direct``: ``[pages, layer, page_size, head, dim]`` (one page-layer is contiguous)

SGLang stacks K and V into one ``[2, ...]`` tensor; by default we keep two tensors with the same
inner layout, which is the same memory pattern per component and allows K and V widths to
differ; ``kv_joint=True`` allocates SGLang's one ``[2, ...]`` buffer.
Host memory is pinned as SGLang pins it: an allocation registered with ``cudaHostRegister``
(``pool_host/common.py::alloc_with_host_register``; torch's pinned allocator would round each
block up to a power of two). Where it comes from is ``gpu_replay.host_alloc``'s choice
(``DEFAULT_HOST_ALLOC``: 2 MiB pages where the OS has them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from gpu_replay.geometry import HOST_LAYOUTS, PoolGeometry
from gpu_replay.host_alloc import HostBuffer, allocate

__all__ = [
    "DEFAULT_HOST_ALLOC",
    "DevicePool",
    "HostPool",
    "PageAddressing",
    "build_device_pool",
    "build_host_pool",
]

# Register pinned memory in chunks of at most this many bytes (SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB).
_REGISTER_CHUNK = 8 << 30
# Host pool memory (gpu_replay.host_alloc kinds): 2 MiB pages where the OS gives them (the SM
# kernels' scattered PCIe reads and writes gain 3-6% on an H100, docs/benchmarks.md "GPU replay,
# fourth session"), torch.empty otherwise.
DEFAULT_HOST_ALLOC = "auto"


@dataclass(frozen=True)
class PageAddressing:
    """Where token ``t`` of layer ``l`` lives in one component buffer, in elements:
    ``base(l) + (t // page) * page_stride + (t % page) * token_stride``; ``bases`` holds the
    address of layer ``l``'s first element. One form covers every layout and the device pool."""

    bases: tuple[int, ...]
    page_stride: int
    token_stride: int


def _dtype(nbytes: int) -> torch.dtype:
    return {2: torch.bfloat16, 1: torch.float8_e4m3fn, 4: torch.float32}[nbytes]


@dataclass
class DevicePool:
    """Per-layer K/V buffers of one pool (full or SWA) on one device."""

    geo: PoolGeometry
    k: list[torch.Tensor]
    v: list[torch.Tensor]

    def addressing(self, component: str) -> PageAddressing:
        bufs = self.k if component == "k" else self.v
        row = bufs[0].stride(0)
        return PageAddressing(
            bases=tuple(b.data_ptr() for b in bufs), page_stride=row * self.geo.page_size, token_stride=row
        )


def build_device_pool(
    geo: PoolGeometry, device: str | torch.device, *, stacked: bool = False, kv_joint: bool = False
) -> DevicePool:
    """Allocate SGLang's per-layer device buffers (``size + page_size`` rows each).

    ``stacked`` carves the per-layer buffers out of one allocation, so that layers sit a constant
    stride apart (SGLang allocates each separately); each buffer is unchanged, and the direct
    backend can then move a page of every layer in one pitched copy. ``kv_joint`` (with equal K
    and V widths) carves K's and V's layers out of one ``[2, layer, ...]`` allocation, so that a
    page of every layer and both components is one 3D copy (``gpu_replay.transfer_batch3d``)."""
    dtype = _dtype(geo.dtype_bytes)
    if kv_joint and geo.head_dim == geo.v_head_dim:
        shape = (2, geo.layer_num, geo.device_rows, geo.head_num, geo.head_dim)
        both = torch.empty(shape, dtype=dtype, device=device)
        return DevicePool(geo=geo, k=list(both[0].unbind(0)), v=list(both[1].unbind(0)))
    out = []
    for dim in (geo.head_dim, geo.v_head_dim):
        shape = (geo.device_rows, geo.head_num, dim)
        if stacked:
            out.append(list(torch.empty((geo.layer_num, *shape), dtype=dtype, device=device).unbind(0)))
        else:
            out.append([torch.empty(shape, dtype=dtype, device=device) for _ in geo.layer_ids])
    return DevicePool(geo=geo, k=out[0], v=out[1])


@dataclass
class HostPool:
    """One pool's host (L2) buffers in one of SGLang's layouts."""

    geo: PoolGeometry
    layout: str
    k: torch.Tensor
    v: torch.Tensor
    registered: list[tuple[int, int]] = field(default_factory=list)
    buffers: list[HostBuffer] = field(default_factory=list)

    @property
    def alloc(self) -> str:
        """The host allocation kind actually used (K's; V's is the same unless memory ran out)."""
        return self.buffers[0].kind if self.buffers else "malloc"

    def layer_view(self, component: str, layer: int) -> torch.Tensor:
        """One layer's view, as SGLang's ``k_data_refs`` / ``v_data_refs``: ``[tokens, head, dim]``
        (strided for page_first), or ``[pages, page_size, head, dim]`` for page_first_direct,
        whose tokens are not one stride apart."""
        buf = self.k if component == "k" else self.v
        if self.layout == "layer_first":
            return buf[layer]
        return buf[:, layer]

    def addressing(self, component: str) -> PageAddressing:
        buf = self.k if component == "k" else self.v
        page = self.geo.page_size
        esize = buf.element_size()
        base = buf.data_ptr()
        if self.layout == "layer_first":
            row = buf.stride(1)
            layer_stride, page_stride, tok = buf.stride(0), row * page, row
        elif self.layout == "page_first":
            layer_stride, tok = buf.stride(1), buf.stride(0)
            page_stride = tok * page
        else:
            page_stride, layer_stride, tok = buf.stride(0), buf.stride(1), buf.stride(2)
        bases = tuple(base + i * layer_stride * esize for i in range(self.geo.layer_num))
        return PageAddressing(bases=bases, page_stride=page_stride, token_stride=tok)

    def release(self) -> None:
        """cudaHostUnregister every range this pool registered."""
        if self.registered:
            cudart = torch.cuda.cudart()
            for ptr, _ in self.registered:
                cudart.cudaHostUnregister(ptr)
            self.registered.clear()
        for b in self.buffers:
            b.free()


def _host_dims(geo: PoolGeometry, layout: str, dim: int) -> tuple[int, ...]:
    if layout == "layer_first":
        return (geo.layer_num, geo.host_rows, geo.head_num, dim)
    if layout == "page_first":
        return (geo.host_rows, geo.layer_num, geo.head_num, dim)
    if layout == "page_first_direct":
        return (geo.host_pages, geo.layer_num, geo.page_size, geo.head_num, dim)
    raise ValueError(f"host layout {layout!r} is not one of {HOST_LAYOUTS}")


def build_host_pool(
    geo: PoolGeometry, layout: str, *, pin: bool, alloc: str | None = None, kv_joint: bool = False
) -> HostPool:
    """Allocate the host pool in ``layout`` from ``alloc`` memory (``DEFAULT_HOST_ALLOC`` when
    None); ``pin`` registers it with CUDA (needs a GPU; ``cuda`` memory is pinned already).
    ``kv_joint`` (equal K and V widths) puts K and V in one ``[2, ...]`` buffer, as SGLang's
    ``init_kv_buffer`` does (V one component stride after K)."""
    dtype = _dtype(geo.dtype_bytes)
    if kv_joint and geo.head_dim == geo.v_head_dim:
        shape = _host_dims(geo, layout, geo.head_dim)
        buf = allocate(2 * geo.dtype_bytes * math.prod(shape), alloc or DEFAULT_HOST_ALLOC)
        both = buf.tensor.view(dtype).view((2, *shape))
        pool = HostPool(geo=geo, layout=layout, k=both[0], v=both[1], buffers=[buf])
        if pin and buf.kind != "cuda":
            pool.registered.extend(_register(both))
        return pool
    tensors, buffers = [], []
    for dim in (geo.head_dim, geo.v_head_dim):
        shape = _host_dims(geo, layout, dim)
        nbytes = geo.dtype_bytes
        for n in shape:
            nbytes *= n
        buf = allocate(nbytes, alloc or DEFAULT_HOST_ALLOC)
        buffers.append(buf)
        tensors.append(buf.tensor.view(dtype).view(shape))
    pool = HostPool(geo=geo, layout=layout, k=tensors[0], v=tensors[1], buffers=buffers)
    if pin:
        for buf, t in zip(buffers, tensors, strict=True):
            if buf.kind != "cuda":
                pool.registered.extend(_register(t))
    return pool


def _register(buf: torch.Tensor) -> list[tuple[int, int]]:
    """pool_host/common.py::_cuda_host_register: cudaHostRegister in bounded chunks."""
    cudart = torch.cuda.cudart()
    base, total = buf.data_ptr(), buf.numel() * buf.element_size()
    done: list[tuple[int, int]] = []
    for off in range(0, total, _REGISTER_CHUNK):
        size = min(_REGISTER_CHUNK, total - off)
        rc = int(cudart.cudaHostRegister(base + off, size, 0))
        if rc != 0:
            for ptr, _ in done:
                cudart.cudaHostUnregister(ptr)
            raise RuntimeError(f"cudaHostRegister failed (rc={rc}) at offset {off} of {total} bytes")
        done.append((base + off, size))
    return done
