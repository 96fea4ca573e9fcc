"""The MoE tile term (``moe_tile_tokens``, simulator/cost/moe_tiles.py): its arithmetic by hand,
off by default (the plain roofline, to the bit), what it does to the MoE group when a profile
sets it, its validation, and old profiles (without the key) still loading."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from simulator.cost import CostCoefficients, CostModel, load_profile, validate_profile
from simulator.cost.moe_tiles import expected_tiles_per_expert, padded_tokens
from simulator.errors import ConfigError
from simulator.gpus import get_gpu
from simulator.models import get_model

GPT_OSS = get_model("gpt-oss-120b")
H100 = get_gpu("H100")
PROFILES = Path(__file__).resolve().parents[1] / "gpu_replay" / "profiles"
PREFILLS = [([512], [0]), ([2048], [8192]), ([3000, 17], [0, 40000]), ([16384], [0])]
DECODES = [(1, 1024, 128), (64, 64 * 4096, 64 * 128), (256, 256 * 8192, 256 * 128)]


def _model(**coeffs) -> CostModel:
    prof = {"version": 1, "coefficients": coeffs} if coeffs else None
    return CostModel.from_presets(GPT_OSS, H100, 2, prof)


def test_expected_tiles_by_hand():
    # C ~ Binomial(2, 1/2): P(0, 1, 2) = 1/4, 1/2, 1/4
    assert expected_tiles_per_expert(2, 0.5, 1) == pytest.approx(1.0, abs=1e-12)  # E[C]
    assert expected_tiles_per_expert(2, 0.5, 2) == pytest.approx(0.75, abs=1e-12)  # P(C >= 1)
    # C ~ Binomial(3, 1/2): P(0..3) = 1/8, 3/8, 3/8, 1/8; ceil(C/2) = 0, 1, 1, 2
    assert expected_tiles_per_expert(3, 0.5, 2) == pytest.approx(3 / 8 + 3 / 8 + 2 / 8, abs=1e-12)
    # one token, top-4 of 128: a tile exactly when it chose this expert
    assert expected_tiles_per_expert(1, 4 / 128, 64) == pytest.approx(4 / 128, abs=1e-15)
    # tile 1 is the mean; every expert chosen (p = 1) is ceil(n / tile)
    assert expected_tiles_per_expert(5000, 0.03, 1) == pytest.approx(150.0, rel=1e-10)
    assert expected_tiles_per_expert(100, 1.0, 64) == 2.0
    assert expected_tiles_per_expert(0, 0.5, 8) == 0.0


def test_expected_tiles_match_a_direct_binomial_sum():
    n, p, tile = 600, 4 / 128, 16
    direct = sum(math.comb(n, c) * p**c * (1 - p) ** (n - c) * math.ceil(c / tile) for c in range(n + 1))
    assert expected_tiles_per_expert(n, p, tile) == pytest.approx(direct, rel=1e-10)


def test_padded_tokens_by_hand():
    # 4 experts, top-2, 2 tokens: p = 1/2, 0.75 tiles of 2 rows per expert -> 6 rows = 3 tokens' worth
    assert padded_tokens(2, 4, 2, 2) == pytest.approx(3.0, abs=1e-12)
    # gpt-oss (128 experts, top-4), 512 tokens = 16 rows per expert: tile 64 pads every expert
    # to one tile almost surely, 128 x 64 rows = 2048 tokens' worth
    assert padded_tokens(512, 128, 4, 64) == pytest.approx(2048.0, rel=1e-6)
    assert padded_tokens(777, 128, 4, 1) == pytest.approx(777.0, rel=1e-12)


def test_off_by_default_and_zero_changes_nothing_bit_for_bit():
    base, zero = _model(), _model(moe_tile_tokens=0.0, moe_decode_tile_tokens=0.0)
    assert base.coefficients.moe_tile_tokens == base.coefficients.moe_decode_tile_tokens == 0.0
    for ext, pre in PREFILLS:
        assert zero.prefill_breakdown(ext, pre) == base.prefill_breakdown(ext, pre)
        assert base.moe_flop_tokens(float(sum(ext))) == float(sum(ext))
    for bs, full, swa in DECODES:
        assert zero.decode_time(bs, full, swa) == base.decode_time(bs, full, swa)
        assert zero.decode_terms(bs) == base.decode_terms(bs)
        np.testing.assert_array_equal(
            zero.decode_times(bs, full, swa, 20, bs, bs), base.decode_times(bs, full, swa, 20, bs, bs)
        )


@pytest.mark.parametrize("tile", [16, 64, 256])
def test_tile_term_prices_the_padded_rows(tile):
    base = _model(moe_unhidden_fraction=0.5)
    pre = _model(moe_unhidden_fraction=0.5, moe_tile_tokens=tile)
    both = _model(moe_unhidden_fraction=0.5, moe_tile_tokens=tile, moe_decode_tile_tokens=tile)
    d = base.describe()["per_rank"]
    rate = d["achievable_moe_tflops"] * 1e12
    bw = d["achievable_weight_bandwidth_gbps"] * 1e9
    for n in (1, 64, 512, 4096, 16384):
        padded = 128 * tile * expected_tiles_per_expert(n, 4 / 128, tile) / 4
        assert pre.moe_flop_tokens(n) == pytest.approx(padded, rel=1e-12)
        assert pre.moe_flop_tokens(n, "decode") == float(n)
        c = d["moe_flops_per_token"] * padded / rate
        m = base.experts_touched(n) * d["all_expert_weight_bytes"] / 128 / bw
        tiled = max(c, m) + 0.5 * min(c, m)
        assert pre.prefill_breakdown([n], [0])["moe"] == pytest.approx(tiled, rel=1e-12)
        # decode keeps routed rows unless the decode tile is set too
        assert pre.decode_breakdown(n, n * 1024, n * 128) == base.decode_breakdown(n, n * 1024, n * 128)
        assert both.decode_breakdown(n, n * 1024, n * 128)["moe"] == pytest.approx(tiled, rel=1e-12)
        # only the MoE group moves
        ref, got = base.prefill_breakdown([n], [0]), pre.prefill_breakdown([n], [0])
        assert {k: got[k] for k in got if k != "moe"} == {k: ref[k] for k in ref if k != "moe"}
        assert got["moe"] >= ref["moe"]


def test_tile_is_checked():
    for bad in (0.5, 2.5, -1):
        with pytest.raises(ConfigError, match="moe_tile_tokens"):
            CostCoefficients(moe_tile_tokens=bad)
        with pytest.raises(ConfigError, match="moe_decode_tile_tokens"):
            CostCoefficients(moe_decode_tile_tokens=bad)
    with pytest.raises(ConfigError, match="moe_tile_tokens"):
        validate_profile({"version": 1, "coefficients": {"moe_tile_tokens": 63.5}})
    assert validate_profile({"version": 1, "coefficients": {"moe_tile_tokens": 64}})["coefficients"] == {
        "moe_tile_tokens": 64
    }


def test_profiles_without_the_key_still_load(tmp_path):
    # the example profile predates the term; a fitted profile with the key removed is one of the
    # session-five profiles: both load, leave the term off and price as before
    old = load_profile(PROFILES / "example-h200-gpt-oss-120b.json")
    assert "moe_tile_tokens" not in old["coefficients"]
    cm = CostModel.from_presets(GPT_OSS, get_gpu("H200"), 2, old)
    assert cm.coefficients.moe_tile_tokens == 0.0
    prof = json.loads((PROFILES / "h100-gpt-oss-120b-tp2-fitted.json").read_text())
    for key in ("moe_tile_tokens", "moe_decode_tile_tokens"):
        prof["coefficients"].pop(key, None)
    path = tmp_path / "old.json"
    path.write_text(json.dumps(prof))
    loaded = load_profile(path)
    cm = CostModel.from_presets(GPT_OSS, H100, 2, loaded)
    assert cm.coefficients.moe_tile_tokens == cm.coefficients.moe_decode_tile_tokens == 0.0
    assert cm.moe_flop_tokens(2048.0) == 2048.0
