"""``kvplan report``: the choice rules, the figures' data, plan directories, atomic writes, and
the committed example report rebuilt and compared number by number (docs/reports.md)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from simulator.cli.main import app
from simulator.errors import ConfigError
from simulator.reports import ReportOptions, build_report, load_source
from simulator.reports.figures import heatmap, heatmap_axes
from simulator.reports.recommend import Point, choose, pareto_front, parse_slo

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "reports" / "mooncake-arxiv-200"
TRACE = "traces/data/mooncake_arxiv_head800.jsonl"
# What legitimately differs between two builds of one report: where the store was, and the hash
# of kvplan's own sources (any commit changes it).
VOLATILE = {"source", "kvplan_source_hash"}


def _point(i: int, hit: float, ttft: float, failed: int = 0, **config: Any) -> Point:
    metrics = {"cache_hit_rate": hit, "ttft": {"p90": ttft}, "failed": failed}
    return Point(f"k{i}", {"model": "m", **config}, (0,), metrics, None)


def test_default_rule_takes_the_cheapest_point_near_the_best_hit_rate() -> None:
    pts = [_point(0, 0.50, 1.0), _point(1, 0.498, 2.0), _point(2, 0.60, 1.0, failed=3), _point(3, 0.40, 0.5)]
    # point 2 has the best hit rate but failed requests; 0 and 1 are within 0.005 of 0.50
    choice = choose(pts, costs=[3.0, 1.0, 0.5, 0.1], slos=())
    assert choice.point.point_key == "k1" and choice.met is None
    # equal cost: the lower p90 TTFT wins
    assert choose(pts, costs=[1.0, 1.0, 0.5, 0.1], slos=()).point.point_key == "k0"


def test_slo_rule_takes_the_cheapest_point_meeting_every_bound() -> None:
    pts = [_point(0, 0.70, 0.9), _point(1, 0.65, 1.1), _point(2, 0.62, 0.8), _point(3, 0.9, 0.1, failed=1)]
    slos = parse_slo("ttft.p90<=1.0, cache_hit_rate>=0.6")
    choice = choose(pts, costs=[2.0, 0.5, 1.0, 0.1], slos=slos)
    assert choice.point.point_key == "k2" and choice.met is True
    # nothing meets: the smallest relative miss, met false
    none_meet = choose(pts[:2], costs=[1.0, 1.0], slos=parse_slo("ttft.p90<=0.5"))
    assert none_meet.point.point_key == "k0" and none_meet.met is False


def test_parse_slo_rejects_malformed_bounds() -> None:
    assert [str(s) for s in parse_slo("ttft.p90<=1,cache_hit_rate>0.5")] == [
        "ttft.p90<=1",
        "cache_hit_rate>0.5",
    ]
    with pytest.raises(ConfigError, match="--slo 'ttft.p90=1'"):
        parse_slo("ttft.p90=1")


def test_pareto_front() -> None:
    # (cost, value) lower is better: (1,5) (2,3) (2,4) (3,3) (4,1) -> frontier 0, 1, 4
    assert pareto_front([1, 2, 2, 3, 4], [5, 3, 4, 3, 1], lower_is_better=True) == [0, 1, 4]
    # higher is better, a None value is skipped
    assert pareto_front([1, 2, 3], [0.2, None, 0.5], lower_is_better=False) == [0, 2]


def test_heatmap_axes_notes_a_missing_axis_and_holds_extra_axes() -> None:
    x, y, notes = heatmap_axes(["swa_full_tokens_ratio"])
    assert (x, y) == ("swa_full_tokens_ratio", None)
    assert any("--hicache-ratio is not an axis of this sweep" in n for n in notes)
    x, y, notes = heatmap_axes(["page_size", "swa_full_tokens_ratio", "mem_fraction_static"])
    assert (x, y) == ("swa_full_tokens_ratio", "page_size")
    assert any("--mem-fraction-static) are held" in n for n in notes)
    pts = [
        _point(i, 0.1 * i, 1.0, page_size=p, swa_full_tokens_ratio=r)
        for i, (p, r) in enumerate([(16, 0.5), (16, 0.25), (64, 0.5)])
    ]
    hm = heatmap(pts, "swa_full_tokens_ratio", "page_size", "cache_hit_rate", {})
    assert hm["x"]["values"] == [0.25, 0.5] and hm["y"]["values"] == [16, 64]
    assert hm["z"] == [[0.1, 0.0], [None, 0.2]]


def _sweep(
    store: Path,
    grid: tuple[str, ...] = ("swa-full-tokens-ratio=0.0005,0.2,0.6",),
    seeds: int = 1,
    **fixed: Any,
) -> None:
    """Three points by default; the first is refused (an SWA pool smaller than the window)."""
    from simulator.engine.config import SimConfig
    from simulator.planner import ResultStore, SweepSpec, make_backend, parse_axis, run_sweep
    from traces import load_trace

    trace = load_trace(TRACE).head(40)
    base = SimConfig(tp=8, page_size=64, mem_fraction_static=0.062, **fixed)
    spec = SweepSpec(base, tuple(map(parse_axis, grid)), seeds=seeds)
    run_sweep(trace, spec, backend=make_backend(1, None), store=ResultStore(store))


@pytest.fixture
def small_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(ROOT)  # the store records the trace by its repository path
    _sweep(tmp_path / "store")
    return tmp_path / "store"


def test_report_from_a_bare_store_and_from_a_plan_dir(small_store: Path, tmp_path: Path) -> None:
    data = build_report(small_store, tmp_path / "r1")
    assert (tmp_path / "r1" / "index.html").is_file() and (tmp_path / "r1" / "report.md").is_file()
    assert data["recommended"]["rerun_matches_store"] is True
    hm = data["figures"]["heatmap_hit_rate"]
    assert hm["y"]["field"] is None and hm["x"]["values"] == [0.0005, 0.2, 0.6]  # one axis: one row
    assert hm["z"][0][0] is None and hm["z"][0][1] > 0  # the refused point is a gap
    refused = [r for r in data["table"] if r["error"]]
    assert len(refused) == 1 and refused[0]["cost_per_hour"] is None and data["table"][-1] is refused[0]
    assert data["recommended"]["flags"]["--swa-full-tokens-ratio"] in (0.2, 0.6)
    # a plan directory: its recommendation wins over the report's own rule
    plan_dir = tmp_path / "plan"
    plan_dir.mkdir()
    (plan_dir / "store").symlink_to(small_store)
    # SGLang's spelling; a flag at its default and a boolean match too
    flags = {
        "--swa-full-tokens-ratio": 0.6,
        "--mem-fraction-static": 0.062,
        "--radix-eviction-policy": "lru",
        "--disable-overlap-schedule": True,
    }
    plan = {
        "recommended": {"flags": flags, "metrics": {}},
        "launch_flags": "",
        "slo": {  # the map kvplan plan writes (simulator/planner/plan_report.py slo_object)
            "ttft.p90<=30": {"path": "ttft.p90", "op": "<=", "bound": 30.0, "value": 1.0, "met": True},
            "failed==0": {
                "path": "failed",
                "op": "<=",
                "bound": 0,
                "value": 0.0,
                "met": True,
                "implied": True,
            },
        },
        "met": True,
    }
    (plan_dir / "plan.json").write_text(json.dumps(plan))
    data = build_report(plan_dir, tmp_path / "r2")
    assert data["recommended"]["flags"]["--swa-full-tokens-ratio"] == 0.6
    assert data["recommended"]["met"] is True and data["slo"] == ["ttft.p90<=30"]
    assert data["source"]["kind"] == "plan"
    assert data["notes"][0].startswith("--hicache-ratio is not an axis")  # no "match no point" note
    plan["recommended"]["flags"]["--swa-full-tokens-ratio"] = 0.5  # not a point of the store
    (plan_dir / "plan.json").write_text(json.dumps(plan))
    data = build_report(plan_dir, tmp_path / "r2")
    assert "match no point" in data["notes"][0]
    # the report written into the plan directory itself keeps plan.json and the store
    build_report(plan_dir, plan_dir)
    names = sorted(p.name for p in plan_dir.iterdir())
    assert names == ["figures", "figures.json", "index.html", "plan.json", "report.md", "store"]
    build_report(plan_dir, plan_dir)  # and again, over its own previous report
    assert sorted(p.name for p in plan_dir.iterdir()) == names


def test_report_replaces_the_directory_atomically(small_store: Path, tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "r"
    build_report(small_store, out)
    before = (out / "index.html").read_bytes()
    import simulator.reports.build as build

    def broken(*args: Any) -> str:
        raise RuntimeError("disk full")

    monkeypatch.setattr(build, "to_html", broken)
    with pytest.raises(RuntimeError):
        build_report(small_store, out)
    assert (out / "index.html").read_bytes() == before  # the old report is whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r", "store"]  # no temporary left


def test_report_refuses_another_trace(small_store: Path, tmp_path: Path) -> None:
    other = ROOT / "traces" / "data" / "tokens_multiturn.jsonl"
    with pytest.raises(ConfigError, match="not the trace the sweep ran on"):
        build_report(small_store, tmp_path / "r", ReportOptions(trace=other))


def test_cli_report(small_store: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["report", str(small_store), "-o", str(tmp_path / "r"), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["recommended"]["launch_flags"].startswith("--model-path gpt-oss-120b --tp-size 8")
    res = runner.invoke(app, ["report", str(tmp_path), "-o", str(tmp_path / "r3")])
    assert res.exit_code == 1 and "neither a plan directory" in res.output
    assert load_source(small_store).axes == ("swa_full_tokens_ratio",)


def assert_same_numbers(got: Any, want: Any, where: str = "") -> None:
    """Equal structure; numbers within 1e-9 (relative); strings equal; VOLATILE keys skipped."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), where
        for k in want:
            if k not in VOLATILE:
                assert_same_numbers(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same_numbers(g, w, f"{where}[{i}]")
    elif isinstance(want, float) and not isinstance(want, bool):
        assert math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12), f"{where}: {got} != {want}"
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


@pytest.mark.slow
def test_the_example_report_rebuilds_with_the_same_numbers(tmp_path: Path, monkeypatch) -> None:
    """reports/make_example.sh's output, rebuilt: every number of figures.json (heatmaps, curves,
    usage series, Pareto sets, table, recommendation, trace statistics) as committed. A change
    of results by design fails here: rerun reports/make_example.sh and commit the new report."""
    from simulator.reports.example import make_example

    monkeypatch.chdir(ROOT)
    got = make_example(tmp_path / "example")
    want = json.loads((EXAMPLE / "figures.json").read_text())
    assert_same_numbers(json.loads(json.dumps(got)), want)
    names = sorted(p.name for p in (EXAMPLE / "figures").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "example" / "figures").iterdir())


def test_a_sweep_with_seeds_is_folded_into_means(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    store = tmp_path / "store"
    _sweep(store, ("swa-full-tokens-ratio=0.2,0.6",), seeds=2, request_rate=4.0)  # Poisson arrivals
    source = load_source(store)
    assert [p.seeds for p in source.points] == [(0, 1), (0, 1)]
    assert all(p.interval["ttft.p90"][0] < p.interval["ttft.p90"][1] for p in source.points)
    data = build_report(store, tmp_path / "r")
    assert data["recommended"]["rerun_matches_store"] is None  # a mean is not one run
    assert data["assumptions"]["seeds"] == [0, 1]


def test_report_prices_points_as_the_planner_does() -> None:
    """One cost model: the report's memory and price of a point are the planner's."""
    from simulator.planner.plan_cost import DEFAULT_GPU_PRICE, Prices, config_cost
    from simulator.reports.configs import sim_config
    from simulator.reports.recommend import Prices as ReportPrices
    from simulator.reports.recommend import cost_per_hour, memory

    assert ReportPrices is Prices and Prices().gpu_gib_hour == DEFAULT_GPU_PRICE
    base = {"model": "gpt-oss-120b", "gpu": "H200", "tp": 8, "page_size": 64}
    for extra in (
        {"mem_fraction_static": 0.066},
        {"swa_full_tokens_ratio": 0.3},
        {"max_total_tokens": 300_000},
    ):
        config = {**base, **extra}
        cost = config_cost(sim_config(config), Prices(0.05, 0.01))
        mem = memory(config)
        assert (mem["gpu_kv_gib"], mem["host_kv_gib"]) == (cost.gpu_kv_gib, cost.host_gib)
        assert cost_per_hour(mem, Prices(0.05, 0.01)) == cost.per_hour
    # a token cap takes less memory than SGLang's whole budget
    assert memory({**base, "max_total_tokens": 300_000})["gpu_kv_gib"] < memory(base)["gpu_kv_gib"]
