"""The cost model's step-shape terms (``*_unhidden_fraction``, ``moe_flops_half_tokens``): off by
default (the plain roofline, to the bit), each doing what docs/cost-model.md says when set, and
checked when a profile sets them."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.cost import CostCoefficients, CostModel, validate_profile
from simulator.errors import ConfigError
from simulator.gpus import get_gpu
from simulator.models import get_model

GPT_OSS = get_model("gpt-oss-120b")
H100 = get_gpu("H100")
TERMS = (
    "dense_unhidden_fraction",
    "moe_unhidden_fraction",
    "prefill_attention_unhidden_fraction",
    "moe_flops_half_tokens",
)
PREFILLS = [([512], [0]), ([2048], [8192]), ([3000, 17], [0, 40000]), ([16384], [0])]
DECODES = [(1, 1024, 128), (64, 64 * 4096, 64 * 128), (256, 256 * 8192, 256 * 128)]


def _model(**coeffs) -> CostModel:
    prof = {"version": 1, "coefficients": coeffs} if coeffs else None
    return CostModel.from_presets(GPT_OSS, H100, 2, prof)


def _roofline_groups(cm: CostModel, tokens: float, requests: float) -> dict[str, tuple[float, float]]:
    """(compute, memory) seconds of the dense and MoE groups, from describe()'s per-rank numbers:
    an independent statement of the roofline."""
    d = cm.describe()["per_rank"]
    g = cm.geometry
    lm_head = 2.0 * g.lm_head_params / cm.tp
    dense_c = (d["dense_flops_per_token"] * tokens + lm_head * requests) / (
        d["achievable_dense_tflops"] * 1e12
    )
    dense_m = d["dense_weight_bytes"] / (d["achievable_weight_bandwidth_gbps"] * 1e9)
    moe_c = d["moe_flops_per_token"] * tokens / (d["achievable_moe_tflops"] * 1e12)
    touched = cm.experts_touched(int(tokens))
    moe_m = (
        touched * d["all_expert_weight_bytes"] / g.num_experts / (d["achievable_weight_bandwidth_gbps"] * 1e9)
    )
    return {"dense": (dense_c, dense_m), "moe": (moe_c, moe_m)}


def test_defaults_are_the_plain_roofline():
    cm = _model()
    assert all(getattr(cm.coefficients, t) == 0.0 for t in TERMS)
    for ext, pre in PREFILLS:
        br = cm.prefill_breakdown(ext, pre)
        for name, (c, m) in _roofline_groups(cm, float(sum(ext)), float(len(ext))).items():
            assert br[name] == pytest.approx(max(c, m), rel=1e-12)


def test_terms_set_to_zero_change_nothing_bit_for_bit():
    base, zero = _model(), _model(**dict.fromkeys(TERMS, 0.0))
    for ext, pre in PREFILLS:
        assert zero.prefill_time(ext, pre) == base.prefill_time(ext, pre)
        assert zero.prefill_breakdown(ext, pre) == base.prefill_breakdown(ext, pre)
    for bs, full, swa in DECODES:
        assert zero.decode_time(bs, full, swa) == base.decode_time(bs, full, swa)
        assert zero.decode_terms(bs) == base.decode_terms(bs)
        np.testing.assert_array_equal(
            zero.decode_times(bs, full, swa, 50, bs, bs), base.decode_times(bs, full, swa, 50, bs, bs)
        )


@pytest.mark.parametrize("frac", [0.25, 1.0])
def test_unhidden_fraction_adds_that_share_of_the_shorter_time(frac):
    base = _model()
    cm = _model(dense_unhidden_fraction=frac, moe_unhidden_fraction=frac)
    for ext, pre in PREFILLS:
        br = cm.prefill_breakdown(ext, pre)
        groups = _roofline_groups(base, float(sum(ext)), float(len(ext)))
        for name, (c, m) in groups.items():
            assert br[name] == pytest.approx(max(c, m) + frac * min(c, m), rel=1e-12)
        # the other groups do not move
        ref = base.prefill_breakdown(ext, pre)
        assert {k: br[k] for k in ("attn_full", "attn_swa", "allreduce", "overhead")} == {
            k: ref[k] for k in ("attn_full", "attn_swa", "allreduce", "overhead")
        }
    # decode goes through the same linear groups: its base term grows, its attention terms do not
    assert cm.decode_terms(64)[0] > base.decode_terms(64)[0]
    assert cm.decode_terms(64)[1:5] == base.decode_terms(64)[1:5]


def test_prefill_attention_term_touches_prefill_attention_only():
    base, cm = _model(), _model(prefill_attention_unhidden_fraction=1.0)
    d = base.describe()["per_rank"]
    e, p = 4096, 4096
    pairs = e * p + e * (e + 1) / 2
    c = pairs * d["attention_flops_per_full_pair"] / (d["achievable_attention_tflops"] * 1e12)
    m = (p + e + e) * d["full_kv_bytes_per_token"] / (d["achievable_kv_bandwidth_gbps"] * 1e9)
    br = cm.prefill_breakdown([e], [p])
    assert br["attn_full"] == pytest.approx(c + m, rel=1e-12)
    assert br["moe"] == base.prefill_breakdown([e], [p])["moe"]
    for bs, full, swa in DECODES:
        assert cm.decode_time(bs, full, swa) == base.decode_time(bs, full, swa)


def test_moe_half_tokens_saturates_the_moe_flop_efficiency():
    half = 1500.0
    base, cm = (
        _model(moe_unhidden_fraction=1.0),
        _model(moe_unhidden_fraction=1.0, moe_flops_half_tokens=half),
    )
    for n in (256, 2048, 16384):
        c, m = _roofline_groups(base, float(n), 1.0)["moe"]
        # FLOP time at efficiency eff x n / (n + half)
        assert cm.prefill_breakdown([n], [0])["moe"] == pytest.approx(c * (n + half) / n + m, rel=1e-12)


def test_terms_are_checked():
    with pytest.raises(ConfigError, match="moe_unhidden_fraction"):
        CostCoefficients(moe_unhidden_fraction=1.2)
    with pytest.raises(ConfigError, match=">= 0"):
        CostCoefficients(dense_unhidden_fraction=-0.1)
    with pytest.raises(ConfigError, match="moe_flops_half_tokens"):
        validate_profile({"version": 1, "coefficients": {"moe_flops_half_tokens": -5}})
    got = validate_profile({"version": 1, "coefficients": dict.fromkeys(TERMS, 0.5)})
    assert got["coefficients"]["prefill_attention_unhidden_fraction"] == 0.5
