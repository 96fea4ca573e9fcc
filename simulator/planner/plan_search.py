"""The planner's search: the cheapest point meeting every SLO, by a coarse grid then bisection.

The search knows nothing of the simulator: it asks an :class:`Oracle` to evaluate batches of
points (one batch = one sweep, run in parallel) and reads back whether each met the SLOs and
what it costs, so it is unit-tested on synthetic objectives (tests/test_plan_search.py).

A point is a :class:`Column` (the cost-free shape knob ``--swa-full-tokens-ratio`` and the
host-RAM knob ``--hicache-ratio``, None = HiCache off) at a ``--mem-fraction-static`` ``f``.
The search assumes that, in a column, more GPU memory never breaks an SLO (monotone in ``f``),
and that more host RAM never does either (monotone in the HiCache ratio):

1. **Coarse grid**: every column at every coarse memory level, less the points that cannot
   change the result (:func:`needed_coarse`): the columns of the cheapest HiCache setting at
   every level and every column at the lowest level first (one sweep), then, in the other
   columns, only the levels a met point's cost leaves in play (a second sweep).
2. **Memory bisection**: in every column with a passing level, bisect ``f`` between its
   cheapest passing level and the level below (or ``f0``, the fraction of a zero KV budget),
   all columns in one batch per round; a column is dropped as soon as even its failing bound
   costs more than the best point found.
3. **SWA-ratio bisection**: at the best column's failing bound, try the ratios halfway to its
   neighbours; a ratio that passes there is cheaper, and its memory is bisected in turn.
4. **HiCache-ratio bisection**: at the best point's memory, try HiCache off and the smaller
   ratios; bisect between the largest failing and the best's ratio.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True, order=True)
class Column:
    """The knobs of a point besides memory: SWA ratio (None: not hybrid, or SGLang's default)
    and HiCache ratio (None: HiCache off)."""

    swa: float | None
    hicache: float | None


Point = tuple[Column, float]


@dataclass(frozen=True)
class Outcome:
    """What the search needs of an evaluated point."""

    met: bool
    cost: float  # per hour; math.inf when SGLang refuses the configuration
    violation: float  # normalised total (0 when met)
    slack: float = 0.0  # normalised margin on the right side of the bounds (ties: larger wins)


class Oracle(Protocol):
    """Evaluates points (one batch: one sweep) and prices them without running."""

    def evaluate(self, points: Sequence[Point], stage: str) -> dict[Point, Outcome]: ...

    def cost(self, point: Point) -> float: ...


@dataclass(frozen=True)
class SearchSpace:
    """The coarse grid and the refinement's resolution."""

    fractions: tuple[float, ...]  # coarse --mem-fraction-static levels, ascending
    swa_ratios: tuple[float | None, ...] = (None,)
    hicache_ratios: tuple[float | None, ...] = (None,)
    f0: float = 0.0  # fraction of a zero KV budget: below every level, never run
    tol: float = 0.002  # stop bisecting memory when the bracket is this narrow
    quantum: float = 0.001  # memory fractions are multiples of this
    ratio_quantum: float = 0.01  # SWA and HiCache ratios are multiples of this
    max_rounds: int = 6
    swa_rounds: int = 2
    prune: bool = True  # skip the coarse points that cannot change the result (needed_coarse)

    def columns(self) -> list[Column]:
        return [Column(s, h) for s in self.swa_ratios for h in self.hicache_ratios]


@dataclass
class SearchTrail:
    """Everything the search evaluated, in order, and where it ended."""

    results: dict[Point, Outcome] = field(default_factory=dict)
    stages: dict[Point, str] = field(default_factory=dict)
    brackets: dict[Column, tuple[float, float]] = field(default_factory=dict)
    best: Point | None = None


def quantize(x: float, quantum: float) -> float:
    """``x`` to the nearest multiple of ``quantum``, as the short decimal a flag prints."""
    digits = max(0, -math.floor(math.log10(quantum)) + 1)
    return round(round(x / quantum) * quantum, digits)


def bisect_rounds(
    brackets: Mapping[K, tuple[float, float]],
    test: Callable[[dict[K, float]], Mapping[K, bool]],
    *,
    tol: float,
    quantum: float,
    max_rounds: int,
    keep: Callable[[K, float, float], bool] | None = None,
) -> dict[K, tuple[float, float]]:
    """Bisect many monotone boundaries at once: each bracket is (failing x, passing x); every
    round tests all midpoints in one call of ``test`` and keeps the half holding the boundary.
    A bracket stops when narrower than ``tol``, when its midpoint rounds onto an end, or when
    ``keep`` says it is no longer worth refining. Returns the final brackets."""
    out = dict(brackets)
    for _ in range(max_rounds):
        mids: dict[K, float] = {}
        for key, (lo, hi) in out.items():
            if hi - lo <= tol or (keep is not None and not keep(key, lo, hi)):
                continue
            mid = quantize((lo + hi) / 2, quantum)
            if lo < mid < hi:
                mids[key] = mid
        if not mids:
            break
        passed = test(mids)
        for key, mid in mids.items():
            lo, hi = out[key]
            out[key] = (lo, mid) if passed[key] else (mid, hi)
    return out


def _rank(outcome: Outcome) -> tuple[float, float]:
    return (outcome.cost, -outcome.slack)


def cheapest_met(results: Mapping[Point, Outcome]) -> Point | None:
    """The cheapest point that meets every SLO (larger slack breaks ties; then grid order)."""
    met = [p for p, o in results.items() if o.met]
    return min(met, key=lambda p: _rank(results[p])) if met else None


def closest(results: Mapping[Point, Outcome]) -> Point | None:
    """The point nearest to meeting the SLOs: smallest normalised violation, then cheapest."""
    if not results:
        return None
    return min(results, key=lambda p: (results[p].violation, results[p].cost))


def search(space: SearchSpace, oracle: Oracle) -> SearchTrail:
    """Run the four steps of the module docstring; ``trail.best`` is None when nothing met."""
    trail = SearchTrail()
    _coarse(space, oracle, trail)
    trail.brackets = _memory_brackets(space, trail.results)
    if cheapest_met(trail.results) is None:
        return trail
    _bisect_memory(space, oracle, trail, list(trail.brackets))
    _refine_swa(space, oracle, trail)
    _refine_hicache(space, oracle, trail)
    trail.best = cheapest_met(trail.results)
    return trail


def _coarse(space: SearchSpace, oracle: Oracle, trail: SearchTrail) -> None:
    """Step 1: the coarse grid, pruned (:func:`needed_coarse`) unless ``space.prune`` is off.
    The results enter the trail in grid order whatever the batches, as the whole grid's would."""
    grid = [(c, f) for c in space.columns() for f in space.fractions]
    if not space.prune or len(space.hicache_ratios) < 2:
        got = dict(oracle.evaluate(grid, "coarse"))
    else:
        cheapest = min(space.hicache_ratios, key=lambda h: (h is not None, h or 0.0))
        first = [(c, f) for c, f in grid if c.hicache == cheapest or f == space.fractions[0]]
        got = dict(oracle.evaluate(first, "coarse"))
        bound = min((o.cost for o in got.values() if o.met), default=math.inf)
        rest = [p for p in needed_coarse(space, oracle.cost, bound) if p not in got]
        if rest:
            got.update(oracle.evaluate(rest, "coarse"))
    for p in grid:
        if p in got:
            trail.results[p] = got[p]
            trail.stages[p] = "coarse"


def needed_coarse(space: SearchSpace, cost: Callable[[Point], float], bound: float) -> list[Point]:
    """The coarse points that can change the search's result once a point costing ``bound``
    is known to meet every SLO: for each HiCache ratio, every column at every level up to the
    first level above the dearest one that costs at most ``bound`` in any of its columns
    (all levels when ``bound`` is infinite).

    Why no other point can change anything (the search's steps, in order):

    * the result: the best point costs at most ``bound``, and a skipped point costs more;
    * a column's memory bracket (its cheapest passing level and the level below it): if the
      column passes at an evaluated level, the bracket is the same; if not, the level below its
      cheapest pass is one of its skipped or top evaluated levels, which costs more than
      ``bound``, hence more than the best point at any time of the search, so the bisection's
      ``keep`` drops the column before its first midpoint: it evaluates nothing either way;
    * the SWA-ratio bisection reads the ratios evaluated in the best column's HiCache group
      (every column has its lowest level evaluated) and its bracket (above);
    * the HiCache bisection, the binding step and the reasons read points at the best point's
      memory, or at the level below it, in columns whose HiCache ratio is at most the best's:
      they cost at most the best point (a smaller host pool, or less GPU memory), so at most
      ``bound``; they are evaluated in every column of their group, as the reasons compare
      SWA ratios at one memory.

    With ``bound`` the cost of a met point of the first batch, the pruned search evaluates the
    same points as the whole grid's beyond the coarse step, in the same order, and picks the same
    point (tests/test_plan_prune.py checks it on synthetic objectives and on traces)."""
    out: list[Point] = []
    for h in space.hicache_ratios:
        cols = [Column(s, h) for s in space.swa_ratios]
        cheap = [i for i, f in enumerate(space.fractions) for c in cols if cost((c, f)) <= bound]
        top = max(cheap, default=-1) + 1
        out += [(c, f) for c in cols for f in space.fractions[: top + 1]]
    return out


def _evaluate(trail: SearchTrail, oracle: Oracle, points: Sequence[Point], stage: str) -> None:
    new = [p for p in dict.fromkeys(points) if p not in trail.results]
    if not new:
        return
    got = oracle.evaluate(new, stage)
    for p in new:
        trail.results[p] = got[p]
        trail.stages[p] = stage


def _memory_brackets(
    space: SearchSpace, results: Mapping[Point, Outcome]
) -> dict[Column, tuple[float, float]]:
    """Per column with a passing coarse level: (the level below its cheapest pass, or f0; that pass)."""
    out = {}
    for col in space.columns():
        levels = [f for f in space.fractions if results.get((col, f)) is not None]
        passing = [f for f in levels if results[(col, f)].met]
        if passing:
            hi = min(passing)
            below = [f for f in levels if f < hi]
            out[col] = (max(below) if below else space.f0, hi)
    return out


def _bisect_memory(space: SearchSpace, oracle: Oracle, trail: SearchTrail, cols: list[Column]) -> None:
    """Step 2 for ``cols`` (their brackets in ``trail.brackets``)."""

    def test(mids: dict[Column, float]) -> dict[Column, bool]:
        points = [(c, f) for c, f in mids.items()]
        _evaluate(trail, oracle, points, "memory-bisection")
        return {c: trail.results[(c, f)].met for c, f in mids.items()}

    def keep(col: Column, lo: float, hi: float) -> bool:
        best = cheapest_met(trail.results)
        return best is None or oracle.cost((col, lo)) < trail.results[best].cost

    sub = {c: trail.brackets[c] for c in cols}
    done = bisect_rounds(
        sub, test, tol=space.tol, quantum=space.quantum, max_rounds=space.max_rounds, keep=keep
    )
    trail.brackets.update(done)


def _refine_swa(space: SearchSpace, oracle: Oracle, trail: SearchTrail) -> None:
    """Step 3: halve the SWA-ratio interval around the best column, testing at its failing bound."""
    if len(space.swa_ratios) < 2 or None in space.swa_ratios:
        return
    for _ in range(space.swa_rounds):
        best = cheapest_met(trail.results)
        assert best is not None
        col, _f = best
        lo = trail.brackets.get(col, (space.f0, _f))[0]
        if lo <= space.f0:
            return
        known = sorted({c.swa for c, _ in trail.results if c.hicache == col.hicache and c.swa is not None})
        i = known.index(col.swa)
        neighbours = [known[j] for j in (i - 1, i + 1) if 0 <= j < len(known)]
        mids = [quantize((col.swa + n) / 2, space.ratio_quantum) for n in neighbours]
        mids = [m for m in mids if m not in known]
        if not mids:
            return
        points = [(Column(m, col.hicache), lo) for m in mids]
        _evaluate(trail, oracle, points, "swa-bisection")
        winners = [c for c, f in points if trail.results[(c, f)].met]
        if winners:
            _place_new_columns(space, oracle, trail, winners, lo)


def _place_new_columns(
    space: SearchSpace, oracle: Oracle, trail: SearchTrail, cols: list[Column], passed_at: float
) -> None:
    """New columns that pass at ``passed_at``: run them at the coarse levels below it (one
    batch), bracket each between its largest failing level and its cheapest pass, bisect."""
    below = [f for f in space.fractions if f < passed_at]
    _evaluate(trail, oracle, [(c, f) for c in cols for f in below], "swa-bisection")
    for c in cols:
        passing = [f for f in [*below, passed_at] if trail.results[(c, f)].met]
        hi = min(passing)
        failing = [f for f in below if f < hi]
        trail.brackets[c] = (max(failing) if failing else space.f0, hi)
    _bisect_memory(space, oracle, trail, cols)


def _refine_hicache(space: SearchSpace, oracle: Oracle, trail: SearchTrail) -> None:
    """Step 4: less host RAM at the best point's memory (HiCache off, smaller ratios, bisection)."""
    best = cheapest_met(trail.results)
    assert best is not None
    col, f = best
    if col.hicache is None:
        return
    lower = [h for h in space.hicache_ratios if h is None or h < col.hicache]
    _evaluate(trail, oracle, [(Column(col.swa, h), f) for h in lower], "hicache-bisection")
    failing = [h for h in lower if h is not None and not trail.results[(Column(col.swa, h), f)].met]
    if not failing or any(trail.results[(Column(col.swa, h), f)].met for h in lower):
        return
    swa = col.swa

    def test(mids: dict[str, float]) -> dict[str, bool]:
        point = (Column(swa, mids["h"]), f)
        _evaluate(trail, oracle, [point], "hicache-bisection")
        return {"h": trail.results[point].met}

    bisect_rounds(
        {"h": (max(failing), col.hicache)},
        test,
        tol=space.ratio_quantum,
        quantum=space.ratio_quantum,
        max_rounds=space.max_rounds,
    )
