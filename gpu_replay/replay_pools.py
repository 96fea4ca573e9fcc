"""Device (and, for write-back, host) pools of an op log, with page tags to check data against.

The op log's header gives the page counts and the per-rank geometry (docs/op-log.md); the pools
are SGLang-shaped (:mod:`gpu_replay.pools`), one per KV pool with layers (FULL, and SWA for a
hybrid model), optionally cut to the first ``layers`` layers of each so a big log fits a small
machine (times then cover those layers only; the summary says how many).

Every allocation writes a tag into each page it gets, in every replayed layer, K and V: a value
derived from the allocation's serial number and the layer, exact in the pool's dtype. A check
reads the live pages back and compares, so an allocation that overwrote a live page, or a move
that lost one, shows up as a wrong tag.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from gpu_replay.geometry import PoolGeometry
from gpu_replay.pools import DevicePool, HostPool, build_device_pool, build_host_pool

__all__ = ["ReplayPool", "pool_geometries", "tag_values"]

_TAG_MOD = 251  # distinct small integers: exact in bf16 (and in fp8 after the same cast)


def tag_values(serial: torch.Tensor, layer: int, component: int) -> torch.Tensor:
    """The tag of allocation ``serial`` in ``layer`` for K (0) or V (1), as float32 integers."""
    salt = 7 * layer + (0 if component == 0 else 101)
    base = serial if component == 0 else serial // _TAG_MOD
    return ((base + salt) % _TAG_MOD + 1).to(torch.float32)


def pool_geometries(header: dict, layers: int | None, host_pages: int) -> list[PoolGeometry]:
    """One :class:`PoolGeometry` per pool with layers, sized by the header's page counts."""
    g = header["geometry"]
    page = header["page_size"]
    out = []
    for name, ids, heads, dim, vdim, pages in (
        (
            "full",
            g["full_layer_ids"],
            g["full_kv_heads"],
            g["full_head_dim"],
            g["full_v_head_dim"],
            "full_pages",
        ),
        ("swa", g["swa_layer_ids"], g["swa_kv_heads"], g["swa_head_dim"], g["swa_v_head_dim"], "swa_pages"),
    ):
        if not ids:
            continue
        ids = tuple(ids[:layers] if layers else ids)
        out.append(
            PoolGeometry(
                name=name,
                layer_ids=ids,
                head_num=heads,
                head_dim=dim,
                v_head_dim=vdim,
                dtype_bytes=g["kv_dtype_bytes"],
                page_size=page,
                device_tokens=header[pages] * page,
                host_tokens=max(1, host_pages) * page,
            )
        )
    return out


@dataclass
class ReplayPool:
    """One pool's device buffers (and host buffers for write-back) and the tags they should hold."""

    geo: PoolGeometry
    dev: DevicePool
    host: HostPool | None
    serial: np.ndarray  # per device page: serial of the allocation whose data it holds (0: none)
    host_serial: np.ndarray  # per host page: serial of the data backed up into it

    @classmethod
    def build(cls, geo: PoolGeometry, device: str, *, host_layout: str | None, stacked: bool) -> ReplayPool:
        dev = build_device_pool(geo, device, stacked=stacked)
        for bufs in (dev.k, dev.v):
            for b in bufs:
                b.zero_()
        host = None
        if host_layout is not None:
            host = build_host_pool(geo, host_layout, pin=device != "cpu")
            host.k.zero_()
            host.v.zero_()
        return cls(
            geo=geo,
            dev=dev,
            host=host,
            serial=np.zeros(geo.device_pages, dtype=np.int64),
            host_serial=np.zeros(geo.host_pages if host is not None else 1, dtype=np.int64),
        )

    @property
    def bytes_per_page(self) -> int:
        """K + V bytes of one page over the replayed layers."""
        return self.geo.page_layer_bytes * self.geo.layer_num

    def _page_view(self, buf: torch.Tensor) -> torch.Tensor:
        g = self.geo
        return buf.view(-1, g.page_size, *buf.shape[1:])

    def prepare_write(self, pages: np.ndarray, serials: np.ndarray) -> list:
        """The stores of :meth:`store` (page indices and tag values on the device), built
        outside the timed span: the tags are the replay's bookkeeping, not SGLang's work."""
        device = self.dev.k[0].device
        idx = torch.from_numpy(pages).to(device, non_blocking=True)
        ser = torch.from_numpy(serials).to(device, non_blocking=True)
        stores = []
        for comp, bufs in enumerate((self.dev.k, self.dev.v)):
            for layer, buf in enumerate(bufs):
                view = self._page_view(buf)
                vals = tag_values(ser, layer, comp).to(buf.dtype).view(-1, 1, 1, 1)
                stores.append((view, vals.expand(len(pages), *view.shape[1:])))
        self.serial[pages] = serials
        return [idx, stores]

    @staticmethod
    def store(prepared: list) -> None:
        """Write each page's tag into every layer, K and V (SGLang's ``set_kv_buffer`` of whole
        pages: one indexed store per layer and component)."""
        idx, stores = prepared
        for view, vals in stores:
            view[idx] = vals

    def write(self, pages: np.ndarray, serials: np.ndarray) -> None:
        self.store(self.prepare_write(pages, serials))

    def bad_pages(self, pages: np.ndarray) -> np.ndarray:
        """The pages among ``pages`` whose device data differs from their tag, in any layer.
        Reads each page's first and last token rows: every write covers whole pages, so a page
        overwritten by another allocation changes both."""
        if len(pages) == 0:
            return pages
        device = self.dev.k[0].device
        p = self.geo.page_size
        rows = (torch.from_numpy(pages)[:, None] * p + torch.tensor([0, p - 1])).flatten().to(device)
        ser = torch.from_numpy(self.serial[pages]).to(device)
        bad = torch.zeros(len(pages), dtype=torch.bool, device=device)
        for comp, bufs in enumerate((self.dev.k, self.dev.v)):
            for layer, buf in enumerate(bufs):
                got = buf[rows].float().view(len(pages), -1)
                want = tag_values(ser, layer, comp).to(buf.dtype).float()[:, None]
                bad |= (got != want).any(dim=1)
        return pages[bad.cpu().numpy()]

    def bad_host_pages(self, pages: np.ndarray) -> np.ndarray:
        """Host pages among ``pages`` whose data differs from the tag of what was backed up."""
        if self.host is None or len(pages) == 0:
            return pages[:0]
        ser = torch.from_numpy(self.host_serial[pages])
        bad = torch.zeros(len(pages), dtype=torch.bool)
        p = self.geo.page_size
        idx = torch.from_numpy(pages)
        for comp, name in enumerate(("k", "v")):
            for layer in range(self.geo.layer_num):
                view = self.host.layer_view(name, layer)
                rows = view[idx] if view.dim() == 4 else view[idx[:, None] * p + torch.arange(p)]
                got = rows.float().flatten(1)
                want = tag_values(ser, layer, comp).to(view.dtype).float()[:, None]
                bad |= (got != want).any(dim=1)
        return pages[bad.numpy()]

    def release(self) -> None:
        if self.host is not None:
            self.host.release()
