"""The MoE tile term's fit and choice (gpu_replay/moe_tile_fit.py, numpy only): it recovers a
tile that generated the times, the held-out shapes never reach a fit, and the committed profiles
carry the chosen form."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import gpu_replay.moe_tile_fit as mtf
from gpu_replay.calibrate import EFFICIENCIES, FLOORS, SPLIT, StepShape, predict_step
from gpu_replay.step_fit import STEP_PROFILES, _Scorer, base_model
from simulator.cost import CostModel, load_profile
from simulator.gpus import get_gpu
from simulator.models import load_model

RESULTS = Path(__file__).resolve().parents[1] / "gpu_replay" / "results" / "calibrate-2026-11-26"
PREFILL = ((512, 0), (1024, 0), (2048, 0), (4096, 0), (8192, 0), (16384, 0), (2048, 8192), (1024, 32768))
DECODE = ((1, 1024), (8, 8192), (64, 4096), (256, 1024), (256, 8192))


def test_fit_recovers_the_tile_that_generated_the_times():
    truth = {
        "dense_flops_efficiency": 0.4,
        "moe_flops_efficiency": 0.5,
        "attention_flops_efficiency": 0.6,
        "weight_bandwidth_efficiency": 0.75,
        "kv_bandwidth_efficiency": 0.8,
        "decode_layer_overhead_s": 150e-6,
        "prefill_layer_overhead_s": 400e-6,
        "moe_unhidden_fraction": 0.5,
    }
    base = base_model("gpt-oss-120b", "H100", 2)
    true_cm = _Scorer(mtf._with_tile(base, {"moe_tile_tokens": 64}), []).model(truth)
    shapes = [StepShape("prefill", a, b, {}) for a, b in PREFILL]
    shapes += [StepShape("decode", a, b, {}) for a, b in DECODE]
    for s in shapes:
        s.graph_total = predict_step(true_cm, s)
    got = mtf.fit_tiled(base, shapes, "tiles_prefill_unhidden")
    assert got["moe_tile_tokens"] == 64.0 and "moe_decode_tile_tokens" not in got
    pred = mtf.predict(base, got, shapes)
    assert max(abs(p / s.total - 1) for p, s in zip(pred, shapes, strict=True)) < 0.01


def test_heldout_shapes_never_reach_a_fit(monkeypatch):
    split = json.loads(SPLIT.read_text())["step_shapes"]
    heldout = {(ph, a, b) for ph, rows in split["heldout"].items() for a, b in rows}
    fit = {(ph, a, b) for ph, rows in split["fit"].items() for a, b in rows}
    assert heldout and not heldout & fit
    seen: list[tuple[str, int, int]] = []
    real_scorer = mtf._Scorer

    def fake_fit_form(base, shapes, extra, **kw):
        seen.extend((s.phase, s.a, s.b) for s in shapes)
        return {
            **dict.fromkeys(EFFICIENCIES, 0.5),
            **dict.fromkeys(FLOORS, 40e-6),
            **dict.fromkeys(extra, 0.25),
        }

    def recording_scorer(base, shapes):
        seen.extend((s.phase, s.a, s.b) for s in shapes)
        return real_scorer(base, shapes)

    monkeypatch.setattr(mtf, "fit_form", fake_fit_form)
    monkeypatch.setattr(mtf, "_Scorer", recording_scorer)
    report = mtf.run(RESULTS, "steps-h100.json", "H100", list(mtf.TILE_FORMS))
    assert seen and set(seen) <= fit
    assert set(seen) == fit  # every fit shape is used (the CV leaves one out at a time)
    # held-out shapes are scored, for both runs
    entry = report["forms"][report["chosen"]]
    scored = {(r["phase"], r["a"], r["b"]) for r in entry["run1_heldout"]["rows"]}
    assert scored == heldout
    assert {(r["phase"], r["a"], r["b"]) for r in entry["run2_heldout"]["rows"]} == heldout


def test_choice_counts_the_tile_as_a_term():
    assert mtf.choose({"base": 6.0, "tiles": 5.95}) == "base"
    assert mtf.choose({"base": 6.0, "tiles": 5.0, "moe_unhidden": 5.05}) == "tiles"
    assert mtf.choose({"moe_unhidden": 4.36, "tiles_prefill_unhidden": 4.25}) == "tiles_prefill_unhidden"
    assert mtf.choose({"moe_unhidden": 4.36, "tiles_prefill_unhidden": 4.27}) == "moe_unhidden"
    assert mtf.choose({"moe_unhidden": 4.4, "tiles": 4.5, "tiles_unhidden": 3.0}) == "tiles_unhidden"


@pytest.mark.parametrize("name", STEP_PROFILES)
def test_committed_profiles_carry_the_reported_form(name):
    report = json.loads((RESULTS / "moe_tile_fit.json").read_text())
    assert report["chosen_preregistered"] in mtf.PREREGISTERED
    coeffs = report["forms"][report["chosen_preregistered"]]["coefficients"]
    prof = load_profile(Path(mtf.PROFILES) / f"{name}.json")
    assert {k: prof["coefficients"].get(k, 0.0) for k in coeffs} == coeffs
    prov = prof["provenance"]
    cm = CostModel.from_presets(load_model(prov["model"]), get_gpu(prov["gpu"]), prov["tp"], prof)
    for key in mtf.TILE_KEYS:
        assert prof["coefficients"].get(key, 0.0) == coeffs.get(key, 0.0) == getattr(cm.coefficients, key)
