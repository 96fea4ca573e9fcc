"""A sweep: every point of a grid, at every seed, through :func:`simulator.run.run_config`.

:func:`run_sweep` plans the runs (configurations and store keys), takes the finished ones from
the result store, runs the rest on a backend, writes each to the store the moment it finishes,
and hands each point to ``on_point`` in grid order once all its seeds are in. Because a run is
stored under a key of its whole configuration (and the trace, kvplan and profile it ran with),
an interrupted sweep started again runs exactly the runs that are missing.

    from simulator.planner import SweepSpec, parse_axis, run_sweep, make_backend, ResultStore
    spec = SweepSpec(SimConfig(tp=8, page_size=64), (parse_axis("swa-full-tokens-ratio=0.2:0.8:0.2"),))
    summary = run_sweep(trace, spec, backend=make_backend(2, None), store=ResultStore("sweep.store"))
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from simulator.engine.config import SimConfig
from simulator.errors import FlagError
from simulator.planner.backends import Backend, Outcome, Task
from simulator.planner.grid import Axis, apply_point, grid_points
from simulator.planner.keys import RunIdentity, config_dict, point_key, run_key
from simulator.planner.progress import SweepProgress
from simulator.planner.stats import aggregate
from simulator.planner.store import ResultStore, make_row


@dataclass(frozen=True)
class SweepSpec:
    """What to sweep: the fixed configuration, the axes, and how many seeds per point (seeds
    ``base.seed`` .. ``base.seed + seeds - 1``)."""

    base: SimConfig
    axes: tuple[Axis, ...]
    seeds: int = 1
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class PointPlan:
    """One grid point: its axis values and one configuration and store key per seed."""

    index: int
    values: dict[str, Any]
    configs: tuple[SimConfig, ...]
    keys: tuple[str, ...]
    point_key: str


def plan_points(
    spec: SweepSpec, identity: RunIdentity, points: Sequence[dict[str, Any]] | None = None
) -> list[PointPlan]:
    """Every point of the grid (or of ``points``, field -> value dicts over the axes' fields:
    the planner's bisection steps) with its per-seed configurations and keys."""
    if spec.seeds < 1:
        raise FlagError(f"--seeds must be >= 1, got {spec.seeds}")
    plans = []
    for index, values in enumerate(grid_points(spec.axes) if points is None else points):
        point = apply_point(spec.base, values)
        configs = tuple(dataclasses.replace(point, seed=point.seed + s) for s in range(spec.seeds))
        keys = tuple(run_key(c, identity) for c in configs)
        plans.append(PointPlan(index, values, configs, keys, point_key(point, identity)))
    check_points(plans)
    return plans


def check_points(plans: Sequence[PointPlan]) -> None:
    """Flag combinations that only a whole point shows: the TP split of the model's heads,
    ``--request-rate`` with ``--time-scale``."""
    from simulator.cli.validation import check_tp_split

    for model, tp in sorted({(p.configs[0].model, p.configs[0].tp) for p in plans}):
        check_tp_split(model, tp)
    for plan in plans:
        cfg = plan.configs[0]
        if cfg.request_rate is not None and cfg.time_scale != 1.0:
            raise FlagError(
                "--time-scale scales the trace's arrival times, which --request-rate replaces; "
                "give one of the two"
            )


@dataclass
class _PointCollector:
    """Gathers each point's seed outcomes and emits points in grid order."""

    plans: Sequence[PointPlan]
    axes: Sequence[Axis]
    on_point: Callable[[dict[str, Any]], None] | None
    outcomes: dict[int, dict[int, Outcome]] = field(default_factory=dict)
    records: list[dict[str, Any]] = field(default_factory=list)

    def add(self, index: int, seed_idx: int, outcome: Outcome) -> None:
        self.outcomes.setdefault(index, {})[seed_idx] = outcome
        while len(self.records) < len(self.plans):
            nxt = self.plans[len(self.records)]
            got = self.outcomes.get(nxt.index, {})
            if len(got) < len(nxt.configs):
                return
            record = point_record(nxt, [got[s] for s in range(len(nxt.configs))], self.axes)
            self.records.append(record)
            del self.outcomes[nxt.index]
            if self.on_point is not None:
                self.on_point(record)


def point_record(plan: PointPlan, outcomes: Sequence[Outcome], axes: Sequence[Axis]) -> dict[str, Any]:
    """A point as ``--json`` prints it: ``flags`` (the axis values, by flag), ``config`` (every
    SimConfig field, at the first seed), ``seeds``, ``metrics`` (the summary; with several seeds
    each number is the mean), ``interval`` (95% interval of each number, several seeds only) and
    ``error`` (the first seed's refusal, if any; then ``metrics`` is null)."""
    by_field = {a.flag.field: a.flag.name for a in axes}
    record: dict[str, Any] = {
        "point": plan.index,
        "key": plan.point_key,
        "flags": {by_field[k]: v for k, v in plan.values.items()},
        "config": config_dict(plan.configs[0]),
        "seeds": [c.seed for c in plan.configs],
    }
    errors = [o["error"] for o in outcomes if o["error"] is not None]
    if errors:
        record.update(metrics=None, error=errors[0])
        return record
    summaries = [o["summary"] for o in outcomes]
    if len(summaries) == 1:
        record["metrics"] = summaries[0]
    else:
        record["metrics"], record["interval"] = aggregate(summaries)
    record["error"] = None
    return record


def run_sweep(
    trace: Any,
    spec: SweepSpec,
    *,
    backend: Backend,
    store: ResultStore | None = None,
    on_point: Callable[[dict[str, Any]], None] | None = None,
    progress: bool = False,
    identity: RunIdentity | None = None,
    points: Sequence[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Run the sweep (over ``points`` instead of the grid when given); returns its summary
    (also see :func:`point_record` for each point)."""
    start = time.monotonic()
    identity = identity if identity is not None else RunIdentity.for_trace(trace)
    plans = plan_points(spec, identity, points)
    where = {key: (p.index, s) for p in plans for s, key in enumerate(p.keys)}
    stored = _stored_outcomes(store, where)
    tasks: list[Task] = []
    configs: dict[int, tuple[PointPlan, int]] = {}
    for plan in plans:
        for s, cfg in enumerate(plan.configs):
            if plan.keys[s] not in stored:
                configs[len(tasks)] = (plan, s)
                tasks.append((len(tasks), cfg))
    collector = _PointCollector(plans, spec.axes, on_point)
    for key, outcome in stored.items():
        collector.add(*where[key], outcome)
    with SweepProgress(len(where), len(stored), enabled=progress) as bar:
        for task_id, outcome in backend.run(trace, tasks):
            plan, s = configs[task_id]
            if store is not None:
                store.write_run(_row(plan, s, outcome, identity))
            collector.add(plan.index, s, outcome)
            bar.advance()
    return _summary(spec, collector.records, identity, backend, store, len(tasks), len(stored), start)


def _stored_outcomes(store: ResultStore | None, where: dict[str, tuple[int, int]]) -> dict[str, Outcome]:
    """The outcomes of this sweep's runs already in the store."""
    if store is None:
        return {}
    present = store.keys() & where.keys()
    if not present:
        return {}
    out = {}
    for row in store.read(present).itertuples(index=False):
        # a null read back from parquet may be None or NaN, depending on the other files
        summary = json.loads(row.summary) if isinstance(row.summary, str) else None
        error = row.error if isinstance(row.error, str) else None
        out[row.key] = {"summary": summary, "error": error, "run_s": row.run_s}
    return out


def _row(plan: PointPlan, s: int, outcome: Outcome, identity: RunIdentity) -> dict[str, Any]:
    cfg = plan.configs[s]
    return make_row(
        key=plan.keys[s],
        point_key=plan.point_key,
        config=config_dict(cfg),
        summary=outcome["summary"],
        error=outcome["error"],
        provenance=identity.provenance(cfg),
        run_s=outcome["run_s"],
    )


def _summary(
    spec: SweepSpec,
    records: Sequence[dict[str, Any]],
    identity: RunIdentity,
    backend: Backend,
    store: ResultStore | None,
    ran: int,
    reused: int,
    start: float,
) -> dict[str, Any]:
    notes = list(spec.notes)
    sensitive = None
    if spec.seeds > 1:
        sensitive = any(lo < hi for r in records if r.get("interval") for lo, hi in r["interval"].values())
        if not sensitive:
            notes.append(
                "no metric varied over the seeds: this workload has no stochastic part the seed "
                "drives (a timestamped trace without --request-rate)"
            )
    return {
        "points": len(records),
        "seeds": spec.seeds,
        "runs": ran + reused,
        "ran": ran,
        "reused": reused,
        "errors": sum(1 for r in records if r["error"] is not None),
        "axes": {a.flag.name: list(a.values) for a in spec.axes},
        "backend": backend.name,
        "workers": backend.workers,
        "store": None if store is None else str(store.path),
        "elapsed_s": time.monotonic() - start,
        "seed_sensitive": sensitive,
        "notes": notes,
        "provenance": identity.provenance(spec.base),
    }
