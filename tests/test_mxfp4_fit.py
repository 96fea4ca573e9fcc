"""gpu_replay/mxfp4_fit.py: the MXFP4 / fp8 decode ratios, the step forms against them, the
effective expert bytes the option profiles carry, and the 4,096-token prefill cliff, each
recomputed here from the committed device results (no number typed in)."""

from __future__ import annotations

import json
import statistics

import pytest

from gpu_replay import mxfp4_fit as mf
from simulator.cost import CostModel, load_profile
from simulator.gpus import get_gpu
from simulator.models import load_model


@pytest.fixture(scope="module")
def rep() -> dict:
    return json.loads(json.dumps(mf.report()))


def test_committed_report_is_what_the_code_makes(rep):
    assert json.loads(mf.REPORT.read_text()) == rep
    assert set(rep["machines"]) == {"H200", "H100"}


@pytest.mark.parametrize("gpu", ["H200", "H100"])
def test_effective_bytes_by_hand(rep, gpu):
    rows = json.loads((mf.MACHINE_RUNS[gpu] / "mxfp4_decode.json").read_text())["decode"]
    for fmt, kernel in (("mxfp4", "mxfp4_ds"), ("fp8", "fp8")):
        ratios = [(r[f"{kernel}_s"] - r["routing_s"]) / (r["bf16_s"] - r["routing_s"]) for r in rows]
        assert rep["machines"][gpu]["effective_bytes_per_param"][fmt] == round(
            2 * statistics.median(ratios), 3
        )


def test_effective_bytes_follow_the_data():
    rows = json.loads((mf.RUN / "mxfp4_decode.json").read_text())["decode"]
    before = mf.effective_bytes(rows)
    for r in rows:
        r["mxfp4_ds_s"] = r["routing_s"] + (r["mxfp4_ds_s"] - r["routing_s"]) / 2
    assert mf.effective_bytes(rows)["mxfp4"] == pytest.approx(before["mxfp4"] / 2, abs=0.002)


@pytest.mark.parametrize("gpu", ["H200", "H100"])
def test_mxfp4_does_not_shrink_as_its_bytes_do(rep, gpu):
    """Triton's MXFP4 path at decode takes >= 0.6x the same kernel on bf16 at every batch size
    (the bytes are 0.27x): the tile form (prices do not shrink) is the closest of the three, the
    bytes form (moe_unhidden) the farthest."""
    m = rep["machines"][gpu]
    assert min(r["mxfp4_ds_vs_bf16"] for r in m["measured"]) > 0.6
    scores = {f["form"]: f["median_abs_pct"] for f in m["forms"].values()}
    assert min(scores, key=scores.get) == "tiles (tile 256)"
    assert max(scores, key=scores.get) == "moe_unhidden"
    pred = m["forms"]["h200-gpt-oss-120b-tp2-fitted-2026-11-27"]["predicted"]
    assert max(pred.values()) < 0.3  # the bytes form's MXFP4 / bf16 price ratio


def test_predicted_ratio_is_the_cost_models():
    prof = load_profile(mf.PROFILES / "h100-gpt-oss-120b-tp2-fitted-2026-11-27.json")
    m, g = load_model("gpt-oss-120b"), get_gpu("H100")
    prices = [
        CostModel.from_presets(m, g, 2, {**prof, "model": keys}).decode_breakdown(10, 10 * 4096, 10 * 129)[
            "moe"
        ]
        for keys in ({}, {"expert_bytes_per_param": 2.0})
    ]
    assert mf.predicted_ratio("h100-gpt-oss-120b-tp2-fitted-2026-11-27", "H100", 10) == prices[0] / prices[1]


def test_option_profiles_carry_the_measured_bytes_and_price_differently(rep):
    for name, base, fmt, gpu in mf.OPTIONS:
        prof = load_profile(mf.PROFILES / f"{name}.json")
        eff = rep["machines"][gpu]["effective_bytes_per_param"][fmt]
        assert prof["model"] == {"expert_bytes_per_param": eff}
        assert f"= {eff}:" in prof["provenance"]["notes"]
        old = load_profile(mf.PROFILES / f"{base}.json")
        assert prof["coefficients"] == old["coefficients"]
        model = "gpt-oss-120b" if "gpt-oss" in name else "MiMo-V2-Flash"
        tp = 2 if "gpt-oss" in name else 4
        new_t, old_t = (
            CostModel.from_presets(load_model(model), get_gpu(gpu), tp, p).decode_time(
                10, 10 * 3300, 10 * 129
            )
            for p in (prof, old)
        )
        assert new_t > old_t  # measured bytes above the preset's: a dearer decode step


def test_prefill_cliff_by_hand(rep):
    rows = json.loads((mf.STEPS / "steps.json").read_text())["rows"]

    def med(a, key, b=0):
        return statistics.median(
            r[key] for r in rows if r["phase"] == "prefill" and (r["a"], r["b"]) == (a, b)
        )

    excess = med(4096, "moe_s") - (med(3840, "moe_s") + med(4352, "moe_s")) / 2
    got = rep["prefill_4096"][mf.STEPS.name]
    assert got["excess_ms_per_layer"] == pytest.approx(excess * 1e3, abs=6e-4)
    assert got["excess_pct_of_step"] == pytest.approx(excess * 36 / med(4096, "total_s") * 100, abs=0.06)
    for run in mf.STEP_RUNS:  # on all three machines the cliff is most of the 4,096 miss
        for shape in rep["prefill_4096"][run]["heldout_4096"].values():
            assert shape["scored_pct"] < -10 and abs(shape["without_cliff_pct"]) < 6


@pytest.mark.parametrize("gpu", ["H200", "H100"])
def test_the_probe_puts_the_cliff_in_the_grouped_gemms(rep, gpu):
    """The stand-in's grouped GEMMs are slowest at exactly 4,096 tokens (16,384 routed rows) and
    drop past it: a kernel choice of torch._grouped_mm, not a property of the tokens."""
    g = {int(t): v for t, v in rep["machines"][gpu]["probe_4096"]["gemms_ms"].items()}
    assert max(g, key=g.get) == 4096
    assert g[4128] < g[3840] < g[4096]


def _section(doc: str, title: str) -> str:
    text = (mf.ROOT / "docs" / doc).read_text()
    start = text.index(title)
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def _span(values) -> str:
    return f"{min(values):.2f}-{max(values):.2f}x"


def test_gpu_replay_doc_numbers_are_the_results(rep):
    """Every ratio, score and time in docs/gpu-replay.md's session-8 MXFP4 and cliff parts."""
    doc = _section("gpu-replay.md", "## Session 8 (helper gpu13")
    m = rep["machines"]
    for gpu, kernels in (("H200", ("mxfp4_ds", "mxfp4", "fp8")), ("H100", ("mxfp4_ds", "fp8"))):
        for k in kernels:
            raw = mf.measured_ratios(mf._rows(mf.MACHINE_RUNS[gpu]))  # unrounded
            assert _span([r[f"{k}_vs_bf16"] for r in raw]) in doc, (gpu, k)
        for f in m[gpu]["forms"].values():
            assert f"{f['median_abs_pct']}%" in doc
        for fmt, v in m[gpu]["effective_bytes_per_param"].items():
            assert f"**{v:.2f}**" in doc or f"{v:.3f}" in doc, (gpu, fmt)
    keys = ("mxfp4_ds_s", "mxfp4_s", "fp8_s", "bf16_s", "grouped_s", "routing_s")
    for b in (1, 10, 64, 256):
        cells = []
        for gpu in ("H200", "H100"):
            row = next(
                r
                for r in json.loads((mf.MACHINE_RUNS[gpu] / "mxfp4_decode.json").read_text())["decode"]
                if r["batch"] == b
            )
            cells.append(" / ".join(f"{row[k] * 1e6:,.0f}" for k in keys))
        assert f"| {b} | {cells[0]} | {cells[1]} |" in doc
    for run in ("run1", "run2"):
        rows = json.loads((mf.RESULTS / f"mxfp4-2026-11-27-h200-{run}" / "mxfp4_decode.json").read_text())
        ratios = [(r["mxfp4_s"] - r["routing_s"]) / (r["bf16_s"] - r["routing_s"]) for r in rows["decode"]]
        assert f"{min(ratios):.2f}-{max(ratios):.2f}x" in doc
    for run, c in rep["prefill_4096"].items():
        a, b = c["heldout_4096"]["4096+0"], c["heldout_4096"]["4096+4096"]
        cells = f"{a['scored_pct']:.2f}% / {a['without_cliff_pct']:.2f}% | {b['scored_pct']:.2f}% / "
        assert f"{run} (`{c['chosen']}`) | {cells}{b['without_cliff_pct']:.2f}% |" in doc


def test_validation_doc_numbers_are_the_runs(rep):
    doc = _section("validation.md", "## Seed 000 and gsm8k with measured expert bytes")
    out = mf.RESULTS / "predictions-2026-11-27-measured-bytes"

    def run(name: str) -> dict:
        return json.loads((out / f"{name}-profile.json").read_text())

    for name in ("seed000-before", "seed000-after"):
        assert f"**{run(name)['latency']['mean']:.2f} s**" in doc
    for name in ("gsm8k-gptoss", "gsm8k-mimo"):
        assert f"**{run(name)['duration_s']:.1f} s**" in doc
    steps = (out / "decode_steps.txt").read_text()
    for line in steps.splitlines():
        if "measured-bytes" in line:
            total, moe = (
                line.split("preset bytes")[1].split("ms (MoE")[0].strip(),
                line.split("MoE")[1].split(")")[0],
            )
            assert f"{total} ms (MoE {moe.strip()} ms" in doc
    for gpu, m in rep["machines"].items():
        for v in m["effective_bytes_per_param"].values():
            assert f"{v}" in doc, (gpu, v)
