"""The coarse grid's pruning (plan_search.needed_coarse) never changes the plan.

On random synthetic objectives (no simulator: any pattern of met points, monotone or not, any
prices, ties included) the pruned search picks the same point as the search over the whole
grid, evaluates the same points beyond the coarse step in the same order, and skips only
coarse points. Then on two traces through the whole planner (``run_plan``): the same
recommendation, launch flags, SLO values and reasons, and a subset of the candidates.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Sequence

import pytest

from simulator.planner.plan_search import Outcome, Point, SearchSpace, closest, needed_coarse, search

LEVELS = (0.062, 0.068, 0.081, 0.107, 0.16, 0.265, 0.474, 0.893)


class RandomObjective:
    """Met where a column-specific random threshold (or a random pattern) says; GPU and host
    prices drawn per case, zero included, so costs tie across SWA ratios and across columns."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        rng = random.Random(seed)
        self.gpu = rng.choice([0.0, 0.03, 1.0])
        self.host = rng.choice([0.0, 0.004, 0.03, 0.5])
        self.monotone = rng.random() < 0.7
        self.batches: list[tuple[str, list[Point]]] = []

    def cost(self, point: Point) -> float:
        col, f = point
        host = 0.0 if col.hicache is None else col.hicache * f * (1.0 + (col.swa or 0.0))
        return self.gpu * f + self.host * host

    def outcome(self, p: Point) -> Outcome:
        """A function of the point alone (not of the order the search asks in)."""
        need = random.Random(f"{self.seed}:{p[0]}").choice([0.05, 0.063, 0.07, 0.1, 0.2, 0.5, 0.9, math.inf])
        rng = random.Random(f"{self.seed}:{p}")
        met = p[1] >= need if self.monotone else rng.random() < 0.4
        violation = 0.0 if met else rng.choice([0.1, 0.5, 1.0])
        return Outcome(met, self.cost(p), violation, rng.choice([0.0, 0.1]))

    def evaluate(self, points: Sequence[Point], stage: str) -> dict[Point, Outcome]:
        self.batches.append((stage, list(points)))
        return {p: self.outcome(p) for p in points}


def _space(rng: random.Random, prune: bool) -> SearchSpace:
    return SearchSpace(
        fractions=LEVELS,
        swa_ratios=rng.choice([(0.1, 0.3, 0.8), (0.2, 0.6), (None,)]),
        hicache_ratios=rng.choice([(None, 2.0, 4.0), (2.0, 4.0), (None, 1.0, 2.0, 8.0), (None,)]),
        f0=0.0546,
        prune=prune,
    )


def _run(case: int, prune: bool):
    rng = random.Random(case)
    space = _space(rng, prune)
    oracle = RandomObjective(case)
    return space, oracle, search(space, oracle)


CASES = range(200)


def test_the_random_cases_do_prune():
    pruned = sum(len(_run(c, True)[2].results) < len(_run(c, False)[2].results) for c in CASES)
    assert pruned >= len(CASES) // 4


@pytest.mark.parametrize("case", CASES)
def test_pruned_search_picks_the_same_point_as_the_whole_grid(case):
    space, full_oracle, full = _run(case, prune=False)
    _, oracle, pruned = _run(case, prune=True)
    assert pruned.best == full.best
    if full.best is None:
        assert closest(pruned.results) == closest(full.results)
    # the pruned trail is the full one less some coarse points, in the same order
    kept = [p for p in full.results if p in pruned.results]
    assert list(pruned.results) == kept
    assert all(pruned.results[p] == full.results[p] for p in kept)
    skipped = [p for p in full.results if p not in pruned.results]
    assert all(full.stages[p] == "coarse" for p in skipped)
    assert {p: s for p, s in pruned.stages.items()} == {p: full.stages[p] for p in pruned.stages}
    if full.best is not None:
        col = full.best[0]
        assert pruned.brackets.get(col) == full.brackets.get(col)
        # a skipped point is dearer than the best one: it could never have been picked
        assert all(full_oracle.cost(p) > full.results[full.best].cost for p in skipped)


def test_pruning_skips_dear_hicache_levels():
    # HiCache is never needed: every column meets from the second level up; the HiCache
    # columns' levels above the one past the cheapest pass cost more, and are skipped
    class Cheap(RandomObjective):
        def evaluate(self, points, stage):
            self.batches.append((stage, list(points)))
            return {p: Outcome(p[1] >= 0.068, self.cost(p), 0.0 if p[1] >= 0.068 else 1.0) for p in points}

    oracle = Cheap(0)
    oracle.gpu, oracle.host = 0.03, 0.004
    space = SearchSpace(fractions=LEVELS, swa_ratios=(0.1, 0.8), hicache_ratios=(None, 2.0, 4.0), f0=0.0546)
    trail = search(space, oracle)
    coarse = [p for stage, pts in oracle.batches if stage == "coarse" for p in pts]
    assert len(coarse) < len(space.columns()) * len(LEVELS)
    hicache_levels = {f for c, f in coarse if c.hicache is not None}
    assert max(hicache_levels) < max(LEVELS)
    whole = search(dataclasses.replace(space, prune=False), Cheap(0))
    assert trail.best == whole.best


def test_needed_coarse_is_the_whole_grid_without_a_met_point():
    space = SearchSpace(fractions=LEVELS, swa_ratios=(0.1, 0.8), hicache_ratios=(None, 2.0), f0=0.0546)
    needed = needed_coarse(space, lambda p: p[1], math.inf)
    assert set(needed) == {(c, f) for c in space.columns() for f in LEVELS}
    # a met point costing 0.07: levels up to 0.068 cost at most that, plus the next one
    assert {f for _, f in needed_coarse(space, lambda p: p[1], 0.07)} == {0.062, 0.068, 0.081}


# --- the whole planner on traces -------------------------------------------------------------

SHARED = __import__("pathlib").Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "mooncake"
TRACES = {
    "bundled": ("traces/data/mooncake_arxiv_head800.jsonl", 120, "ttft.p90<=2.0,cache_hit_rate>=0.2"),
    "synthetic": (str(SHARED / "synthetic_trace.jsonl"), 240, "cache_hit_rate>=0.045"),
}


def _plan(name: str, prune: bool) -> dict:
    from simulator.engine.config import SimConfig
    from simulator.planner.backends import SerialBackend
    from simulator.planner.plan_cost import Prices
    from simulator.planner.plan_run import PlanSetup, SweepOracle, make_space, run_plan
    from simulator.planner.slo import parse_slos
    from traces import load_trace

    path, limit, slo = TRACES[name]
    trace = load_trace(path).head(limit)
    base = SimConfig(model="gpt-oss-120b", gpu="H200", tp=8, page_size=64)
    space, hicache_axis, notes = make_space(
        base, levels=5, swa_ratios=(0.1, 0.8), hicache_in_served_runs=True
    )
    space = dataclasses.replace(space, prune=prune)
    setup = PlanSetup(base, parse_slos(slo), Prices(), space, hicache_axis, tuple(notes))
    return run_plan(trace, setup, SweepOracle(trace, setup, backend=SerialBackend(), store=None))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TRACES))
def test_pruned_plan_recommends_the_same_on_traces(name):
    if not __import__("pathlib").Path(TRACES[name][0]).exists():
        pytest.skip(f"{TRACES[name][0]} is not here")
    full, pruned = _plan(name, prune=False), _plan(name, prune=True)
    for key in ("recommended", "launch_flags", "slo", "met", "reasons", "provenance"):
        assert pruned[key] == full[key], key
    assert pruned["search"]["runs"] < full["search"]["runs"]  # it did prune
    by_key = {c["key"]: c for c in full["candidates"]}
    assert [c["key"] for c in pruned["candidates"]] == [
        k for k in by_key if k in {c["key"] for c in pruned["candidates"]}
    ]
    assert all(c == by_key[c["key"]] for c in pruned["candidates"])


# The whole (unpruned) search's plan of the bundled default with the HiCache axis, as the starting
# commit a5d937e printed it (88 configurations): the pruned search must recommend the same.
DEFAULT_PLAN = {
    "launch_flags": "--tp-size 8 --page-size 64 --swa-full-tokens-ratio 0.1 --mem-fraction-static 0.061",
    "reasons": [
        "cheapest configuration meeting every SLO: --mem-fraction-static 0.061 (7.2 GiB KV, $0.215/h), "
        "--swa-full-tokens-ratio 0.1, HiCache off",
        "GPU memory binds: the next cheaper step, --mem-fraction-static 0.06 (6.0 GiB KV, $0.181/h), "
        "--swa-full-tokens-ratio 0.1, HiCache off, fails: ttft.p90 = 2.021, needs <= 2",
        "no other --swa-full-tokens-ratio tried at --mem-fraction-static 0.06 (0.15, 0.2, 0.3) "
        "meets every SLO either",
        "host RAM: HiCache off is enough (no host pool)",
        "tightest SLO at the recommendation: cache_hit_rate = 0.2443 (bound >= 0.2)",
    ],
    "values": {"ttft.p90": 1.2884968623533553, "cache_hit_rate": 0.2442861666675044, "failed": 0.0},
}


@pytest.mark.slow
def test_the_bundled_default_plan_is_unchanged_by_pruning():
    import json

    from typer.testing import CliRunner

    from simulator.cli.main import app

    args = ["plan", "--model", "gpt-oss-120b", "--gpu", "H200", "--tp", "8", "--page-size", "64"]
    args += ["--slo", "ttft.p90<=2.0,cache_hit_rate>=0.2", "--json", "--no-progress", "-j", "2"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert plan["met"] and plan["launch_flags"] == DEFAULT_PLAN["launch_flags"]
    assert plan["reasons"] == DEFAULT_PLAN["reasons"]
    assert {s["path"]: s["value"] for s in plan["slo"].values()} == DEFAULT_PLAN["values"]
    assert plan["search"]["runs"] == 46  # of the whole grid's 88
