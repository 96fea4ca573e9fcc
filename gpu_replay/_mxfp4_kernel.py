"""The Triton kernel of :mod:`gpu_replay.mxfp4_moe` (imported only on CUDA) and the decode MoE
forward that launches it.

One program computes a ``BM x BN`` tile of one expert's GEMM for one block of token-expert pairs
(SGLang's fused-MoE grid: blocks of aligned pairs x output columns). With MXFP4 weights it loads
``BK / 2`` packed bytes per column and the matching E8M0 scales, splits each byte into its even-k
(low nibble) and odd-k (high nibble) values, builds their bf16 values from the E2M1 bits times the
power-of-two scale, and feeds two tensor-core dots (even and odd columns of the activations).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpu_replay.mxfp4_moe import MoEWeights, align, route, swiglu


@triton.jit
def _dequant(code, sc, BK: tl.constexpr, BN: tl.constexpr, DT: tl.constexpr):
    """``[BK/2, BN]`` values of E2M1 ``code`` (uint8, 0..15) times their group's E8M0 scale ``sc``
    (``[BK/32, BN]``), in ``DT``. The code's 3 exponent-mantissa bits shifted into an e4m3 byte
    (``(code & 7) << 2``, sign to bit 7) are the E2M1 value times 2^-6 exactly, zero and the 0.5
    subnormal included, so the hardware e4m3 conversion does the decoding; the 2^6 goes into the
    scale, a power of two built from its exponent bits."""
    f8 = (((code & 8) << 4) | ((code & 7) << 2)).to(tl.float8e4nv, bitcast=True)
    scale = ((sc.to(tl.int32) + 6) << 23).to(tl.float32, bitcast=True)
    v = tl.reshape(f8.to(tl.float32), (BK // 32, 16, BN)) * scale[:, None, :]
    return tl.reshape(v, (BK // 2, BN)).to(DT)


@triton.jit
def moe_gemm(
    a_ptr,
    w_ptr,
    s_ptr,
    c_ptr,
    rows_ptr,
    eid_ptr,
    wt_ptr,
    N,
    K,
    num_pairs,
    stride_am,
    stride_we,
    stride_wk,
    stride_se,
    stride_sk,
    stride_cm,
    TOP_K: tl.constexpr,
    A_PER_TOKEN: tl.constexpr,
    MUL_WT: tl.constexpr,
    MXFP4: tl.constexpr,
    DOT_SCALED: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    e = tl.load(eid_ptr + pid_m).to(tl.int64)
    if e < 0:
        return
    pairs = tl.load(rows_ptr + pid_m * BM + tl.arange(0, BM))
    valid = pairs < num_pairs
    if A_PER_TOKEN:
        arow = (pairs // TOP_K).to(tl.int64)
    else:
        arow = pairs.to(tl.int64)
    offs_n = pid_n * BN + tl.arange(0, BN)
    nmask = offs_n < N
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    if MXFP4 and DOT_SCALED:
        kf = tl.arange(0, BK)
        j = tl.arange(0, BK // 2)
        g = tl.arange(0, BK // 32)
        for k0 in range(0, K, BK):
            kk = k0 + kf
            a = tl.load(
                a_ptr + arow[:, None] * stride_am + kk[None, :],
                mask=valid[:, None] & (kk < K)[None, :],
                other=0.0,
            )
            wb = tl.load(
                w_ptr + e * stride_we + (k0 // 2 + j)[:, None] * stride_wk + offs_n[None, :],
                mask=((k0 + 2 * j) < K)[:, None] & nmask[None, :],
                other=0,
            )
            sc = tl.load(  # [BN, BK/32], loaded in that shape (dot_scaled's rhs scale layout)
                s_ptr + e * stride_se + (k0 // 32 + g)[None, :] * stride_sk + offs_n[:, None],
                mask=nmask[:, None] & ((k0 + 32 * g) < K)[None, :],
                other=0,
            )
            acc = tl.dot_scaled(a, None, "bf16", wb, sc, "e2m1", acc)
    elif MXFP4:
        j = tl.arange(0, BK // 2)
        g = tl.arange(0, BK // 32)
        for k0 in range(0, K, BK):
            kk = k0 + 2 * j
            km = kk < K
            am = valid[:, None] & km[None, :]
            a_lo = tl.load(a_ptr + arow[:, None] * stride_am + kk[None, :], mask=am, other=0.0)
            a_hi = tl.load(a_ptr + arow[:, None] * stride_am + kk[None, :] + 1, mask=am, other=0.0)
            wb = tl.load(
                w_ptr + e * stride_we + (k0 // 2 + j)[:, None] * stride_wk + offs_n[None, :],
                mask=km[:, None] & nmask[None, :],
                other=0,
            )
            gm = (k0 + 32 * g) < K
            sc = tl.load(
                s_ptr + e * stride_se + (k0 // 32 + g)[:, None] * stride_sk + offs_n[None, :],
                mask=gm[:, None] & nmask[None, :],
                other=0,
            )
            w_lo = _dequant(wb & 15, sc, BK, BN, a_lo.dtype)
            w_hi = _dequant(wb >> 4, sc, BK, BN, a_hi.dtype)
            acc += tl.dot(a_lo, w_lo)
            acc += tl.dot(a_hi, w_hi)
    else:
        k = tl.arange(0, BK)
        for k0 in range(0, K, BK):
            kk = k0 + k
            km = kk < K
            a = tl.load(
                a_ptr + arow[:, None] * stride_am + kk[None, :], mask=valid[:, None] & km[None, :], other=0.0
            )
            w = tl.load(
                w_ptr + e * stride_we + kk[:, None] * stride_wk + offs_n[None, :],
                mask=km[:, None] & nmask[None, :],
                other=0.0,
            )
            acc += tl.dot(a, w.to(a.dtype))  # bf16 as is; fp8 (e4m3) weights upcast in registers
    if MUL_WT:
        wt = tl.load(wt_ptr + pairs, mask=valid, other=0.0)
        acc = acc * wt[:, None]
    out = c_ptr + pairs.to(tl.int64)[:, None] * stride_cm + offs_n[None, :]
    tl.store(out, acc.to(c_ptr.dtype.element_ty), mask=valid[:, None] & nmask[None, :])


def expert_gemm(
    a: torch.Tensor,
    w: torch.Tensor,
    scales: torch.Tensor | None,
    rows: torch.Tensor,
    eid: torch.Tensor,
    out: torch.Tensor,
    *,
    top_k: int,
    a_per_token: bool,
    weights: torch.Tensor | None = None,
    cfg: tuple[int, int, int, int, int] = (16, 64, 128, 4, 3),
    dot_scaled: bool = False,
) -> torch.Tensor:
    """``out[pair] = a[row of pair] @ W[expert of pair]`` (times ``weights[pair]`` if given) for
    every aligned pair; ``w`` packed ``[E, K/2, N]`` with ``scales`` (MXFP4), or bf16 or fp8
    (e4m3, no scale: a per-channel one would be one multiply of the output) ``[E, K, N]``.
    ``cfg``: (BM, BN, BK, num_warps, num_stages). ``dot_scaled``: MXFP4 through Triton's own
    ``tl.dot_scaled`` (bf16 x e2m1 with E8M0 scales; on Hopper the compiler upcasts), instead of
    this module's e4m3-conversion upcast."""
    bm, bn, bk, warps, stages = cfg
    mx = scales is not None
    k = w.shape[1] * (2 if mx else 1)
    n = w.shape[2]
    grid = (eid.numel(), triton.cdiv(n, bn))
    moe_gemm[grid](
        a,
        w,
        scales if mx else w,
        out,
        rows,
        eid,
        weights if weights is not None else a,
        n,
        k,
        out.shape[0],
        a.stride(0),
        w.stride(0),
        w.stride(1),
        scales.stride(0) if mx else 0,
        scales.stride(1) if mx else 0,
        out.stride(0),
        TOP_K=top_k,
        A_PER_TOKEN=a_per_token,
        MUL_WT=weights is not None,
        MXFP4=mx,
        DOT_SCALED=dot_scaled,
        BM=bm,
        BN=bn,
        BK=bk,
        num_warps=warps,
        num_stages=stages,
    )
    return out


def moe_forward(
    x: torch.Tensor,
    w: MoEWeights,
    top_k: int,
    cfg_up: tuple,
    cfg_down: tuple,
    experts: int,
    dot_scaled: bool = False,
) -> torch.Tensor:
    """The decode MoE of ``x`` ``[T, H]``: router, top-k, alignment (no host sync), up GEMM,
    SwiGLU, down GEMM times the routing weight, sum over the top-k, in ``x``'s dtype (bf16 on the
    GPU; float32 for Triton's CPU interpreter, which mishandles bf16 loads). Graph-capturable;
    ``cfg_up`` and ``cfg_down`` must share BM (one alignment)."""
    if cfg_up[0] != cfg_down[0]:
        raise ValueError(f"BM differs: {cfg_up[0]} and {cfg_down[0]}")
    weights, ids = route(x, w.router, top_k)
    rows, eid = align(ids, experts, cfg_up[0])
    t, pairs = x.shape[0], x.shape[0] * top_k
    if w.mxfp4:
        up, up_s, down, down_s = w.up_packed, w.up_scales, w.down_packed, w.down_scales
    else:
        up, up_s, down, down_s = w.up, None, w.down, None
    h = torch.empty(pairs, up.shape[2], device=x.device, dtype=x.dtype)
    ds = dot_scaled and w.mxfp4
    expert_gemm(x, up, up_s, rows, eid, h, top_k=top_k, a_per_token=True, cfg=cfg_up, dot_scaled=ds)
    g = swiglu(h)
    y = torch.empty(pairs, down.shape[2], device=x.device, dtype=x.dtype)
    wt = weights.reshape(-1).contiguous()
    expert_gemm(
        g, down, down_s, rows, eid, y, top_k=top_k, a_per_token=False, weights=wt, cfg=cfg_down, dot_scaled=ds
    )
    return y.view(t, top_k, -1).sum(dim=1)
