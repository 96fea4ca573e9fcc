"""The planner's search on synthetic objectives, without the simulator (plan_search.py)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from simulator.planner.plan_search import (
    Column,
    Outcome,
    Point,
    SearchSpace,
    bisect_rounds,
    cheapest_met,
    closest,
    quantize,
    search,
)


def test_quantize_gives_short_decimals():
    assert quantize(0.1 + 0.2, 0.001) == 0.3
    assert quantize(0.15749, 0.001) == 0.157
    assert quantize(2.345, 0.01) in (2.34, 2.35)


@pytest.mark.parametrize("boundary", [0.0734, 0.2, 0.5001, 0.8999])
def test_bisection_finds_the_boundary_of_a_monotone_objective(boundary):
    calls = []

    def test(mids):
        calls.append(dict(mids))
        return {k: x >= boundary for k, x in mids.items()}

    out = bisect_rounds({"a": (0.05, 0.9)}, test, tol=0.002, quantum=0.001, max_rounds=20)
    lo, hi = out["a"]
    assert lo < boundary <= hi
    assert hi - lo <= 0.002
    # every round halves the bracket: log2(0.85 / 0.002) ~ 9 rounds
    assert len(calls) <= 10


def test_bisection_runs_many_brackets_in_one_batch_per_round():
    bounds = {"a": 0.3, "b": 0.61, "c": 0.07}
    batches = []

    def test(mids):
        batches.append(sorted(mids))
        return {k: x >= bounds[k] for k, x in mids.items()}

    out = bisect_rounds({k: (0.0, 1.0) for k in bounds}, test, tol=0.01, quantum=0.001, max_rounds=10)
    for k, b in bounds.items():
        assert out[k][0] < b <= out[k][1]
    assert batches[0] == ["a", "b", "c"]  # one call tests every bracket's midpoint


def test_bisection_stops_a_bracket_keep_refuses():
    seen = []

    def test(mids):
        seen.extend(mids)
        return dict.fromkeys(mids, True)

    out = bisect_rounds(
        {"a": (0.0, 1.0), "b": (0.0, 1.0)},
        test,
        tol=0.001,
        quantum=0.001,
        max_rounds=5,
        keep=lambda k, lo, hi: k == "a",
    )
    assert "b" not in seen and out["b"] == (0.0, 1.0)
    assert out["a"][1] < 1.0


class Synthetic:
    """An oracle: a point meets the SLO when its memory reaches the column's threshold; cost is
    the memory plus a host price per HiCache ratio; violation grows with the shortfall."""

    def __init__(self, need, host_price=0.01):
        self.need, self.host_price = need, host_price
        self.batches: list[tuple[str, list[Point]]] = []

    def cost(self, point):
        col, f = point
        return f + (0.0 if col.hicache is None else self.host_price * col.hicache)

    def evaluate(self, points: Sequence[Point], stage):
        self.batches.append((stage, list(points)))
        out = {}
        for p in points:
            need = self.need(p[0])
            met = p[1] >= need
            out[p] = Outcome(met, self.cost(p), 0.0 if met else need - p[1])
        return out


LEVELS = (0.062, 0.068, 0.081, 0.107, 0.16, 0.265, 0.474, 0.893)


def test_search_finds_the_cheapest_memory_in_the_best_column():
    # the SWA ratio 0.3 column needs the least memory: 0.1234
    needs = {0.1: 0.2, 0.3: 0.1234, 0.8: 0.3}
    oracle = Synthetic(lambda c: needs.get(c.swa, 0.1234 + abs(c.swa - 0.3)))
    space = SearchSpace(fractions=LEVELS, swa_ratios=(0.1, 0.3, 0.8), f0=0.0546, swa_rounds=0)
    trail = search(space, oracle)
    col, f = trail.best
    assert col.swa == 0.3
    assert 0.1234 <= f <= 0.1234 + space.tol + space.quantum
    assert oracle.batches[0][0] == "coarse" and len(oracle.batches[0][1]) == 24
    # the 0.8 column's failing bound (0.265) costs more than the best: never refined
    assert all(p[0].swa != 0.8 for stage, pts in oracle.batches[1:] for p in pts)


def test_search_refines_the_swa_ratio_between_coarse_values():
    # the best ratio is 0.2, between the coarse 0.1 and 0.3: the SWA bisection finds it
    oracle = Synthetic(lambda c: 0.1 + 0.4 * abs(c.swa - 0.2))
    space = SearchSpace(fractions=LEVELS, swa_ratios=(0.1, 0.3, 0.8), f0=0.0546, swa_rounds=2)
    trail = search(space, oracle)
    col, f = trail.best
    assert col.swa == 0.2
    assert f == pytest.approx(0.1, abs=space.tol + space.quantum)
    assert any(stage == "swa-bisection" for stage, _ in oracle.batches)


def test_search_lowers_the_hicache_ratio_to_the_boundary():
    # HiCache is needed (off fails) and a ratio >= 2.5 meets at every memory level from 0.107
    def need(c):
        if c.hicache is None or c.hicache < 2.5:
            return math.inf
        return 0.1

    oracle = Synthetic(need)
    space = SearchSpace(fractions=LEVELS, hicache_ratios=(None, 2.0, 4.0), f0=0.0546)
    trail = search(space, oracle)
    col, f = trail.best
    assert 2.5 <= col.hicache <= 2.5 + 2 * space.ratio_quantum
    assert f == pytest.approx(0.1, abs=space.tol + space.quantum)


def test_search_reports_nothing_met_and_the_closest_point():
    oracle = Synthetic(lambda c: 2.0)  # needs more memory than the GPU has
    space = SearchSpace(fractions=LEVELS, swa_ratios=(0.1, 0.8), f0=0.0546)
    trail = search(space, oracle)
    assert trail.best is None
    assert cheapest_met(trail.results) is None
    assert closest(trail.results)[1] == max(LEVELS)  # the most memory is closest
    assert len(oracle.batches) == 1  # nothing to refine


def test_column_without_shape_knobs_has_one_column():
    space = SearchSpace(fractions=(0.5,))
    assert space.columns() == [Column(None, None)]
