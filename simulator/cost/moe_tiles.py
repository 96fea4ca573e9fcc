"""Tile quantisation of a MoE grouped GEMM: how many rows the kernel really computes.

A grouped GEMM (and SGLang's fused MoE, which pads each expert's rows to ``BLOCK_SIZE_M`` in
``moe_align_block_size``, sglang/srt/layers/moe/fused_moe_triton/fused_moe.py) runs each
expert's tokens in whole row tiles of ``T`` rows: an expert that ``c`` tokens chose costs
``ceil(c / T)`` tiles whatever ``c`` is inside them. With ``N`` tokens each choosing ``k`` of
``E`` experts under uniform routing, one expert's count is ``Binomial(N, k/E)`` (a token picks
``k`` distinct experts, so each expert is picked with probability ``k/E``), and the kernel
computes ``E x T x E[ceil(C / T)]`` rows instead of the ``k x N`` routed ones. Between 512 and 4k
tokens of gpt-oss-120b (128 experts, top-4: 16-128 tokens per expert) that is the difference
between a flat and a growing MoE time, which ``max(FLOPs, bytes)`` on the routed rows misses.

The expectation is summed exactly over the binomial's mass (a window of +-12 standard deviations
around the mean, far past float precision) and cached per token count.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

__all__ = ["expected_tiles_per_expert", "padded_tokens"]

_SIGMAS = 12.0


@lru_cache(maxsize=16384)
def expected_tiles_per_expert(tokens: int, p: float, tile: int) -> float:
    """``E[ceil(C / tile)]`` for ``C ~ Binomial(tokens, p)``: the expected row tiles one expert
    computes when ``tokens`` tokens each choose it with probability ``p``."""
    if tokens <= 0 or p <= 0.0:
        return 0.0
    if tile < 1:
        raise ValueError(f"tile must be >= 1, got {tile}")
    if p >= 1.0:
        return float(-(-tokens // tile))
    mean = tokens * p
    sd = math.sqrt(tokens * p * (1.0 - p))
    lo = max(1, math.floor(mean - _SIGMAS * sd - 1.0))
    hi = min(tokens, math.ceil(mean + _SIGMAS * sd + 1.0))
    c = np.arange(lo, hi + 1, dtype=np.float64)
    log_pmf0 = (
        math.lgamma(tokens + 1.0)
        - math.lgamma(lo + 1.0)
        - math.lgamma(tokens - lo + 1.0)
        + lo * math.log(p)
        + (tokens - lo) * math.log1p(-p)
    )
    # pmf(c + 1) / pmf(c) = (tokens - c) / (c + 1) x p / (1 - p), summed in log space
    steps = np.log((tokens - c[:-1]) / (c[:-1] + 1.0)) + math.log(p / (1.0 - p))
    log_pmf = log_pmf0 + np.concatenate(([0.0], np.cumsum(steps)))
    tiles = np.ceil(c / tile)
    return float(np.dot(np.exp(log_pmf), tiles))


def padded_tokens(tokens: float, num_experts: int, top_k: int, tile: int) -> float:
    """The token count whose ``k`` routed rows equal the rows the tiled kernel computes:
    ``E x tile x E[ceil(C / tile)] / k`` (equal to ``tokens`` when ``tile`` is 1)."""
    n = int(round(tokens))
    per_expert = expected_tiles_per_expert(n, top_k / num_experts, tile)
    return num_experts * tile * per_expert / top_k
