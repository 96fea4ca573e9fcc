"""The step-form fit and its cross-validated choice (gpu_replay/step_fit.py, numpy only), and the
committed profiles that carry the chosen form."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_replay.calibrate import StepShape, predict_step
from gpu_replay.step_fit import FORMS, STEP_PROFILES, _Scorer, base_model, choose_form, fit_form
from simulator.cost import CostModel, load_profile
from simulator.gpus import get_gpu
from simulator.models import load_model

PROFILES = Path(__file__).resolve().parents[1] / "gpu_replay" / "profiles"
PREFILL = ((512, 0), (1024, 0), (2048, 0), (4096, 0), (8192, 0), (16384, 0), (2048, 8192), (1024, 32768))
DECODE = ((1, 1024), (8, 8192), (64, 4096), (256, 1024), (256, 8192))


def test_fit_recovers_a_step_form_with_an_unhidden_moe_share():
    truth = {
        "dense_flops_efficiency": 0.4,
        "moe_flops_efficiency": 0.35,
        "attention_flops_efficiency": 0.6,
        "weight_bandwidth_efficiency": 0.75,
        "kv_bandwidth_efficiency": 0.8,
        "decode_layer_overhead_s": 150e-6,
        "prefill_layer_overhead_s": 400e-6,
        "moe_unhidden_fraction": 0.6,
    }
    base = base_model("gpt-oss-120b", "H100", 2)
    true_cm = _Scorer(base, []).model(truth)
    shapes = [StepShape("prefill", a, b, {}) for a, b in PREFILL]
    shapes += [StepShape("decode", a, b, {}) for a, b in DECODE]
    for s in shapes:
        s.graph_total = predict_step(true_cm, s)
    # the base form cannot express the rounded corner; the form with the term can, and finds it
    plain = _Scorer(base, shapes)(fit_form(base, shapes, FORMS["base"]))
    got = fit_form(base, shapes, FORMS["moe_unhidden"])
    cm = _Scorer(base, []).model(got)
    errors = [abs(predict_step(cm, s) / s.total - 1) for s in shapes]
    assert max(errors) < 0.01
    assert _Scorer(base, shapes)(got) < plain / 10
    assert got["moe_unhidden_fraction"] == pytest.approx(0.6, abs=0.1)


def test_choice_rule_prefers_fewer_terms_within_the_tie_margin():
    assert choose_form({"base": 6.4, "moe_unhidden": 6.35}) == "base"
    assert choose_form({"base": 6.4, "moe_unhidden": 5.9, "linear_unhidden": 5.85}) == "moe_unhidden"
    assert choose_form({"base": 6.4, "moe_unhidden": 5.9, "linear_unhidden": 5.0}) == "linear_unhidden"


@pytest.mark.parametrize("name", STEP_PROFILES)
def test_committed_profiles_carry_the_chosen_step_form(name):
    prof = load_profile(PROFILES / f"{name}.json")
    prov = prof["provenance"]
    assert (
        prov["kind"] == "fitted" and "gpu_replay.step_fit" in prov["tool"] and "[step form]" in prov["notes"]
    )
    model = load_model(prov["model"])
    cm = CostModel.from_presets(model, get_gpu(prov["gpu"]), prov["tp"], prof)
    for key in ("moe_unhidden_fraction", "dense_unhidden_fraction", "prefill_attention_unhidden_fraction"):
        assert getattr(cm.coefficients, key) == prof["coefficients"].get(key, 0.0)
