"""gpu_replay/graph_allreduce.py: the graph-replayed all-reduce latency and the option profiles
that carry it, recomputed from the committed 2- and 4-GPU records."""

from __future__ import annotations

import json
import statistics

import pytest

from gpu_replay import graph_allreduce as ga
from simulator.cost import CostModel, load_profile
from simulator.gpus import get_gpu
from simulator.models import load_model


@pytest.mark.parametrize("gpus,hidden", [(4, 4096), (2, 2880)])
def test_graph_latency_by_hand(gpus, hidden):
    rows = json.loads((ga.RUN / f"allreduce_graph-{gpus}.json").read_text())["rows"]
    mine = [r for r in rows if r["hidden"] == hidden and r["batch"] <= 64]
    assert len(mine) == 8 and all(r["graph_sum_ok"] and r["eager_sum_ok"] for r in mine)
    bus = 300.0
    want = statistics.median(r["graph_s"] - 2 * (gpus - 1) / gpus * r["bytes"] / (bus * 1e9) for r in mine)
    assert ga.graph_latency(gpus, hidden, bus) == pytest.approx(want, rel=1e-12)
    # a graph replay is at least 3x cheaper than the eager call after a barrier at every batch
    assert all(3 * r["graph_s"] < r["eager_barrier_s"] for r in mine)


def test_options_are_what_the_code_makes_and_cheapen_decode():
    built = ga.option_profiles()
    for name, base, gpus, hidden in ga.OPTIONS:
        prof = load_profile(ga.PROFILES / f"{name}.json")
        assert json.loads((ga.PROFILES / f"{name}.json").read_text()) == built[name]
        old = load_profile(ga.PROFILES / f"{base}.json")
        lat = prof["coefficients"]["allreduce_latency_s"]
        assert lat == float(
            f"{ga.graph_latency(gpus, hidden, old['coefficients']['allreduce_bus_gbps']):.4g}"
        )
        assert lat < old["coefficients"]["allreduce_latency_s"] / 3
        assert {k: v for k, v in prof["coefficients"].items() if k != "allreduce_latency_s"} == {
            k: v for k, v in old["coefficients"].items() if k != "allreduce_latency_s"
        }
        model, tp, gpu = ("MiMo-V2-Flash", 4, "H200") if gpus == 4 else ("gpt-oss-120b", 2, "H100")
        m = load_model(model)
        new_t, old_t = (
            CostModel.from_presets(m, get_gpu(gpu), tp, p).decode_time(10, 10 * 3300, 10 * 129)
            for p in (prof, old)
        )
        layers = CostModel.from_presets(m, get_gpu(gpu), tp).geometry.num_layers
        saved = 2 * layers * (old["coefficients"]["allreduce_latency_s"] - lat)
        assert old_t - new_t == pytest.approx(saved, rel=1e-9)


def test_doc_numbers_are_the_fit_and_the_runs():
    text = (ga.ROOT / "docs" / "gpu-replay.md").read_text()
    doc = text[text.index("### The decode all-reduce inside a CUDA graph") :]
    for gpus, hidden, bus in ((4, 4096, 348.2), (2, 2880, 288.3)):
        assert f"**{ga.graph_latency(gpus, hidden, bus) * 1e6:.2f} us**" in doc
        assert f"{ga.graph_latency(gpus, hidden, bus, 'eager_barrier_s') * 1e6:.2f}" in doc
    val = (ga.ROOT / "docs" / "validation.md").read_text()
    val = val[val.index("**With the decode all-reduce of a CUDA graph**") :]
    out = ga.ROOT / "gpu_replay" / "results" / "predictions-2026-11-27-measured-bytes-graph-ar"
    for name in ("seed000-before", "seed000-after"):
        assert f"**{json.loads((out / f'{name}-profile.json').read_text())['latency']['mean']:.2f} s**" in val
    for name in ("gsm8k-gptoss", "gsm8k-mimo"):
        assert f"**{json.loads((out / f'{name}-profile.json').read_text())['duration_s']:.1f} s**" in val
    for line in (out / "decode_steps.txt").read_text().splitlines():
        if "graph-ar" in line:
            assert line.split("preset bytes")[1].split("(MoE")[0].strip() in val
