"""The Triton kernel behind :mod:`gpu_replay.transfer_triton` (imported only when used: Triton
reads ``TRITON_INTERPRET`` when a kernel is decorated)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _as_ptr(addr, WORD: tl.constexpr):
    """An int64 address as a pointer to ``WORD``-byte words."""
    if WORD == 8:
        return addr.to(tl.pointer_type(tl.int64))
    elif WORD == 4:
        return addr.to(tl.pointer_type(tl.int32))
    elif WORD == 2:
        return addr.to(tl.pointer_type(tl.int16))
    else:
        return addr.to(tl.pointer_type(tl.int8))


@triton.jit
def kv_rows_copy(
    src_bases,
    dst_bases,
    src_idx,
    dst_idx,
    n_tokens,
    n_chunks,
    n_items,
    src_page_stride,
    src_tok_stride,
    dst_page_stride,
    dst_tok_stride,
    PAGE: tl.constexpr,
    ROW: tl.constexpr,
    ROW_P2: tl.constexpr,
    TOK: tl.constexpr,
    WORD: tl.constexpr,
):
    """Copy ``TOK`` token rows per step; an item is (slot, chunk of the token list), programs
    take items ``pid, pid + nprog, ...``. Strides are in words; bases are byte addresses."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    toks = tl.arange(0, TOK)
    cols = tl.arange(0, ROW_P2)
    cmask = cols < ROW
    for item in range(pid, n_items, nprog):
        slot = item // n_chunks
        t = (item % n_chunks) * TOK + toks
        tmask = t < n_tokens
        s = tl.load(src_idx + t, mask=tmask, other=0)
        d = tl.load(dst_idx + t, mask=tmask, other=0)
        s_off = (s // PAGE) * src_page_stride + (s % PAGE) * src_tok_stride
        d_off = (d // PAGE) * dst_page_stride + (d % PAGE) * dst_tok_stride
        sbase = _as_ptr(tl.load(src_bases + slot), WORD)
        dbase = _as_ptr(tl.load(dst_bases + slot), WORD)
        mask = tmask[:, None] & cmask[None, :]
        x = tl.load(sbase + s_off[:, None] + cols[None, :], mask=mask)
        tl.store(dbase + d_off[:, None] + cols[None, :], x, mask=mask)
