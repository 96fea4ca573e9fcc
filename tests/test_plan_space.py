"""The plan's search space, cost and launch flags (plan_run.py, plan_cost.py, plan_report.py)."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.engine.config import SimConfig
from simulator.hicache_args import HiCacheArgs
from simulator.kv_geometry import GIB
from simulator.planner.plan_cost import Prices, config_cost, memory_range
from simulator.planner.plan_report import launch_string, sglang_flags
from simulator.planner.plan_run import make_space, memory_levels

BASE = SimConfig(model="gpt-oss-120b", gpu="H200", tp=8, page_size=64)


def test_memory_levels_halve_the_budget():
    f0, top = 0.05457772688349505, 0.893
    levels = memory_levels(f0, top, 8)
    assert levels == (0.062, 0.068, 0.081, 0.107, 0.16, 0.265, 0.474, 0.893)
    budgets = [f - f0 for f in levels]
    for small, big in zip(budgets, budgets[1:], strict=False):
        assert big / small == pytest.approx(2, rel=0.15)  # rounding up to 0.001 at the bottom


def test_cost_is_the_kv_budget_over_all_ranks():
    rng = memory_range(BASE)
    assert rng.f_max == pytest.approx(0.893)  # SGLang's default for this configuration
    cfg = dataclasses.replace(BASE, mem_fraction_static=rng.f_max)
    cost = config_cost(cfg, Prices(gpu_gib_hour=1.0, host_gib_hour=0.0))
    assert cost.gpu_kv_gib == pytest.approx(8 * cfg.pool_sizes().memory.kv_budget_bytes / GIB)
    assert cost.per_hour == pytest.approx(cost.gpu_kv_gib) and cost.host_gib == 0
    # the SWA ratio only splits the budget: same cost
    other = dataclasses.replace(cfg, swa_full_tokens_ratio=0.1)
    assert config_cost(other, Prices()).per_hour == pytest.approx(config_cost(cfg, Prices()).per_hour)
    # below f0 there is no KV budget: SGLang refuses, the cost is None
    assert config_cost(dataclasses.replace(BASE, mem_fraction_static=0.05), Prices()) is None


def test_hicache_host_ram_is_priced():
    hic = dataclasses.replace(BASE, mem_fraction_static=0.2, hicache=HiCacheArgs(hicache_ratio=2.0))
    cost = config_cost(hic, Prices(gpu_gib_hour=0.0, host_gib_hour=1.0))
    assert cost.host_gib == pytest.approx(8 * hic.pool_sizes().host_bytes / GIB) and cost.host_gib > 0
    assert cost.per_hour == pytest.approx(cost.host_gib)


def test_space_leaves_hicache_out_until_served_runs_model_it():
    space, axis, notes = make_space(BASE, hicache_in_served_runs=False)
    assert not axis and space.hicache_ratios == (None,)
    assert any("HICACHE_IN_SERVED_RUNS" in n for n in notes)
    space, axis, _ = make_space(BASE, hicache_in_served_runs=True)
    assert axis and space.hicache_ratios == (None, 2.0, 4.0)
    assert len(space.columns()) == 9


def test_fixed_flags_are_not_searched():
    fixed = dataclasses.replace(BASE, mem_fraction_static=0.3, swa_full_tokens_ratio=0.5)
    space, _, notes = make_space(fixed, hicache_in_served_runs=False)
    assert space.fractions == (0.3,) and space.f0 == 0.3
    assert space.swa_ratios == (None,)
    assert any("--mem-fraction-static 0.3 is fixed" in n for n in notes)


def test_launch_flags_use_sglang_spelling():
    cfg = dataclasses.replace(
        BASE,
        mem_fraction_static=0.158,
        swa_full_tokens_ratio=0.1,
        schedule_policy="lpm",
        hicache=HiCacheArgs(hicache_ratio=2.0),
    )
    flags = sglang_flags(cfg)
    assert flags == {
        "--tp-size": 8,
        "--page-size": 64,
        "--swa-full-tokens-ratio": 0.1,
        "--mem-fraction-static": 0.158,
        "--schedule-policy": "lpm",
        "--hicache-ratio": 2.0,
        "--enable-hierarchical-cache": True,
    }
    assert launch_string(flags).endswith("--hicache-ratio 2.0 --enable-hierarchical-cache")
