"""MXFP4 expert weights and the routed MoE of a decode batch on them (issue 13).

gpt-oss's experts are MXFP4 (OCP microscaling): 4-bit E2M1 values, two to a byte, with one
shared 8-bit power-of-two scale (E8M0) per 32 consecutive values along the reduction dimension.
SGLang runs them through triton_kernels' ``matmul_ogs``, which (on Hopper) upcasts the 4-bit
values to bf16 inside the kernel and multiplies on the tensor cores; a decode batch reads each
touched expert's 4.25 bits per weight instead of the bf16 stand-in's 16. This module holds:

- the layout: ``packed`` uint8 ``[E, K/2, N]`` (value ``k`` in the low nibble of byte ``k // 2``
  when ``k`` is even, the high nibble when odd), ``scales`` uint8 ``[E, K/32, N]``;
- a torch reference (:func:`dequantize`, :func:`quantize`, :func:`moe_reference`) that runs on
  CPU, and the routing alignment (:func:`align`), torch ops without a host sync (capturable in a
  CUDA graph), in SGLang's ``moe_align_block_size`` shape: each expert's token-expert pairs padded
  to whole ``BM``-row blocks, one expert id per block (-1: no work);
- the Triton kernel (:mod:`gpu_replay._mxfp4_kernel`, imported only on CUDA) that computes one
  expert GEMM per block from the packed values and scales (or from bf16 weights, for the stand-in
  with the same kernel), and :func:`moe_forward`, the decode MoE: router, top-k, alignment, up
  projection, SwiGLU, down projection with the routing weight, sum over the top-k.

What it leaves out against triton_kernels: its swizzled weight layouts, its persistent scheduling
and fused routing; gpt-oss's clamped SwiGLU with bias (a plain SwiGLU here); the expert biases.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = [
    "FP4_VALUES",
    "MoEWeights",
    "align",
    "dequantize",
    "max_blocks",
    "moe_reference",
    "quantize",
    "random_weights",
]

#: E2M1 code -> value (code bit 3 the sign, bits 2-1 the exponent, bit 0 the mantissa)
FP4_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
GROUP = 32  # values per shared scale (MXFP4)
BF16 = torch.bfloat16


def bits_per_weight(mxfp4: bool) -> float:
    """Bytes read per weight x 8: 4 bits + one 8-bit scale per 32 (4.25), or bf16's 16."""
    return 4.0 + 8.0 / GROUP if mxfp4 else 16.0


def dequantize(packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """float32 ``[E, K, N]`` from ``packed`` ``[E, K/2, N]`` and ``scales`` ``[E, K/32, N]``."""
    lut = torch.tensor(FP4_VALUES, dtype=torch.float32, device=packed.device)
    p = packed.to(torch.int64)
    e, half, n = p.shape
    vals = torch.empty(e, 2 * half, n, dtype=torch.float32, device=packed.device)
    vals[:, 0::2] = lut[p & 15]
    vals[:, 1::2] = lut[p >> 4]
    scale = torch.exp2(scales.to(torch.float32) - 127.0).repeat_interleave(GROUP, dim=1)
    return vals * scale


def quantize(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(packed, scales) of float ``w`` ``[E, K, N]`` (``K`` a multiple of 32): per group the scale
    is the power of two that puts the group's largest magnitude in [4, 8) (E2M1's top binade;
    values past 6 saturate), each value rounded to the nearest E2M1 code."""
    e, k, n = w.shape
    if k % GROUP:
        raise ValueError(f"K = {k} is not a multiple of {GROUP}")
    g = w.float().reshape(e, k // GROUP, GROUP, n)
    amax = g.abs().amax(dim=2).clamp_min(2.0**-120)
    exp = torch.floor(torch.log2(amax)) - 2.0
    scales = (exp + 127.0).clamp(1, 254)
    x = g / torch.exp2(scales - 127.0)[:, :, None, :]
    mags = torch.tensor(FP4_VALUES[:8], dtype=torch.float32, device=w.device)
    code = (x.abs()[..., None] - mags).abs().argmin(dim=-1)
    code = code | ((x < 0).to(code.dtype) << 3)
    code = code.reshape(e, k, n)
    packed = (code[:, 0::2] | (code[:, 1::2] << 4)).to(torch.uint8)
    return packed, scales.to(torch.uint8)


@dataclass
class MoEWeights:
    """One MoE layer of one TP rank: router, up (gate and up, ``[E, H, 2I]``) and down
    (``[E, I, H]``), each expert weight either MXFP4 (``*_packed``, ``*_scales``) or bf16."""

    router: torch.Tensor
    up: torch.Tensor | None = None
    down: torch.Tensor | None = None
    up_packed: torch.Tensor | None = None
    up_scales: torch.Tensor | None = None
    down_packed: torch.Tensor | None = None
    down_scales: torch.Tensor | None = None

    @property
    def mxfp4(self) -> bool:
        return self.up_packed is not None


def random_weights(
    experts: int, hidden: int, inter: int, *, mxfp4: bool, device: str = "cuda", seed: int = 0
) -> MoEWeights:
    """Random weights of the given shapes: MXFP4 codes uniform over all 16, scales 2^-6..2^-4
    (weights of magnitude <= 0.375, as a trained layer's), or bf16 of the same spread."""
    gen = torch.Generator(device=device).manual_seed(seed)
    router = (torch.randn(hidden, experts, device=device, generator=gen) * 0.02).to(BF16)
    if not mxfp4:
        up = (torch.randn(experts, hidden, 2 * inter, device=device, generator=gen) * 0.02).to(BF16)
        down = (torch.randn(experts, inter, hidden, device=device, generator=gen) * 0.02).to(BF16)
        return MoEWeights(router, up=up, down=down)

    def packed(k: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        p = torch.randint(0, 256, (experts, k // 2, n), device=device, generator=gen, dtype=torch.int32)
        s = torch.randint(121, 124, (experts, k // GROUP, n), device=device, generator=gen, dtype=torch.int32)
        return p.to(torch.uint8), s.to(torch.uint8)

    up_p, up_s = packed(hidden, 2 * inter)
    dn_p, dn_s = packed(inter, hidden)
    return MoEWeights(router, up_packed=up_p, up_scales=up_s, down_packed=dn_p, down_scales=dn_s)


def route(x: torch.Tensor, router: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights float32 ``[T, k]``, expert ids int64 ``[T, k]``): softmax over the top-k logits."""
    logits = (x @ router).float()
    top, ids = logits.topk(top_k, dim=-1)
    return top.softmax(dim=-1), ids


def max_blocks(pairs: int, experts: int, bm: int) -> int:
    """Blocks enough for any routing of ``pairs`` token-expert pairs: at most one partial block
    per touched expert (``min(E, pairs)``) plus the full ones."""
    return min(experts, pairs) + -(-pairs // bm)


def align(ids: torch.Tensor, experts: int, bm: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(pair index per row int32 ``[B * bm]``, expert per block int32 ``[B]``) with ``B =
    max_blocks``: the pairs of each expert in ascending pair order, padded to whole blocks with
    the sentinel ``pairs`` (rows to skip); blocks past the last expert's get -1. Mirrors SGLang's
    ``moe_align_block_size`` (sglang/srt/layers/moe/fused_moe_triton/moe_align_block_size.py)
    in torch ops with fixed shapes, so a CUDA graph can capture it."""
    flat = ids.reshape(-1).to(torch.int64)
    pairs, dev = flat.numel(), flat.device
    counts = torch.zeros(experts, dtype=torch.int64, device=dev)
    counts.scatter_add_(0, flat, torch.ones_like(flat))
    padded = (counts + bm - 1) // bm * bm
    ends = padded.cumsum(0)
    order = torch.argsort(flat, stable=True)
    sorted_e = flat[order]
    first = (counts.cumsum(0) - counts)[sorted_e]
    pos = (ends - padded)[sorted_e] + torch.arange(pairs, device=dev) - first
    nb = max_blocks(pairs, experts, bm)
    rows = torch.full((nb * bm,), pairs, dtype=torch.int64, device=dev)
    rows.scatter_(0, pos, order)
    start = torch.arange(nb, device=dev) * bm
    eid = torch.searchsorted(ends, start, right=True)
    eid = torch.where(start < ends[-1], eid, torch.full_like(eid, -1))
    return rows.to(torch.int32), eid.to(torch.int32)


def swiglu(h: torch.Tensor) -> torch.Tensor:
    """Gate half times SiLU of the up half (gpt-oss clamps and biases it; timing is the same)."""
    inter = h.shape[-1] // 2
    return torch.nn.functional.silu(h[..., :inter]) * h[..., inter:]


def moe_reference(x: torch.Tensor, w: MoEWeights, top_k: int) -> torch.Tensor:
    """The decode MoE in float32 torch, expert by expert (any device; the kernel's check); the
    SwiGLU output is rounded to ``x``'s dtype, as the kernel stores it."""
    weights, ids = route(x, w.router, top_k)
    cache: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def expert(e: int) -> tuple[torch.Tensor, torch.Tensor]:
        if e not in cache:  # dequantize only the touched experts (a full layer is GBs in float32)
            if w.mxfp4:
                up = dequantize(w.up_packed[e : e + 1], w.up_scales[e : e + 1])[0]
                down = dequantize(w.down_packed[e : e + 1], w.down_scales[e : e + 1])[0]
            else:
                up, down = w.up[e].float(), w.down[e].float()
            cache[e] = (up, down)
        return cache[e]

    hidden = w.router.shape[0]
    out = torch.zeros(x.shape[0], hidden, dtype=torch.float32, device=x.device)
    xf = x.float()
    for t in range(x.shape[0]):
        for j in range(top_k):
            up, down = expert(int(ids[t, j]))
            h = swiglu(xf[t] @ up).to(x.dtype).float()
            out[t] += weights[t, j] * (h @ down)
    return out
