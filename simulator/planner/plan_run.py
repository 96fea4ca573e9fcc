"""``kvplan plan`` on the simulator: the search's oracle over the sweep machinery, and the plan.

:class:`SweepOracle` evaluates each batch of the search (:mod:`simulator.planner.plan_search`)
as one sweep (:func:`simulator.planner.run_sweep`: the same backends, ``-j`` and ``--dask``,
and the same result store, so a plan is resumable), judges every run against the SLOs and
prices it (:mod:`simulator.planner.plan_cost`). :func:`make_space` lays out the coarse grid;
:func:`run_plan` runs the search and returns the plan, the object ``kvplan plan --json`` prints
(the reasons and the launch flags: :mod:`simulator.planner.plan_report`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from simulator.engine.config import SimConfig
from simulator.errors import FlagError, KvplanError
from simulator.planner.backends import Backend, SerialBackend
from simulator.planner.grid import Axis, AxisFlag, apply_point, resolve_flag
from simulator.planner.keys import RunIdentity
from simulator.planner.plan_cost import Cost, Prices, config_cost, memory_range
from simulator.planner.plan_search import Outcome, Point, SearchSpace, quantize, search
from simulator.planner.slo import Slo, Verdict, check_path, judge
from simulator.planner.store import ResultStore
from simulator.planner.sweep import SweepSpec, run_sweep

MEM, SWA = "mem_fraction_static", "swa_full_tokens_ratio"
HICACHE_RATIO, HICACHE_ON = "hicache.hicache_ratio", "hicache.enable_hierarchical_cache"
# Coarse defaults: memory levels halve from SGLang's default budget; SWA ratios span (0, 1].
DEFAULT_LEVELS = 8
DEFAULT_SWA_RATIOS = (0.1, 0.3, 0.8)
DEFAULT_HICACHE_RATIOS = (None, 2.0, 4.0)


@dataclass(frozen=True)
class PlanSetup:
    """What to plan: the fixed configuration, the SLOs, the prices and the search space, and
    whether the HiCache axis is searched (its column value None then means "HiCache off")."""

    base: SimConfig
    slos: tuple[Slo, ...]
    prices: Prices
    space: SearchSpace
    hicache_axis: bool
    notes: tuple[str, ...] = ()
    seeds: int = 1  # each point at seeds base.seed .. base.seed + seeds - 1; all must meet


def memory_levels(f0: float, f_max: float, levels: int, quantum: float = 0.001) -> tuple[float, ...]:
    """``levels`` fractions whose KV budgets halve from ``f_max``'s: f0 + (f_max - f0) / 2**i,
    rounded up to ``quantum`` (never below the budget asked for), ascending, distinct."""
    if levels < 1:
        raise FlagError(f"--levels must be >= 1, got {levels}")
    top = quantize(math.floor(f_max / quantum + 1e-9) * quantum, quantum)
    out = set()
    for i in range(levels):
        f = f0 + (f_max - f0) / 2**i
        q = min(quantize(math.ceil(f / quantum - 1e-9) * quantum, quantum), top)
        if q > f0:
            out.add(q)
    return tuple(sorted(out))


def make_space(
    base: SimConfig,
    *,
    levels: int = DEFAULT_LEVELS,
    swa_ratios: Sequence[float] = DEFAULT_SWA_RATIOS,
    hicache_ratios: Sequence[float | None] = DEFAULT_HICACHE_RATIOS,
    f_max: float | None = None,
    hicache_in_served_runs: bool | None = None,
    prune: bool = True,
) -> tuple[SearchSpace, bool, list[str]]:
    """The search space for ``base``: (space, whether HiCache is an axis, notes). A flag the user
    fixed (``--swa-full-tokens-ratio``, ``--mem-fraction-static``, HiCache) is not searched.
    ``prune`` False runs the whole coarse grid (``--exhaustive``; the same plan, more runs)."""
    notes: list[str] = []
    if hicache_in_served_runs is None:
        from simulator.cli.server_flags import HICACHE_IN_SERVED_RUNS

        hicache_in_served_runs = HICACHE_IN_SERVED_RUNS
    if base.mem_fraction_static is not None:
        # a fixed fraction is its own floor: nothing below it is tried
        fractions: tuple[float, ...] = (base.mem_fraction_static,)
        f0 = base.mem_fraction_static
        notes.append(f"--mem-fraction-static {base.mem_fraction_static:g} is fixed: memory is not searched")
    else:
        rng = memory_range(base, f_max)
        fractions, f0 = memory_levels(rng.f0, rng.f_max, levels), rng.f0
    swa = _swa_axis(base, swa_ratios, notes)
    hicache_axis = hicache_in_served_runs and not base.hicache.enabled
    if not hicache_in_served_runs:
        notes.append(
            "--hicache-ratio: served runs do not model HiCache yet in this kvplan "
            "(server_flags.HICACHE_IN_SERVED_RUNS); the plan leaves host RAM out"
        )
    elif base.hicache.enabled:
        notes.append("HiCache flags are fixed: the HiCache ratio is not searched")
    space = SearchSpace(
        fractions=fractions,
        swa_ratios=swa,
        hicache_ratios=tuple(hicache_ratios) if hicache_axis else (None,),
        f0=f0,
        prune=prune,
    )
    return space, hicache_axis, notes


def _swa_axis(base: SimConfig, ratios: Sequence[float], notes: list[str]) -> tuple[float | None, ...]:
    if base.swa_full_tokens_ratio is not None:
        notes.append(f"--swa-full-tokens-ratio {base.swa_full_tokens_ratio:g} is fixed: not searched")
        return (None,)
    try:
        hybrid = base.pool_sizes().hybrid_swa
    except KvplanError:  # refused at SGLang's defaults: the sweep reports it per point
        hybrid = True
    if not hybrid:
        notes.append(f"{base.model} has no sliding-window layers: --swa-full-tokens-ratio is not searched")
        return (None,)
    return tuple(sorted(set(ratios)))


@dataclass
class Evaluated:
    """One evaluated point: its configuration, the sweep's record, verdict and cost."""

    config: SimConfig
    record: dict[str, Any]
    verdict: Verdict
    cost: Cost | None
    stage: str


class SweepOracle:
    """The search's oracle: each batch of points is one sweep over the result store."""

    def __init__(
        self,
        trace: Any,
        setup: PlanSetup,
        *,
        backend: Backend,
        store: ResultStore | None,
        progress: bool = False,
        on_batch: Callable[[str, int], None] | None = None,
    ) -> None:
        self.trace, self.setup, self.backend, self.store = trace, setup, backend, store
        self.progress, self.on_batch = progress, on_batch
        self.identity = RunIdentity.for_trace(trace)
        self.evaluated: dict[Point, Evaluated] = {}
        self.summaries: list[dict[str, Any]] = []
        self._paths_checked = False

    def values(self, point: Point) -> dict[str, Any]:
        """The SimConfig fields a point sets (``group.field`` for HiCache's)."""
        col, f = point
        out: dict[str, Any] = {MEM: f}
        if col.swa is not None:
            out[SWA] = col.swa
        if self.setup.hicache_axis:
            out[HICACHE_ON] = col.hicache is not None
            out[HICACHE_RATIO] = col.hicache
        return out

    def config(self, point: Point) -> SimConfig:
        return apply_point(self.setup.base, self.values(point))

    def cost(self, point: Point) -> float:
        c = config_cost(self.config(point), self.setup.prices)
        return 0.0 if c is None else c.per_hour

    def evaluate(self, points: Sequence[Point], stage: str) -> dict[Point, Outcome]:
        """One sweep over ``points`` (each at every seed); every run is stored as it finishes."""
        if self.on_batch is not None:
            self.on_batch(stage, len(points))
        seeds = self.setup.seeds
        values = [self.values(p) for p in points]
        if seeds > 1:
            values = [{**v, "seed": self.setup.base.seed + s} for v in values for s in range(seeds)]
        records: list[dict[str, Any]] = []
        # A one-run batch (a bisection step) runs here, unless a warm pool is kept for the plan:
        # starting a pool for it would cost more than the run.
        warm = getattr(self.backend, "persistent", False)
        backend = self.backend if len(values) > 1 or warm else SerialBackend()
        summary = run_sweep(
            self.trace,
            SweepSpec(self.setup.base, _axes(values)),
            backend=backend,
            store=self.store,
            on_point=records.append,
            progress=self.progress,
            identity=self.identity,
            points=values,
        )
        self.summaries.append({"stage": stage, **summary})
        return {p: self._judge(p, records[i * seeds : (i + 1) * seeds], stage) for i, p in enumerate(points)}

    def _judge(self, point: Point, records: list[dict[str, Any]], stage: str) -> Outcome:
        """A point's verdict: met only if met at every seed; its metrics are the seeds' mean."""
        record = _merge_seeds(records)
        metrics = record["metrics"]
        if metrics is not None and not self._paths_checked:
            for s in self.setup.slos:
                check_path(s.path, metrics)
            self._paths_checked = True
        verdicts = [judge(r["metrics"], self.setup.slos) for r in records]
        mean = judge(metrics, self.setup.slos)
        worst = {k: max(v.violations[k] for v in verdicts) for k in mean.violations}
        verdict = Verdict(all(v.met for v in verdicts), mean.values, worst)
        cfg = self.config(point)
        cost = config_cost(cfg, self.setup.prices)
        self.evaluated[point] = Evaluated(cfg, record, verdict, cost, stage)
        price = math.inf if cost is None or metrics is None else cost.per_hour
        return Outcome(verdict.met, price, verdict.total, _slack(metrics, self.setup.slos))


def _axes(values: Sequence[dict[str, Any]]) -> tuple[Axis, ...]:
    """The sweep's axes over the fields the points set (the seed included, with --seeds)."""
    fields = list(dict.fromkeys(k for v in values for k in v))
    out = []
    for f in fields:
        flag = AxisFlag("seed", "--seed") if f == "seed" else resolve_flag(f)
        assert flag is not None, f
        out.append(Axis(flag, tuple(dict.fromkeys(v[f] for v in values))))
    return tuple(out)


def _merge_seeds(records: list[dict[str, Any]]) -> dict[str, Any]:
    """One seed's record as is; several: the first's, with the mean metrics, the 95% interval
    (:func:`simulator.planner.stats.aggregate`) and every seed, or the first refusal."""
    from simulator.planner.stats import aggregate

    if len(records) == 1:
        return records[0]
    merged = {**records[0], "seeds": [s for r in records for s in r["seeds"]]}
    errors = [r["error"] for r in records if r["error"] is not None]
    if errors:
        return {**merged, "metrics": None, "error": errors[0]}
    merged["metrics"], merged["interval"] = aggregate([r["metrics"] for r in records])
    return merged


def _slack(metrics: dict[str, Any] | None, slos: tuple[Slo, ...]) -> float:
    """Normalised margin of the values on the right side of their bounds (tie-break only)."""
    if metrics is None:
        return 0.0
    total = 0.0
    for s in slos:
        v = judge(metrics, (s,)).values[s.path]
        if v is not None and s.holds(v):
            scale = abs(s.bound) if s.bound != 0 else 1.0
            total += abs(v - s.bound) / scale
    return total


def run_plan(trace: Any, setup: PlanSetup, oracle: SweepOracle) -> dict[str, Any]:
    """Search, then the plan object (:func:`simulator.planner.plan_report.plan_object`)."""
    from simulator.planner.plan_report import plan_object

    trail = search(setup.space, oracle)
    _evaluate_binding_step(setup, oracle, trail)
    return plan_object(setup, oracle, trail)


def _evaluate_binding_step(setup: PlanSetup, oracle: SweepOracle, trail: Any) -> None:
    """Make sure the next cheaper memory step of the best column was run, so the reasons can
    name the SLO that fails there."""
    if trail.best is None:
        return
    col, _f = trail.best
    lo = trail.brackets.get(col, (setup.space.f0, _f))[0]
    point = (col, lo)
    if lo > setup.space.f0 and point not in trail.results:
        got = oracle.evaluate([point], "binding-step")
        trail.results[point] = got[point]
        trail.stages[point] = "binding-step"
