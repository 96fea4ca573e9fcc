# cython: cpow=True
"""The roofline's scalar arithmetic, one forward at a time, on constants folded once per model.

:class:`~simulator.cost.roofline.CostModel` prices every prefill batch and every decode step the
scheduler runs one by one; these are its formulas for one step with plain floats (its
``decode_times`` keeps the array form of the same formulas). The compiled build types every
number here as a C double (``step_prices.pxd``); each operation is the .py's own, in its order
(setup.py builds without fused multiply-add), so the prices are the same bit for bit. A folded
constant is a subexpression the formulas evaluated on every call before, evaluated once.
"""

from __future__ import annotations

from typing import Any

from simulator.cost.moe_tiles import padded_tokens


class StepPrices:
    """The per-rank constants of one cost model that a step's price reads (from its ``_Rates``,
    coefficients ``c`` and geometry ``g``)."""

    def __init__(self, r: Any, c: Any, g: Any) -> None:
        self.dense_flops_per_token = r.dense_flops_per_token
        self.lm_head_flops_per_request = r.lm_head_flops_per_request
        self.dense_flops_rate = r.dense_flops_rate
        self.dense_m = r.dense_bytes / r.weight_bw  # the dense group's memory time
        self.dense_unhidden = r.dense_unhidden
        self.num_experts = r.num_experts
        self.miss_per_token = r.miss_per_token
        self.experts_per_token = r.experts_per_token
        self.moe_half_tokens = r.moe_half_tokens
        self.moe_flops_per_token = r.moe_flops_per_token
        self.moe_flops_rate = r.moe_flops_rate
        self.expert_bytes = r.expert_bytes
        self.weight_bw = r.weight_bw
        self.moe_unhidden = r.moe_unhidden
        self.moe_tile = r.moe_tile
        self.moe_decode_tile = r.moe_decode_tile
        self.full_flops_per_pair = r.full_flops_per_pair
        self.swa_flops_per_pair = r.swa_flops_per_pair
        self.attn_flops_rate = r.attn_flops_rate
        self.full_kv_bytes = r.full_kv_bytes
        self.swa_kv_bytes = r.swa_kv_bytes
        self.kv_bw = r.kv_bw
        self.prefill_attn_unhidden = r.prefill_attn_unhidden
        self.allreduce_count = r.allreduce_count
        self.allreduce_latency = r.allreduce_latency
        self.allreduce_s_per_token = r.allreduce_s_per_token
        # overhead = step + layer x layers + per_request x requests, left to right
        self.decode_fixed = c.decode_step_overhead_s + c.decode_layer_overhead_s * g.num_layers
        self.decode_per_request = c.decode_per_request_s
        self.prefill_fixed = c.prefill_step_overhead_s + c.prefill_layer_overhead_s * g.num_layers
        self.prefill_per_request = c.prefill_per_request_s


def linear_parts(h: StepPrices, tokens: float, requests: float, tile: int) -> tuple[float, float]:
    """(dense, moe) seconds (``CostModel._linear_parts`` says how)."""
    dense_c = (h.dense_flops_per_token * tokens + h.lm_head_flops_per_request * requests) / h.dense_flops_rate
    dense_m = h.dense_m
    dense = max(dense_c, dense_m)
    if h.dense_unhidden:
        dense += h.dense_unhidden * min(dense_c, dense_m)
    if h.num_experts:
        touched = h.num_experts * (1.0 - h.miss_per_token**tokens)
        n = padded_tokens(tokens, int(h.num_experts), h.experts_per_token, tile) if tile else tokens
        if h.moe_half_tokens:
            n = n + h.moe_half_tokens
        moe_c = h.moe_flops_per_token * n / h.moe_flops_rate
        moe_m = touched * h.expert_bytes / h.weight_bw
        moe = max(moe_c, moe_m)
        if h.moe_unhidden:
            moe += h.moe_unhidden * min(moe_c, moe_m)
    else:
        moe = 0.0
    return dense, moe


def fixed_parts(h: StepPrices, tokens: float, requests: float, decode: bool) -> tuple[float, float]:
    """(allreduce, overhead) seconds of a decode (``decode``) or prefill step."""
    allreduce = h.allreduce_count * (h.allreduce_latency + h.allreduce_s_per_token * tokens)
    if decode:
        overhead = h.decode_fixed + h.decode_per_request * requests
    else:
        overhead = h.prefill_fixed + h.prefill_per_request * requests
    return allreduce, overhead


def attention_parts(
    h: StepPrices, full_pairs: float, swa_pairs: float, full_read: float, swa_read: float, written: float
) -> tuple[float, float]:
    """(attn_full, attn_swa) seconds: ``CostModel._attention_parts`` for floats."""
    attn_full = max(
        full_pairs * h.full_flops_per_pair / h.attn_flops_rate,
        (full_read + written) * h.full_kv_bytes / h.kv_bw,
    )
    attn_swa = max(
        swa_pairs * h.swa_flops_per_pair / h.attn_flops_rate,
        (swa_read + written) * h.swa_kv_bytes / h.kv_bw,
    )
    return attn_full, attn_swa


def attention_unhidden(
    h: StepPrices,
    attn_full: float,
    attn_swa: float,
    full_pairs: float,
    swa_pairs: float,
    full_read: float,
    swa_read: float,
    written: float,
) -> tuple[float, float]:
    """Prefill attention plus its unhidden share: ``+ f x min(FLOP time, KV time)`` per kind
    (FlashAttention's prefill overlaps the KV reads with the tiles' math only in part)."""
    f = h.prefill_attn_unhidden
    full_c = full_pairs * h.full_flops_per_pair / h.attn_flops_rate
    full_m = (full_read + written) * h.full_kv_bytes / h.kv_bw
    swa_c = swa_pairs * h.swa_flops_per_pair / h.attn_flops_rate
    swa_m = (swa_read + written) * h.swa_kv_bytes / h.kv_bw
    return attn_full + f * min(full_c, full_m), attn_swa + f * min(swa_c, swa_m)


def decode_seconds(h: StepPrices, bs: int, full_ctx: float, swa_ctx: float) -> float:
    """One decode step of ``bs`` requests (``CostModel.decode_time`` after its checks)."""
    n = float(bs)
    dense, moe = linear_parts(h, n, n, h.moe_decode_tile)
    attn_full, attn_swa = attention_parts(h, full_ctx, swa_ctx, full_ctx, swa_ctx, n)
    allreduce, overhead = fixed_parts(h, n, n, True)
    return ((((dense + moe) + attn_full) + attn_swa) + allreduce) + overhead


def prefill_parts(
    h: StepPrices,
    tokens: float,
    requests: float,
    full_pairs: float,
    swa_pairs: float,
    full_read: float,
    swa_read: float,
) -> tuple[float, float, float, float, float, float]:
    """(dense, moe, attn_full, attn_swa, allreduce, overhead) of a prefill batch with these sums
    (``CostModel._prefill_inputs``); all zero without extend tokens."""
    if tokens == 0:
        return 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
    dense, moe = linear_parts(h, tokens, requests, h.moe_tile)
    # Prefill reads the prefix KV and the new tokens' KV, and writes the new tokens' KV.
    attn_full, attn_swa = attention_parts(h, full_pairs, swa_pairs, full_read, swa_read, tokens)
    if h.prefill_attn_unhidden:
        attn_full, attn_swa = attention_unhidden(
            h, attn_full, attn_swa, full_pairs, swa_pairs, full_read, swa_read, tokens
        )
    allreduce, overhead = fixed_parts(h, tokens, requests, False)
    return dense, moe, attn_full, attn_swa, allreduce, overhead


def prefill_seconds(
    h: StepPrices,
    tokens: float,
    requests: float,
    full_pairs: float,
    swa_pairs: float,
    full_read: float,
    swa_read: float,
) -> float:
    """One prefill batch's seconds: the sum of :func:`prefill_parts` in ``CostModel._sum``'s order."""
    dense, moe, attn_full, attn_swa, allreduce, overhead = prefill_parts(
        h, tokens, requests, full_pairs, swa_pairs, full_read, swa_read
    )
    return ((((dense + moe) + attn_full) + attn_swa) + allreduce) + overhead
