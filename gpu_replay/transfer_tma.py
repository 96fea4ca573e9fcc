"""Host<->device KV transfers whose host side moves by TMA (``io_backend="kernel"``, Hopper only).

Same contract as :class:`gpu_replay.transfer_triton.TritonTransfer`, restricted to page-aligned
index lists (what HiCache issues) and rows that are whole int64 words. The host pool is described
by one tensor descriptor per component in its layout's dims; see ``_triton_tma.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from gpu_replay.pools import DevicePool, HostPool
from gpu_replay.transfer_triton import KernelConfig

__all__ = ["TmaTransfer"]

_LAYOUT_CODE = {"layer_first": 0, "page_first": 1, "page_first_direct": 2}


class TmaTransfer:
    """TMA for the host side, indexed loads/stores for the device side; one launch per call."""

    def __init__(self, host: HostPool, dev: DevicePool, config: KernelConfig | None = None) -> None:
        from triton.tools.tensor_descriptor import TensorDescriptor

        geo = host.geo
        if geo.head_dim != geo.v_head_dim or geo.k_row_bytes % 8:
            raise ValueError("the TMA path needs equal K/V widths in whole int64 words")
        self.host, self.dev = host, dev
        self.config = config or KernelConfig(programs=32, tok=64)
        if geo.page_size % self.config.tok:
            raise ValueError(f"tok {self.config.tok} must divide the page size {geo.page_size}")
        self.row_words = geo.k_row_bytes // 8
        self.page = geo.page_size
        tok = self.config.tok
        blocks = {0: [1, tok, self.row_words], 1: [tok, 1, self.row_words], 2: [1, 1, tok, self.row_words]}
        self.code = _LAYOUT_CODE[host.layout]
        self.descs = []
        for buf in (host.k, host.v):
            words = buf.view(torch.int64)
            words = words.reshape(*words.shape[: buf.dim() - 2], self.row_words)
            self.descs.append(
                TensorDescriptor(words, list(words.shape), list(words.stride()), blocks[self.code])
            )
        addr, esize = dev.addressing("k"), dev.k[0].element_size()
        self.dev_strides = tuple(s * esize // 8 for s in (addr.page_stride, addr.token_stride))  # in words
        self._tables: dict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor]] = {}

    def _table(self, layers: tuple[int, ...]):
        hit = self._tables.get(layers)
        if hit is None:
            bases = [self.dev.addressing(c).bases[layer] for c in ("k", "v") for layer in layers]
            device = self.dev.k[0].device
            hit = (
                torch.tensor(bases, dtype=torch.int64, device=device),
                torch.tensor(layers, dtype=torch.int32, device=device),
            )
            self._tables[layers] = hit
        return hit

    def __call__(
        self, host_indices: torch.Tensor, device_indices: torch.Tensor, layers: Sequence[int], direction: str
    ) -> None:
        from gpu_replay._triton_tma import kv_tma_copy

        if direction not in ("h2d", "d2h"):
            raise ValueError(f"direction must be 'h2d' or 'd2h', got {direction!r}")
        n = host_indices.numel()
        if n % self.page or n != device_indices.numel():
            raise ValueError("the TMA path takes equal, page-aligned index lists")
        layers = tuple(layers)
        bases, sel = self._table(layers)
        cfg = self.config
        n_chunks = n // cfg.tok
        n_items = 2 * len(layers) * n_chunks
        kv_tma_copy[(min(n_items, cfg.programs),)](
            self.descs[0],
            self.descs[1],
            bases,
            sel,
            host_indices,
            device_indices,
            len(layers),
            n_chunks,
            n_items,
            *self.dev_strides,
            H2D=direction == "h2d",
            PAGE=self.page,
            ROWW=self.row_words,
            TOK=cfg.tok,
            LAYOUT=self.code,
            num_warps=cfg.num_warps,
        )
