"""Triton gather/scatter of KV token rows between host and device pools (``io_backend="kernel"``).

What SGLang's JIT HiCache kernel does (``sglang/kernels/ops/kvcache/hicache.py``,
``transfer_hicache_one_layer`` / ``transfer_hicache_all_layer``): SMs read and write the pinned
host pool directly through unified addressing, one token row at a time, from token index lists,
with no staging buffer. Ours is written from that description: one launch moves every
(component, layer) slot of a transfer; each program walks a strided share of (slot, token chunk)
items and copies ``TOK`` rows of one slot per step. Every layout and the device pool are
addressed as ``base[slot] + (slot_id // page) * page_stride + (slot_id % page) * token_stride``
(:class:`gpu_replay.pools.PageAddressing`), so one kernel serves layer_first, page_first and
page_first_direct in both directions.

The number of programs is SGLang's "block quota" knob: few programs leave SMs to the forward pass
that the load overlaps; more buy bandwidth. Runs on CUDA, or on CPU tensors under Triton's
interpreter (``TRITON_INTERPRET=1``), which the CPU tests use.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from gpu_replay.pools import DevicePool, HostPool, PageAddressing

__all__ = ["KernelConfig", "TritonTransfer", "triton_available"]


def triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass(frozen=True)
class KernelConfig:
    """Launch shape: ``programs`` caps the grid (SGLang's block quota), ``tok`` rows per step."""

    programs: int = 64
    tok: int = 16
    num_warps: int = 4


@functools.cache
def _kernel():
    """Import the kernel on first use, so that TRITON_INTERPRET set by a test applies."""
    from gpu_replay._triton_kernels import kv_rows_copy

    return kv_rows_copy


def _word_bytes(row_bytes: int, addrs: Sequence[PageAddressing], esize: int) -> int:
    """Widest word (8/4/2/1 bytes) that divides the row, every stride and every base."""
    for word in (8, 4, 2, 1):
        if row_bytes % word:
            continue
        ok = all(
            (a.page_stride * esize) % word == 0
            and (a.token_stride * esize) % word == 0
            and all(b % word == 0 for b in a.bases)
            for a in addrs
        )
        if ok:
            return word
    return 1


class TritonTransfer:
    """Moves token rows between one host pool and one device pool with the Triton kernel.

    Pointer tables are built once per layer selection and kept on the device (SGLang keeps
    ``k_data_ptrs`` / ``v_data_ptrs`` tables the same way)."""

    def __init__(self, host: HostPool, dev: DevicePool, config: KernelConfig | None = None) -> None:
        self.host, self.dev = host, dev
        self.config = config or KernelConfig()
        self.device = dev.k[0].device
        self._groups = self._component_groups()
        self._tables: dict[tuple, tuple] = {}

    def _component_groups(self) -> list[tuple[tuple[str, ...], int]]:
        """Components that share row width and strides go in one launch (K and V usually do)."""
        geo = self.host.geo
        if geo.head_dim == geo.v_head_dim:
            return [(("k", "v"), geo.k_row_bytes)]
        return [(("k",), geo.k_row_bytes), (("v",), geo.v_row_bytes)]

    def _table(self, comps: tuple[str, ...], layers: tuple[int, ...], direction: str, row_bytes: int):
        key = (comps, layers, direction)
        hit = self._tables.get(key)
        if hit is not None:
            return hit
        esize = self.dev.k[0].element_size()
        h = [self.host.addressing(c) for c in comps]
        d = [self.dev.addressing(c) for c in comps]
        src, dst = (h, d) if direction == "h2d" else (d, h)
        word = _word_bytes(row_bytes, h + d, esize)
        scale = esize / word

        def bases(addrs: list[PageAddressing]) -> torch.Tensor:
            vals = [a.bases[layer] for a in addrs for layer in layers]
            return torch.tensor(vals, dtype=torch.int64, device=self.device)

        strides = tuple(
            int(x * scale)
            for x in (src[0].page_stride, src[0].token_stride, dst[0].page_stride, dst[0].token_stride)
        )
        entry = (bases(src), bases(dst), strides, row_bytes // word, word, len(comps) * len(layers))
        self._tables[key] = entry
        return entry

    def __call__(
        self,
        host_indices: torch.Tensor,
        device_indices: torch.Tensor,
        layers: Sequence[int],
        direction: str,
    ) -> None:
        """Copy rows ``host_indices`` <-> ``device_indices`` (int64 token slots on the pool's
        device, equal length) of ``layers``; ``direction`` is "h2d" or "d2h"."""
        if direction not in ("h2d", "d2h"):
            raise ValueError(f"direction must be 'h2d' or 'd2h', got {direction!r}")
        n = host_indices.numel()
        if n != device_indices.numel():
            raise ValueError(f"{n} host indices but {device_indices.numel()} device indices")
        if n == 0:
            return
        src_idx, dst_idx = (
            (host_indices, device_indices) if direction == "h2d" else (device_indices, host_indices)
        )
        cfg = self.config
        kernel = _kernel()
        n_chunks = -(-n // cfg.tok)
        for comps, row_bytes in self._groups:
            src_b, dst_b, strides, row, word, slots = self._table(comps, tuple(layers), direction, row_bytes)
            n_items = slots * n_chunks
            grid = (min(n_items, cfg.programs),)
            kernel[grid](
                src_b,
                dst_b,
                src_idx,
                dst_idx,
                n,
                n_chunks,
                n_items,
                *strides,
                PAGE=self.host.geo.page_size,
                ROW=row,
                ROW_P2=1 << (row - 1).bit_length(),
                TOK=cfg.tok,
                WORD=word,
                num_warps=cfg.num_warps,
            )
