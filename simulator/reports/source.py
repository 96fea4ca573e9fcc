"""What a report reads: a sweep's result store, or a plan directory (``plan.json`` + its store).

A *plan directory* (``kvplan plan ... -o DIR``) holds ``DIR/plan.json`` (``recommended``
{flags, metrics}, ``launch_flags``, ``slo``, ``met``, ``candidates``) and the sweep store under
``DIR/store``. A *bare store* is any ``kvplan sweep --store`` directory. Either way the store's
rows are folded into one :class:`Point` per grid point (its seeds averaged as the sweep does),
and the axes are the configuration fields that differ between points.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simulator.errors import ConfigError
from simulator.planner.stats import aggregate
from simulator.planner.store import ResultStore

PLAN_FILE = "plan.json"
STORE_MARKER = "kvplan-store.json"
# Fields that differ between the runs of one point or never describe a configuration.
NOT_AXES = frozenset({"seed", "profile", "log_decode", "check_invariants"})


@dataclass(frozen=True)
class Point:
    """One grid point: its whole configuration (nested groups flattened to ``group.field``),
    the mean summary over its seeds (None when refused), the refusal, the 95% intervals."""

    point_key: str
    config: dict[str, Any]
    seeds: tuple[int, ...]
    metrics: dict[str, Any] | None
    error: str | None
    interval: dict[str, list[float]] = field(default_factory=dict)

    @property
    def failed(self) -> int:
        """Aborted + rejected requests (a refused point counts as failing)."""
        if self.metrics is None:
            return 1
        return int(self.metrics.get("failed", 0) or 0)


@dataclass(frozen=True)
class ReportSource:
    """The input of a report: where it came from, the plan (None for a bare store), the points,
    the axes (fields that vary, in the order :func:`varying_fields` gives) and the provenance."""

    path: Path
    kind: str  # "plan" or "store"
    store_path: Path
    plan: dict[str, Any] | None
    points: tuple[Point, ...]
    axes: tuple[str, ...]
    provenance: dict[str, Any]


def load_source(path: str | Path) -> ReportSource:
    """Read a plan directory or a bare result store; :class:`ConfigError` when it is neither or
    holds no run."""
    path = Path(path)
    plan = None
    if (path / PLAN_FILE).is_file():
        plan = json.loads((path / PLAN_FILE).read_text())
        store_path = Path(plan.get("store") or "store")
        if not store_path.is_absolute() and (path / store_path).exists():
            store_path = path / store_path  # relative to the plan directory first
        kind = "plan"
    elif (path / STORE_MARKER).is_file():
        store_path, kind = path, "store"
    else:
        raise ConfigError(f"{path}: neither a plan directory ({PLAN_FILE}) nor a kvplan result store")
    if not (store_path / STORE_MARKER).is_file():
        raise ConfigError(f"{path}: the plan's store {store_path} is not a kvplan result store")
    frame = ResultStore(store_path).read()
    if frame.empty:
        raise ConfigError(f"{store_path}: the result store holds no run")
    points = fold_points(frame.to_dict("records"))
    axes = varying_fields(points)
    points.sort(key=lambda p: axis_sort_key(p, axes))
    return ReportSource(
        path=path,
        kind=kind,
        store_path=store_path,
        plan=plan,
        points=tuple(points),
        axes=tuple(axes),
        provenance=store_provenance(frame.iloc[0].to_dict()),
    )


def flatten_config(config: dict[str, Any]) -> dict[str, Any]:
    """``{"hicache": {"hicache_ratio": 2}}`` -> ``{"hicache.hicache_ratio": 2}``."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            out[key] = value
    return out


def fold_points(rows: Sequence[dict[str, Any]]) -> list[Point]:
    """One :class:`Point` per ``point_key``, seeds in order (points in store order)."""
    by_point: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_point.setdefault(row["point_key"], []).append(row)
    points = []
    for key, runs in by_point.items():
        runs.sort(key=lambda r: int(r["seed"]))
        config = flatten_config(json.loads(runs[0]["config"]))
        config.pop("seed", None)
        errors = [r["error"] for r in runs if isinstance(r["error"], str)]
        summaries = [json.loads(r["summary"]) for r in runs if isinstance(r["summary"], str)]
        metrics, interval = None, {}
        if not errors and summaries:
            metrics, interval = (summaries[0], {}) if len(summaries) == 1 else aggregate(summaries)
        seeds = tuple(int(r["seed"]) for r in runs)
        points.append(Point(key, config, seeds, metrics, errors[0] if errors else None, interval))
    return points


def axis_sort_key(point: Point, axes: Sequence[str]) -> tuple:
    """Grid order: by each axis value in turn, unset (None) first."""
    values = [point.config.get(a) for a in axes]
    return tuple((v is not None, v if v is not None else 0) for v in values)


def varying_fields(points: Sequence[Point]) -> list[str]:
    """The configuration fields whose value is not the same at every point (the sweep's axes)."""
    if not points:
        return []
    fields = [f for f in points[0].config if f not in NOT_AXES]
    return [f for f in fields if len({json.dumps(p.config.get(f), default=str) for p in points}) > 1]


def store_provenance(row: dict[str, Any]) -> dict[str, Any]:
    """The provenance of a store row, in :func:`simulator.provenance.provenance`'s shape."""
    return {
        "kvplan_version": row["kvplan_version"],
        "kvplan_source_hash": row["kvplan_source_hash"],
        "sglang_version": row["sglang_version"],
        "trace_hash": row["trace_hash"],
        "trace_source": row.get("trace_source") or "",
        "profile": {"name": row["profile_name"], "hash": row["profile_hash"]},
    }
