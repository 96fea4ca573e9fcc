"""The one-machine H100 profile of the eighth session (gpu_replay/machine_profile.py): the
committed files are exactly what the builder makes from the committed results, and the held-out
errors they carry agree with a recomputation that shares none of the builder's code path
(medians of steps.json's repeats, the simulator's own transfer model pricing the replayed calls),
and ``kvplan run --profile`` names the profile and its hash."""

from __future__ import annotations

import json
import re
import shutil
import statistics
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from gpu_replay import machine_profile as mp
from gpu_replay import moe_tile_fit as mtf
from gpu_replay.calibrate import StepShape
from gpu_replay.step_fit import base_model
from gpu_replay.transfer_model import load_calls, step_arrays
from simulator.cli.main import app
from simulator.cost import CostModel
from simulator.cost.hicache_transfer import HostTransferModel, transfer_geometry
from simulator.cost.profile import load_profile
from simulator.gpus import get_gpu
from simulator.hicache_args import HiCacheArgs, resolve_hicache_args
from simulator.models import load_model
from simulator.provenance import canonical_json, sha256_text

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "gpu_replay" / "results" / "steps-2026-11-27-s6"
NAME = "h100-gpt-oss-120b-tp2-fitted-2026-11-27"
MIMO = "transferred-mimo-v2-flash-tp4-2026-11-27"
SPLIT = json.loads((ROOT / "gpu_replay" / "calibration" / "split.json").read_text())


def _build(results: Path = RESULTS) -> dict:
    d = {k: ROOT / v for k, v in mp.DEFAULTS.items()}
    return mp.build(results, NAME, d["per_layer"], d["allreduce_from"], d["mimo_allreduce_from"])


def _pct(notes: str, label: str) -> float:
    m = re.search(re.escape(label) + r"[^%]*?(\d+\.\d+)%", notes)
    assert m, f"{label!r} not in the notes"
    return float(m.group(1))


@pytest.fixture(scope="module")
def built() -> dict:
    return _build()


def test_committed_profiles_are_what_the_builder_makes_from_the_committed_results(built):
    for name, prof in built.items():
        assert json.loads((mp.PROFILES / f"{name}.json").read_text()) == prof, name
    assert set(built) == {NAME, MIMO}


def test_heldout_step_error_matches_an_independent_recomputation():
    """Median of each shape's repeats from steps.json, priced with the profile's step keys."""
    prof = load_profile(mp.PROFILES / f"{NAME}.json")
    reps: dict[tuple, list[float]] = {}
    for r in json.loads((RESULTS / "steps.json").read_text())["rows"]:
        reps.setdefault((r["set"], r["phase"], r["a"], r["b"]), []).append(r["total_s"])
    held = {(ph, a, b) for ph, rows in SPLIT["step_shapes"]["heldout"].items() for a, b in rows}
    assert {k[1:] for k in reps if k[0] == "heldout"} == held
    assert not {k[1:] for k in reps if k[0] == "fit"} & held  # no held-out shape in the fit set
    shapes = [
        StepShape(k[1], k[2], k[3], {}, statistics.median(v)) for k, v in reps.items() if k[0] == "heldout"
    ]
    keys = mp.step_scores(RESULTS)["coefficients"]
    coeffs = {k: prof["coefficients"][k] for k in keys}
    pred = mtf.predict(base_model("gpt-oss-120b", "H100", 2), coeffs, shapes)
    err = np.abs(pred / np.array([s.total for s in shapes]) - 1) * 100
    notes = prof["provenance"]["notes"]
    assert _pct(notes, "Held-out step shapes (9): median |error|") == pytest.approx(np.median(err), abs=0.006)
    dec = [e for e, s in zip(err, shapes, strict=True) if s.phase == "decode"]
    assert _pct(notes, "decode") == pytest.approx(np.median(dec), abs=0.006)
    assert np.median(err) < 3.0


def test_heldout_writeback_error_is_what_the_simulator_gets_with_the_profile():
    """The simulator's HostTransferModel, built from the profile as ``kvplan run --profile``
    builds it, prices every held-out step's replayed write-back calls; its median |error| against
    the repeats' median is the number the profile carries (up to the 4-digit rounding)."""
    prof = load_profile(mp.PROFILES / f"{NAME}.json")
    hc = resolve_hicache_args(
        HiCacheArgs(hicache_ratio=2.0, hicache_io_backend="kernel", hicache_mem_layout="layer_first")
    )
    m = HostTransferModel.from_resolved(get_gpu("H100"), hc, 64, prof)
    geo = transfer_geometry(load_model("gpt-oss-120b"), 2, 2)
    held = [Path(p).stem for p in SPLIT["oplogs"]["heldout"]]
    calls = load_calls(next(RESULTS.glob("calls-*-cuda-iso.csv.gz"))).select(held)
    x, y, _ = step_arrays(calls, "per_call")
    over = m.c.kernel_call_overhead_d2h_s
    pred = np.array([m.backup_time(geo, int(p) * 64) + (c - 1) * over for c, p in x])
    got = float(np.median(np.abs(pred / np.median(y, axis=1) - 1)) * 100)
    carried = _pct(prof["provenance"]["notes"], "held-out step median |error|")
    assert carried == pytest.approx(got, abs=0.05)
    assert _pct(prof["provenance"]["notes"], "scores") < 3.0  # the CV-chosen first/next form


def test_the_notes_follow_the_results_not_a_typed_number(tmp_path):
    """Slow every held-out step shape's repeats by 10%: the carried held-out error changes."""
    shutil.copytree(RESULTS, tmp_path / "r")
    data = json.loads((tmp_path / "r" / "steps.json").read_text())
    for r in data["rows"]:
        if r["set"] == "heldout":
            r["total_s"] *= 1.1
    (tmp_path / "r" / "steps.json").write_text(json.dumps(data))
    before = _pct(_build()[NAME]["provenance"]["notes"], "Held-out step shapes (9): median |error|")
    after = _pct(
        _build(tmp_path / "r")[NAME]["provenance"]["notes"], "Held-out step shapes (9): median |error|"
    )
    assert after != pytest.approx(before, abs=0.5)


@pytest.mark.parametrize("name", [NAME, MIMO])
def test_profiles_load_with_provenance_and_change_the_cost_model(name):
    prof = load_profile(mp.PROFILES / f"{name}.json")
    prov = prof["provenance"]
    assert prov["kind"] == "fitted" and prov["date"] == "2026-11-27" and prof["name"] == name
    for word in ("H100", "driver 580", "torch 2.11", "CUDA 13.0"):
        assert word in prov["source"]
    assert "gpu_replay.machine_profile" in prov["tool"]
    model = load_model(prov["model"])
    base = CostModel.from_presets(model, get_gpu(prov["gpu"]), prov["tp"])
    cm = CostModel.from_presets(model, get_gpu(prov["gpu"]), prov["tp"], prof)
    assert cm.decode_time(8, 8 * 4096, 8 * 128) != base.decode_time(8, 8 * 4096, 8 * 128)
    assert cm.coefficients.moe_tile_tokens == prof["coefficients"]["moe_tile_tokens"] == 256.0


def test_kvplan_run_names_the_profile_and_its_hash():
    path = mp.PROFILES / f"{NAME}.json"
    args = ["run", "--limit", "40", "--model", "gpt-oss-120b", "--tp", "2", "--gpu", "H100", "--json"]
    res = CliRunner().invoke(app, [*args, "--profile", str(path)])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout.strip().splitlines()[-1])
    want = sha256_text(canonical_json(load_profile(path)))
    assert out["provenance"]["profile"] == {"name": NAME, "hash": want} | {
        k: v for k, v in out["provenance"]["profile"].items() if k not in ("name", "hash")
    }
    plain = CliRunner().invoke(app, args)
    assert json.loads(plain.stdout.strip().splitlines()[-1])["provenance"]["profile"]["hash"] != want
