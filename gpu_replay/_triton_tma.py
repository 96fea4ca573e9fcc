"""Triton kernels that move the host side of a transfer with TMA tensor copies (Hopper).

SGLang's HiCache has a TMA variant of its transfer kernel (``hicache_tma.cuh``) because bulk
copies reach the host link more efficiently than per-thread loads and stores. Here the host pool
is described once per component by a tensor descriptor (its layout's own dims), each program moves
``TOK`` consecutive token rows of one page per step with one TMA load (host -> device) or store
(device -> host), and the device side uses ordinary indexed loads/stores. Page-aligned transfers
only (every ``TOK`` chunk is consecutive host slots inside one page). Imported only when used.
"""

from __future__ import annotations

import triton
import triton.language as tl

# LAYOUT codes: 0 layer_first [L, rows, W]; 1 page_first [rows, L, W]; 2 page_first_direct
# [pages, L, page, W]; W is the row width in int64 words.


@triton.jit
def _host_load(
    desc, layer, s0, LAYOUT: tl.constexpr, PAGE: tl.constexpr, TOK: tl.constexpr, ROWW: tl.constexpr
):
    if LAYOUT == 0:
        x = desc.load([layer, s0, 0])
    elif LAYOUT == 1:
        x = desc.load([s0, layer, 0])
    else:
        x = desc.load([s0 // PAGE, layer, s0 % PAGE, 0])
    return tl.reshape(x, [TOK, ROWW])


@triton.jit
def _host_store(
    desc, layer, s0, x, LAYOUT: tl.constexpr, PAGE: tl.constexpr, TOK: tl.constexpr, ROWW: tl.constexpr
):
    if LAYOUT == 0:
        desc.store([layer, s0, 0], tl.reshape(x, [1, TOK, ROWW]))
    elif LAYOUT == 1:
        desc.store([s0, layer, 0], tl.reshape(x, [TOK, 1, ROWW]))
    else:
        desc.store([s0 // PAGE, layer, s0 % PAGE, 0], tl.reshape(x, [1, 1, TOK, ROWW]))


@triton.jit
def kv_tma_copy(
    k_desc,
    v_desc,
    dev_bases,
    layers,
    host_idx,
    dev_idx,
    n_sel,
    n_chunks,
    n_items,
    dev_page_stride,
    dev_tok_stride,
    H2D: tl.constexpr,
    PAGE: tl.constexpr,
    ROWW: tl.constexpr,
    TOK: tl.constexpr,
    LAYOUT: tl.constexpr,
):
    """Item = (component x selected layer, chunk of TOK tokens); programs stride over items."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    toks = tl.arange(0, TOK)
    cols = tl.arange(0, ROWW)
    for item in range(pid, n_items, nprog):
        slot = item // n_chunks
        t0 = (item % n_chunks) * TOK
        layer = tl.load(layers + slot % n_sel)
        h0 = tl.load(host_idx + t0).to(tl.int32)
        d = tl.load(dev_idx + t0 + toks)
        d_off = (d // PAGE) * dev_page_stride + (d % PAGE) * dev_tok_stride
        dptr = tl.load(dev_bases + slot).to(tl.pointer_type(tl.int64)) + d_off[:, None] + cols[None, :]
        if H2D:
            if slot < n_sel:
                x = _host_load(k_desc, layer, h0, LAYOUT, PAGE, TOK, ROWW)
            else:
                x = _host_load(v_desc, layer, h0, LAYOUT, PAGE, TOK, ROWW)
            tl.store(dptr, x)
        else:
            x = tl.load(dptr)
            if slot < n_sel:
                _host_store(k_desc, layer, h0, x, LAYOUT, PAGE, TOK, ROWW)
            else:
                _host_store(v_desc, layer, h0, x, LAYOUT, PAGE, TOK, ROWW)
