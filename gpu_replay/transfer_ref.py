"""Reference host<->device KV page transfers in plain torch (run on CPU or CUDA).

Semantics follow SGLang 0.5.23's host pool (``pool_host/mha.py::MHATokenToKVPoolHost``):
``load_to_device_per_layer`` moves one layer host->device, ``backup_from_device_all_layer`` moves
every layer device->host; indices are token slots (page-aligned runs of ``page_size``), host and
device lists of equal length.

- ``io_backend="kernel"``: SGLang runs a gather/scatter kernel over token rows. The reference
  gathers the rows with ``index_select`` into a staging tensor, copies it across in one bulk copy,
  and scatters it with ``index_copy_``: correct, and the "staging" baseline the optimized kernel
  must beat (it needs a buffer as large as the transfer).
- ``io_backend="direct"``: SGLang's ``transfer_kv_direct`` / ``transfer_kv_*_direct_*`` issue one
  copy per page per layer per component, with indices on the CPU. The reference does the same
  with ``narrow().copy_()``.

Both directions and both scopes (one layer, all layers) are provided for each backend, so the
benchmark can time every combination; SGLang itself only loads per layer and backs up all layers.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from gpu_replay.pools import DevicePool, HostPool

__all__ = ["page_starts", "transfer_direct_ref", "transfer_kernel_ref"]

_COMPONENTS = ("k", "v")


def page_starts(indices: torch.Tensor, page_size: int) -> list[int]:
    """Page ids of a page-aligned token index list (SGLang passes ``n_pages * page_size`` slots)."""
    if indices.numel() % page_size:
        raise ValueError(f"{indices.numel()} token indices are not whole pages of {page_size}")
    starts = indices.reshape(-1, page_size)[:, 0]
    return (starts // page_size).tolist()


def _host_rows(view: torch.Tensor, idx: torch.Tensor, page_size: int) -> torch.Tensor:
    """Gather token rows from a host layer view (3-D token-major, or 4-D page-major)."""
    if view.dim() == 3:
        return view.index_select(0, idx)
    return view[idx // page_size, idx % page_size]


def _put_host_rows(view: torch.Tensor, idx: torch.Tensor, rows: torch.Tensor, page_size: int) -> None:
    if view.dim() == 3:
        view.index_copy_(0, idx, rows)
    else:
        view[idx // page_size, idx % page_size] = rows


def transfer_kernel_ref(
    host: HostPool,
    dev: DevicePool,
    host_indices: torch.Tensor,
    device_indices: torch.Tensor,
    layers: Sequence[int],
    direction: str,
) -> None:
    """Gather -> one bulk copy -> scatter, per layer and component (``direction`` "h2d"/"d2h")."""
    page = host.geo.page_size
    h_idx = host_indices.to("cpu", torch.int64)
    d_idx = device_indices.to(dev.k[0].device, torch.int64)
    for comp in _COMPONENTS:
        dev_bufs = dev.k if comp == "k" else dev.v
        for layer in layers:
            view = host.layer_view(comp, layer)
            if direction == "h2d":
                staged = _host_rows(view, h_idx, page)
                dev_bufs[layer].index_copy_(0, d_idx, staged.to(d_idx.device))
            elif direction == "d2h":
                staged = dev_bufs[layer].index_select(0, d_idx)
                _put_host_rows(view, h_idx, staged.to("cpu"), page)
            else:
                raise ValueError(f"direction must be 'h2d' or 'd2h', got {direction!r}")


def _host_page(host: HostPool, comp: str, layer: int, page_id: int) -> torch.Tensor:
    view = host.layer_view(comp, layer)
    if view.dim() == 4:
        return view[page_id]
    p = host.geo.page_size
    return view.narrow(0, page_id * p, p)


def transfer_direct_ref(
    host: HostPool,
    dev: DevicePool,
    host_indices: torch.Tensor,
    device_indices: torch.Tensor,
    layers: Sequence[int],
    direction: str,
) -> None:
    """One ``copy_`` per page, layer and component, as sgl_kernel's direct transfers issue them
    (``cudaMemcpyAsync`` each). ``layer_first`` and ``page_first_direct`` only, as in SGLang."""
    if host.layout == "page_first":
        raise ValueError("the direct backend has no page_first path (SGLang switches to page_first_direct)")
    if direction not in ("h2d", "d2h"):
        raise ValueError(f"direction must be 'h2d' or 'd2h', got {direction!r}")
    p = host.geo.page_size
    pairs = list(zip(page_starts(host_indices, p), page_starts(device_indices, p), strict=True))
    non_blocking = dev.k[0].is_cuda
    for comp in _COMPONENTS:
        dev_bufs = dev.k if comp == "k" else dev.v
        for layer in layers:
            for hp, dp in pairs:
                h = _host_page(host, comp, layer, hp)
                d = dev_bufs[layer].narrow(0, dp * p, p)
                if direction == "h2d":
                    d.copy_(h, non_blocking=non_blocking)
                else:
                    h.copy_(d, non_blocking=non_blocking)
