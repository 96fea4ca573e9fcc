"""Roofline cost model: shape of the curves, the vectorised decode path, TP scaling, calibration
profiles and their validation, every preset, and the worked example in docs/cost-model.md."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simulator.cost.roofline as cost_module
from simulator.cost import (
    PROFILE_VERSION,
    CostCoefficients,
    CostModel,
    ModelCostGeometry,
    derive_geometry,
    load_profile,
    validate_profile,
)
from simulator.engine.decode_clock import DecodeClock
from simulator.errors import ConfigError
from simulator.gpus import get_gpu, gpu_names
from simulator.models import get_model, model_from_spec_dict, model_names

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_PROFILE = REPO / "gpu_replay" / "profiles" / "example-h200-gpt-oss-120b.json"
DOC = REPO / "docs" / "cost-model.md"

GPT_OSS = get_model("gpt-oss-120b")
H200 = get_gpu("H200")
WINDOW = GPT_OSS.sliding_window or 0


@pytest.fixture(scope="module")
def cost() -> CostModel:
    return CostModel.from_presets(GPT_OSS, H200, 2)


def decode_at(c: CostModel, bs: int, ctx: int) -> float:
    """Decode step of ``bs`` requests that all hold ``ctx`` tokens."""
    return c.decode_time(bs, bs * ctx, bs * min(ctx, WINDOW))


# ---- every preset ----------------------------------------------------------------------------


@pytest.mark.parametrize("model_name", model_names())
@pytest.mark.parametrize("gpu_name", gpu_names())
def test_all_presets_give_finite_positive_times(model_name: str, gpu_name: str) -> None:
    model, gpu = get_model(model_name), get_gpu(gpu_name)
    w = model.sliding_window or 1 << 30
    for tp in (1, 2, 4, 8):
        c = CostModel.from_presets(model, gpu, tp)
        times = [
            c.decode_time(1, 1, 1),
            c.decode_time(64, 64 * 32768, 64 * min(32768, w)),
            c.prefill_time([1], [0]),
            c.prefill_time([8192], [0]),
            c.prefill_time([512] * 40, [20000] * 40),
            *c.decode_times(16, 16 * 1000, 16 * min(1000, w), 5, 16, 0),
        ]
        for t in times:
            assert math.isfinite(t) and t > 0, (model_name, gpu_name, tp, times)
        json.dumps(c.describe())  # plain data


# ---- monotonicity ------------------------------------------------------------------------------


def test_prefill_grows_with_tokens(cost: CostModel) -> None:
    lengths = [1, 16, 128, 1024, 4096, 8192, 32768]
    times = [cost.prefill_time([n], [0]) for n in lengths]
    assert all(a < b for a, b in zip(times, times[1:], strict=False)), times
    # More requests of the same length cost more.
    batched = [cost.prefill_time([512] * n, [0] * n) for n in (1, 2, 8, 32, 64)]
    assert all(a < b for a, b in zip(batched, batched[1:], strict=False)), batched


def test_prefill_grows_with_prefix_on_full_layers(cost: CostModel) -> None:
    times = [cost.prefill_time([1024], [p]) for p in (0, 1000, 10000, 100000)]
    assert all(a < b for a, b in zip(times, times[1:], strict=False)), times


def test_cached_prefix_is_cheaper_than_recompute(cost: CostModel) -> None:
    assert cost.prefill_time([100], [8000]) < cost.prefill_time([8100], [0]) / 5


def test_decode_grows_with_batch_and_context(cost: CostModel) -> None:
    by_bs = [decode_at(cost, bs, 4096) for bs in (1, 2, 4, 10, 64, 256)]
    assert all(a < b for a, b in zip(by_bs, by_bs[1:], strict=False)), by_bs
    by_ctx = [decode_at(cost, 16, ctx) for ctx in (128, 1024, 4096, 32768, 131072)]
    assert all(a < b for a, b in zip(by_ctx, by_ctx[1:], strict=False)), by_ctx
    # Each context argument on its own.
    assert cost.decode_time(8, 80000, 800) < cost.decode_time(8, 90000, 800)
    assert cost.decode_time(8, 80000, 800) < cost.decode_time(8, 80000, 1000)


def test_swa_layers_stop_growing_past_the_window(cost: CostModel) -> None:
    # Prefill: once the prefix exceeds the window, SWA attention cost is constant.
    near = cost.prefill_breakdown([256], [10 * WINDOW])["attn_swa"]
    far = cost.prefill_breakdown([256], [1000 * WINDOW])["attn_swa"]
    assert near == far > 0
    # Decode: the server passes swa_ctx = Σ min(len, window), so longer contexts only move full.
    a, b = cost.decode_breakdown(4, 4 * 10_000, 4 * WINDOW), cost.decode_breakdown(4, 4 * 50_000, 4 * WINDOW)
    assert a["attn_swa"] == b["attn_swa"] and a["attn_full"] < b["attn_full"]


def test_experts_touched(cost: CostModel) -> None:
    k, e = GPT_OSS.experts_per_token, GPT_OSS.num_experts
    assert cost.experts_touched(1) == pytest.approx(k)
    assert cost.experts_touched(100_000) == pytest.approx(e)
    touched = [cost.experts_touched(n) for n in (1, 2, 8, 32, 128, 1024)]
    assert all(a < b for a, b in zip(touched, touched[1:], strict=False))


def test_breakdowns_sum_to_totals(cost: CostModel) -> None:
    d = cost.decode_breakdown(10, 10 * 4096, 10 * WINDOW)
    assert sum(d.values()) == pytest.approx(cost.decode_time(10, 10 * 4096, 10 * WINDOW), rel=1e-12)
    p = cost.prefill_breakdown([8192, 100], [0, 5000])
    assert sum(p.values()) == pytest.approx(cost.prefill_time([8192, 100], [0, 5000]), rel=1e-12)


def test_empty_work_costs_nothing(cost: CostModel) -> None:
    assert cost.decode_time(0, 0, 0) == 0.0
    assert cost.prefill_time([], []) == 0.0
    assert cost.prefill_time([0, 0], [10, 20]) == 0.0
    assert cost.decode_times(0, 0, 0, 3, 0, 0).tolist() == [0.0, 0.0, 0.0]


def test_bad_step_inputs_raise(cost: CostModel) -> None:
    with pytest.raises(ValueError, match="differ in length"):
        cost.prefill_time([1, 2], [0])
    with pytest.raises(ValueError, match=">= 0"):
        cost.prefill_time([-1], [0])
    with pytest.raises(ValueError, match=">= 0"):
        cost.prefill_time(np.full(100, 5), np.full(100, -5))
    with pytest.raises(ValueError):
        cost.decode_time(-1, 0, 0)
    with pytest.raises(ValueError):
        cost.decode_time(2, -10, 0)
    with pytest.raises(ValueError):
        cost.decode_times(2, 100, 10, 5, -50, 0)


def test_small_and_large_prefill_batches_agree(cost: CostModel, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(7)
    for _ in range(50):
        n = int(rng.integers(1, cost_module._SMALL_BATCH + 1))
        e, p = rng.integers(0, 6000, n), rng.integers(0, 60000, n)
        loop = cost.prefill_time(e, p)
        monkeypatch.setattr(cost_module, "_SMALL_BATCH", 0)
        vectorised = cost.prefill_time(e, p)
        monkeypatch.undo()
        assert loop == pytest.approx(vectorised, rel=1e-12)


# ---- decode fast-forward -----------------------------------------------------------------------


def test_decode_times_equals_loop_exactly(cost: CostModel) -> None:
    bs, f0, s0, k = 37, 37 * 5000, 37 * WINDOW, 1000
    for fg, sg in ((37, 0), (37, 37), (0, 0), (5, 3)):
        fast = cost.decode_times(bs, f0, s0, k, fg, sg)
        slow = np.array([cost.decode_time(bs, f0 + i * fg, s0 + i * sg) for i in range(k)])
        assert fast.dtype == np.float64 and fast.shape == (k,)
        assert np.array_equal(fast, slow)
    assert cost.decode_times(bs, f0, s0, 0, 1, 1).shape == (0,)


@settings(max_examples=200, deadline=None)
@given(
    model_name=st.sampled_from(model_names()),
    tp=st.sampled_from([1, 2, 4, 8]),
    bs=st.integers(1, 512),
    ctx=st.integers(0, 200_000),
    swa=st.integers(0, 2_000),
    k=st.integers(0, 40),
    full_growth=st.integers(0, 600),
    swa_growth=st.integers(0, 600),
)
def test_decode_times_equals_loop_property(
    model_name: str, tp: int, bs: int, ctx: int, swa: int, k: int, full_growth: int, swa_growth: int
) -> None:
    c = CostModel.from_presets(get_model(model_name), H200, tp)
    f0, s0 = bs * ctx, bs * swa
    fast = c.decode_times(bs, f0, s0, k, full_growth, swa_growth)
    slow = [c.decode_time(bs, f0 + i * full_growth, s0 + i * swa_growth) for i in range(k)]
    assert fast.tolist() == slow


def _step_ends_by_loop(now, segments, fa, fb, sa, sb):
    t, out = now, []
    for steps, c, n, x0, y0, g in segments:
        for i in range(steps):
            x, y = x0 + n * i, y0 + g * i
            t += c + max(fa * x, fb * (x + n)) + max(sa * y, sb * (y + n))
            out.append(t)
    return out


@settings(max_examples=300, deadline=None)
@given(
    now=st.floats(0, 1e4),
    segments=st.lists(
        st.tuples(
            st.integers(0, 300),  # steps
            st.floats(1e-4, 1e-2),  # C
            st.integers(1, 64),  # batch size
            st.integers(0, 2_000_000),  # x0
            st.integers(0, 20_000),  # y0
            st.integers(0, 64),  # requests below the window
        ),
        min_size=1,
        max_size=4,
    ),
    coeffs=st.tuples(*[st.floats(1e-12, 1e-8)] * 4),
)
def test_decode_clock_equals_the_step_loop(now, segments, coeffs) -> None:
    """The closed-form jump pricing (pieces where a roofline max switches branch included)
    equals pricing and summing each step, to rounding."""
    fa, fb, sa, sb = coeffs
    fast = DecodeClock(now, segments, fa, fb, sa, sb).ends()
    slow = _step_ends_by_loop(now, segments, fa, fb, sa, sb)
    assert fast.shape == (len(slow),)
    np.testing.assert_allclose(fast, slow, rtol=1e-12, atol=1e-12)


@settings(max_examples=200, deadline=None)
@given(
    now=st.floats(0, 1e4),
    segments=st.lists(
        st.tuples(
            st.integers(1, 200),
            st.floats(1e-4, 1e-2),
            st.integers(1, 64),
            st.integers(0, 2_000_000),
            st.integers(0, 20_000),
            st.integers(0, 64),
        ),
        min_size=1,
        max_size=4,
    ),
    coeffs=st.tuples(*[st.floats(1e-12, 1e-8)] * 4),
    probes=st.lists(st.floats(0, 1), min_size=1, max_size=8),
)
def test_decode_clock_scalar_queries_match_its_array(now, segments, coeffs, probes) -> None:
    """``end(j)`` is the same float as ``ends()[j]`` (finish times and the recorded step times
    must agree exactly), ``steps_ended_by`` is ``searchsorted(..., "right")``, and a prefix of
    the array is the array's prefix."""
    clock = DecodeClock(now, segments, *coeffs)
    ends = clock.ends()
    assert clock.steps == len(ends) and clock.last_end == ends[-1]
    assert [clock.end(j) for j in range(len(ends))] == ends.tolist()
    span = ends[-1] - now
    for q in probes:
        for t in (now + q * span * 1.1, ends[int(q * (len(ends) - 1))]):
            assert clock.steps_ended_by(t) == int(ends.searchsorted(t, side="right"))
    cut = max(1, int(probes[0] * len(ends)))
    assert clock.ends(cut).tolist() == ends[:cut].tolist()


def test_decode_clock_switches_branch_inside_a_segment() -> None:
    # with x = n*t, fa*x overtakes fb*(x+n) at t = fb / (fa - fb): 10, 3.33 and 1 here; the SWA
    # term (y = 64*t) switches at t = n / 16, so a segment splits into up to three pieces
    for fa in (1.1e-9, 1.3e-9, 2e-9):
        for now, n in ((0.0, 10), (5.0, 1000)):
            segments = [(50, 1e-3, n, 0, 0, 64), (20, 2e-3, n // 2 or 1, 7_000, 900, 3)]
            fast = DecodeClock(now, segments, fa, 1e-9, 1.25e-9, 1e-9).ends()
            slow = _step_ends_by_loop(now, segments, fa, 1e-9, 1.25e-9, 1e-9)
            np.testing.assert_allclose(fast, slow, rtol=1e-13)


# ---- tensor parallelism --------------------------------------------------------------------------


def test_tp_scaling_is_sublinear_but_real() -> None:
    times = {}
    for tp in (1, 2, 4, 8):
        c = CostModel.from_presets(GPT_OSS, H200, tp)
        times[tp] = (decode_at(c, 64, 8192), c.prefill_time([8192], [0]))
    for a, b in ((1, 2), (2, 4), (4, 8)):
        for i in range(2):
            speedup = times[a][i] / times[b][i]
            assert 1.0 < speedup <= 2.0 + 1e-9, (a, b, i, speedup)


def test_tp_shards_weights_and_kv_heads_floor_at_one() -> None:
    per_rank = {tp: CostModel.from_presets(GPT_OSS, H200, tp).describe()["per_rank"] for tp in (1, 2, 8, 16)}
    assert per_rank[2]["weight_bytes"] == pytest.approx(per_rank[1]["weight_bytes"] / 2)
    assert per_rank[8]["full_kv_bytes_per_token"] == per_rank[1]["full_kv_bytes_per_token"] / 8
    # gpt-oss has 8 KV heads: TP 16 replicates them, as SGLang's get_num_kv_heads does.
    assert per_rank[16]["full_kv_bytes_per_token"] == per_rank[8]["full_kv_bytes_per_token"]
    assert CostModel.from_presets(GPT_OSS, H200, 1).describe()["per_rank"]["allreduces_per_step"] == 0


def test_tp1_has_no_allreduce(cost: CostModel) -> None:
    c1 = CostModel.from_presets(GPT_OSS, H200, 1)
    assert c1.decode_breakdown(8, 8000, 800)["allreduce"] == 0.0
    assert cost.decode_breakdown(8, 8000, 800)["allreduce"] > 0.0


def test_kv_dtype_override_halves_kv_bytes() -> None:
    bf16 = CostModel.from_presets(GPT_OSS, H200, 2)
    fp8 = CostModel.from_presets(GPT_OSS, H200, 2, kv_dtype_bytes=1)
    assert fp8.geometry.full_kv_bytes_per_token_per_rank * 2 == bf16.geometry.full_kv_bytes_per_token_per_rank
    assert decode_at(fp8, 64, 32768) < decode_at(bf16, 64, 32768)


# ---- calibration profiles ------------------------------------------------------------------------


def minimal_profile(**sections: object) -> dict[str, object]:
    return {"version": PROFILE_VERSION, **sections}


def test_profile_coefficients_change_results(cost: CostModel) -> None:
    slow_hbm = CostModel.from_presets(
        GPT_OSS, H200, 2, minimal_profile(name="slow", coefficients={"weight_bandwidth_efficiency": 0.4})
    )
    assert decode_at(slow_hbm, 10, 4096) > decode_at(cost, 10, 4096)
    assert slow_hbm.describe()["coefficients"]["weight_bandwidth_efficiency"] == {
        "value": 0.4,
        "source": "profile slow",
    }
    overhead = CostModel.from_presets(
        GPT_OSS, H200, 2, minimal_profile(coefficients={"decode_step_overhead_s": 0.0012})
    )
    assert decode_at(overhead, 1, 100) - decode_at(cost, 1, 100) == pytest.approx(0.001)
    fast_gpu = CostModel.from_presets(GPT_OSS, H200, 2, minimal_profile(coefficients={"peak_tflops": 2000.0}))
    assert fast_gpu.prefill_time([8192], [0]) < cost.prefill_time([8192], [0])


def test_profile_model_overrides_change_results(cost: CostModel) -> None:
    bigger = CostModel.from_presets(GPT_OSS, H200, 2, minimal_profile(model={"hidden_size": 2 * 2880}))
    assert bigger.geometry.hidden_size == 5760
    assert (
        bigger.decode_breakdown(64, 64000, 6400)["allreduce"]
        > cost.decode_breakdown(64, 64000, 6400)["allreduce"]
    )
    assert any("hidden_size" in n for n in bigger.notes)


def test_example_profile_is_valid_and_marked_roofline(cost: CostModel) -> None:
    prof = load_profile(EXAMPLE_PROFILE)
    assert prof["provenance"]["kind"] == "roofline"
    assert "NOT MEASURED" in prof["description"]
    c = CostModel.from_presets(GPT_OSS, H200, 2, prof)
    assert not [n for n in c.notes if n.startswith("profile was made for")]
    # Its coefficients are the defaults written out; only the model section moves numbers.
    assert c.coefficients == cost.coefficients
    assert c.geometry.expert_bytes_per_param == 0.53125
    assert decode_at(c, 10, 4096) != decode_at(cost, 10, 4096)
    other = CostModel.from_presets(GPT_OSS, get_gpu("H100"), 4, prof)
    assert any("GPU 'H200'" in n for n in other.notes) and any("TP 2" in n for n in other.notes)


@pytest.mark.parametrize(
    ("profile", "key"),
    [
        ({"version": 1, "coefficent": {}}, "coefficent"),
        ({"version": 1, "coefficients": {"hbm_bandwith_gbps": 4000}}, "hbm_bandwith_gbps"),
        ({"version": 1, "model": {"hidden": 4096}}, "hidden"),
        ({"version": 1, "provenance": {"kind": "roofline", "machine": "x"}}, "machine"),
    ],
)
def test_unknown_profile_keys_are_rejected_by_name(profile: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError, match=f"unknown .*key '{key}'"):
        validate_profile(profile)
    with pytest.raises(ConfigError, match=f"'{key}'"):
        CostModel.from_presets(GPT_OSS, H200, 2, profile)


def test_unknown_key_error_suggests_the_valid_one() -> None:
    with pytest.raises(ConfigError, match="did you mean 'hbm_bandwidth_gbps'"):
        validate_profile({"version": 1, "coefficients": {"hbm_bandwith_gbps": 4000}})


@pytest.mark.parametrize(
    ("profile", "message"),
    [
        ({"coefficients": {}}, "version None is not supported"),
        ({"version": 2}, "version 2 is not supported"),
        ({"version": 1, "coefficients": {"kv_bandwidth_efficiency": 0}}, r"kv_bandwidth_efficiency must lie"),
        ({"version": 1, "coefficients": {"decode_step_overhead_s": -1e-3}}, "must be >= 0"),
        ({"version": 1, "coefficients": {"peak_tflops": "fast"}}, "finite number"),
        ({"version": 1, "coefficients": {"peak_tflops": 0}}, "must be positive"),
        ({"version": 1, "model": {"num_experts": 12.5}}, "must be an integer"),
        ({"version": 1, "model": {"dense_params": -1}}, "finite number >= 0"),
        ({"version": 1, "provenance": {"kind": "guessed"}}, "provenance.kind"),
        ({"version": 1, "provenance": {"tp": 0}}, "provenance.tp"),
        ({"version": 1, "coefficients": []}, "coefficients must be an object"),
        ([1, 2], "must be a JSON object"),
    ],
)
def test_bad_profiles_raise(profile: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        validate_profile(profile)  # type: ignore[arg-type]


def test_load_profile_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(ConfigError, match="bad.json: invalid JSON"):
        load_profile(bad)
    with pytest.raises(ConfigError, match="cannot read cost profile"):
        load_profile(tmp_path / "missing.json")
    typo = tmp_path / "typo.json"
    typo.write_text(json.dumps({"version": 1, "coefficients": {"prefill_overhead_s": 1}}), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"typo.json: unknown coefficient key 'prefill_overhead_s'"):
        load_profile(typo)


def test_describe_lists_every_coefficient_and_quantity(cost: CostModel) -> None:
    d = cost.describe()
    assert set(d["coefficients"]) == {f for f in CostCoefficients.__dataclass_fields__}
    assert set(d["geometry"]) == {f for f in ModelCostGeometry.__dataclass_fields__}
    assert d["coefficients"]["peak_tflops"] == {"value": 989.0, "source": "gpu preset H200"}
    assert all(v["value"] is not None for v in d["coefficients"].values())
    json.dumps(d)


# ---- model derivation ----------------------------------------------------------------------------


def test_gpt_oss_parameter_split_matches_config_arithmetic() -> None:
    g, _ = derive_geometry(GPT_OSS, 1)
    # Config: 36 layers x 128 experts x 3 x 2880^2 = 114.66 B routed parameters.
    assert g.routed_params == pytest.approx(114.66e9, rel=0.01)
    assert g.dense_bytes_per_param == 2.0
    assert g.expert_bytes_per_param == pytest.approx(0.53125, rel=0.03)  # MXFP4, 4.25 bits
    assert g.full_kv_bytes_per_token_per_rank == 18 * 8 * 128 * 2


def test_geometry_from_config_fields_without_param_counts() -> None:
    spec = model_from_spec_dict(
        {
            "name": "toy-moe",
            "num_layers": 4,
            "layer_types": ["swa", "full", "swa", "full"],
            "num_kv_heads": 2,
            "head_dim": 64,
            "sliding_window": 128,
            "hidden_size": 512,
            "num_attention_heads": 8,
            "moe_intermediate_size": 256,
            "num_experts": 8,
            "experts_per_token": 2,
            "vocab_size": 1000,
        }
    )
    g, notes = derive_geometry(spec, 1)
    assert g.routed_params == 4 * 8 * 3 * 512 * 256
    assert g.lm_head_params == 1000 * 512
    assert any("config geometry" in n for n in notes)
    c = CostModel.from_presets(spec, H200, 1)
    assert c.decode_time(4, 400, 400) > 0


def test_model_without_any_size_is_rejected() -> None:
    spec = model_from_spec_dict({"name": "bare", "num_layers": 2, "num_kv_heads": 1, "head_dim": 64})
    with pytest.raises(ConfigError, match="needs params_total, weight_bytes or hidden_size"):
        CostModel.from_presets(spec, H200, 1)


# ---- public numbers and the documented worked example ----------------------------------------


@pytest.mark.parametrize(
    ("gpu", "tp", "measured_tok_s"),
    [("H100", 8, 318.53), ("B200", 4, 416.02)],  # LMSYS blog 2025-08-27, batch 1, MXFP4
)
def test_batch_one_decode_is_near_sglang_blog(gpu: str, tp: int, measured_tok_s: float) -> None:
    # bench_one_batch_server --input-len 1024 --output-len 512: mean context ~1280 tokens.
    c = CostModel.from_presets(GPT_OSS, get_gpu(gpu), tp)
    ratio = (1.0 / c.decode_time(1, 1280, WINDOW)) / measured_tok_s
    assert 0.75 < ratio < 1.35, ratio


def worked_example_markdown() -> str:
    """The worked-example tables of docs/cost-model.md, regenerated from the code."""
    c = CostModel.from_presets(GPT_OSS, H200, 2)
    prof = CostModel.from_presets(GPT_OSS, H200, 2, load_profile(EXAMPLE_PROFILE))
    parts = ("dense", "moe", "attn_full", "attn_swa", "allreduce", "overhead")
    head = (
        "| batch | context / request | " + " | ".join(parts) + " | step (ms) | tok/s | example profile (ms) |"
    )
    lines = [head, "|" + "---|" * (len(parts) + 5)]
    for bs in (1, 10, 64):
        for ctx in (4096, 32768):
            b = c.decode_breakdown(bs, bs * ctx, bs * min(ctx, WINDOW))
            t = sum(b.values())
            row = [f"{bs}", f"{ctx:,}", *(f"{b[p] * 1e3:.3f}" for p in parts)]
            row += [f"**{t * 1e3:.2f}**", f"{bs / t:,.0f}", f"{decode_at(prof, bs, ctx) * 1e3:.2f}"]
            lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    lines.append("| prefill | " + " | ".join(parts) + " | step (ms) | tok/s | example profile (ms) |")
    lines.append("|" + "---|" * (len(parts) + 4))
    for ext, pre in ((8192, 0), (8192, 24576), (1024, 0)):
        b = c.prefill_breakdown([ext], [pre])
        t = sum(b.values())
        label = f"{ext:,} new" + (f" on {pre:,} cached" if pre else "")
        row = [label, *(f"{b[p] * 1e3:.3f}" for p in parts)]
        row += [f"**{t * 1e3:.2f}**", f"{ext / t:,.0f}", f"{prof.prefill_time([ext], [pre]) * 1e3:.2f}"]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def test_docs_worked_example_matches_code() -> None:
    text = DOC.read_text(encoding="utf-8")
    start, end = "<!-- worked-example:start -->\n", "\n<!-- worked-example:end -->"
    assert start in text and end in text, "docs/cost-model.md lost its worked-example markers"
    documented = text.split(start, 1)[1].split(end, 1)[0]
    expected = worked_example_markdown()
    assert documented == expected, "docs/cost-model.md worked example is stale; new block:\n" + expected


def test_triangles_keep_no_state_between_calls():
    """No module-level memo: each call returns exactly n entries, the same floats as before."""
    from simulator.engine.decode_clock import triangles

    big1, big2 = triangles(1000)
    small1, small2 = triangles(3)
    assert len(small1) == len(small2) == 3
    assert small1.tolist() == [1.0, 2.0, 3.0] and small2.tolist() == [0.0, 1.0, 3.0]
    assert np.array_equal(big1[:3], small1) and np.array_equal(big2[:3], small2)
    assert big2[999] == 999 * 1000 / 2
    assert len(triangles(0)[0]) == 0
