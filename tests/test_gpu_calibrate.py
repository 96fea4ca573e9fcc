"""The calibration fits (gpu_replay/calibrate.py, numpy only) and the committed profiles.

Each fit must recover known coefficients from data generated with them, and the committed
profiles must load through ``kvplan run --profile``'s validator and change the cost model.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from gpu_replay.calibrate import (
    FLOORS,
    HELD_AT_ZERO,
    STAND_IN_EXPERT_BYTES,
    StepShape,
    _cost,
    fit_allreduce,
    fit_steps,
    fit_transfers,
    predict_step,
)
from simulator.cost.profile import load_profile
from simulator.cost.roofline import CostModel
from simulator.gpus import get_gpu
from simulator.models import load_model

ROOT = Path(__file__).resolve().parents[1]
PROFILES = ROOT / "gpu_replay" / "profiles"


def test_allreduce_fit_recovers_latency_and_bandwidth(tmp_path):
    lat, bw, n = 30e-6, 300e9, 4
    rows = [
        {"tokens": t, "bytes": t * 5760, "median_s": lat + 2 * (n - 1) / n * t * 5760 / bw}
        for t in (1, 2, 4, 16, 64, 256, 1024, 4096, 16384)
    ]
    path = tmp_path / "ar.json"
    path.write_text(json.dumps({"environment": {"world": n, "device": "x"}, "rows": rows}))
    got = fit_allreduce(path, [1, 4, 64, 1024, 16384], [2, 16, 256, 4096])
    assert got["allreduce_latency_s"] == pytest.approx(lat, rel=1e-6)
    assert got["allreduce_bus_gbps"] == pytest.approx(300.0, rel=1e-6)
    assert got["heldout_median_abs_pct"] < 1e-6


def test_transfer_fit_recovers_per_call_cost_and_bandwidth(tmp_path):
    per_call, bw = 50e-6, 45e9
    rng = np.random.default_rng(0)
    split = {"oplogs": {"fit": ["a.npz"], "heldout": ["b.npz"]}}
    for stem in ("a", "b"):
        with (tmp_path / f"{stem}-cuda.csv").open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(
                ["backup_calls", "backup_bytes", "backup_s", "write_calls", "written_bytes", "write_s"]
            )
            for _ in range(40):
                c, b = int(rng.integers(1, 6)), float(rng.integers(1, 200)) * 2.3e6
                w.writerow([c, b, c * per_call + b / bw, 0, 0, 0.0])
    got = fit_transfers(tmp_path, split, "cuda", "backup")
    assert got["per_call_s"] == pytest.approx(per_call, rel=1e-6)
    assert got["gbps"] == pytest.approx(45.0, rel=1e-6)
    assert got["heldout_step_median_abs_pct"] < 1e-6


def test_step_fit_recovers_coefficients_that_generated_the_times():
    model, gpu = load_model("gpt-oss-120b"), get_gpu("H100")
    truth = {
        "dense_flops_efficiency": 0.5,
        "moe_flops_efficiency": 0.35,
        "attention_flops_efficiency": 0.6,
        "weight_bandwidth_efficiency": 0.75,
        "kv_bandwidth_efficiency": 0.8,
        FLOORS[0]: 150e-6,
        FLOORS[1]: 600e-6,
    }
    cm = _cost(model, gpu, 2, {**truth, **HELD_AT_ZERO}, STAND_IN_EXPERT_BYTES)
    shapes = [
        StepShape("prefill", a, b, {}) for a, b in ((512, 0), (2048, 0), (8192, 0), (16384, 0), (1024, 32768))
    ]
    shapes += [
        StepShape("decode", a, b, {}) for a, b in ((1, 1024), (8, 8192), (64, 4096), (256, 1024), (256, 8192))
    ]
    for s in shapes:
        s.graph_total = predict_step(cm, s)
    fitted = fit_steps("gpt-oss-120b", "H100", 2, shapes, rounds=3)
    cm2 = _cost(model, gpu, 2, {**fitted, **HELD_AT_ZERO}, STAND_IN_EXPERT_BYTES)
    errors = [abs(predict_step(cm2, s) / s.total - 1) for s in shapes]
    assert max(errors) < 0.03


@pytest.mark.parametrize("name", ["h100-gpt-oss-120b-tp2-fitted", "transferred-mimo-v2-flash-tp4"])
def test_committed_profiles_load_and_change_the_cost_model(name):
    prof = load_profile(PROFILES / f"{name}.json")
    prov = prof["provenance"]
    assert prov["kind"] == "fitted" and "driver" in prov["source"] and "CUDA" in prov["source"]
    model = load_model(prov["model"])
    base = CostModel.from_presets(model, get_gpu(prov["gpu"]), prov["tp"])
    fitted = CostModel.from_presets(model, get_gpu(prov["gpu"]), prov["tp"], prof)
    assert fitted.decode_time(8, 8 * 4096, 8 * 128) != base.decode_time(8, 8 * 4096, 8 * 128)
    assert fitted.coefficients.decode_layer_overhead_s == prof["coefficients"]["decode_layer_overhead_s"]
