"""``kvplan bound`` end to end through typer's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from simulator.cli.cache_replay_cmd import workload_from_trace
from simulator.cli.main import app
from simulator.engine.config import SimConfig
from simulator.planner.bound import optimal_bound
from simulator.planner.bound_model import PoolModel

DATA = Path(__file__).resolve().parents[1] / "traces" / "data"
runner = CliRunner()
FLAGS = ["--model", "gpt-oss-120b", "--gpu", "H200", "--tp", "1", "--page-size", "16"]


def test_json_is_the_bound_for_the_pools_the_flags_give() -> None:
    trace = DATA / "ragpulse"
    r = runner.invoke(app, ["bound", "--trace", str(trace), *FLAGS, "--kv-budget-gib", "1", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout.strip().splitlines()[-1])
    sizes = SimConfig(model="gpt-oss-120b", page_size=16, kv_budget_gib=1.0).pool_sizes()
    assert out["capacity_tokens"] == sizes.full_tokens
    assert out["swa_capacity_tokens"] == sizes.swa_tokens
    assert out["window"] == sizes.sliding_window
    pools = PoolModel(16, sizes.full_tokens, sizes.swa_tokens, sizes.sliding_window)
    want = optimal_bound(workload_from_trace(trace, 16, None), pools)
    assert out["hit_rate_bound"] == want.hit_rate_bound
    assert out["exact"] is want.exact
    assert out["infinite_capacity_hit_rate"] >= out["hit_rate_bound"] > 0
    assert "lru_curve" not in out


def test_lru_curve_flag_adds_a_rising_curve() -> None:
    args = ["bound", "--trace", str(DATA / "ragpulse"), *FLAGS, "--lru-curve", "--curve-points", "5"]
    args.append("--json")
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout.strip().splitlines()[-1])
    curve = out["lru_curve"]
    assert 2 <= len(curve) <= 5
    caps = [p["capacity_tokens"] for p in curve]
    rates = [p["hit_rate"] for p in curve]
    assert caps == sorted(caps) and rates == sorted(rates)
    assert all(rate <= out["infinite_capacity_hit_rate"] for rate in rates)


def test_table_output_names_the_kind_of_result() -> None:
    r = runner.invoke(app, ["bound", "--trace", str(DATA / "tokens_multiturn.jsonl"), *FLAGS])
    assert r.exit_code == 0, r.output
    assert "hit-rate bound" in r.stdout and ("exact optimum" in r.stdout or "upper bound" in r.stdout)
