"""The capacity planner's building blocks: grids over server flags, sweeps on local processes or
Dask, and the result store (docs/planner.md).

``kvplan sweep`` is :func:`run_sweep` behind a thin CLI (``simulator/cli/sweep_cmd.py``); the
planner and the reports read the same store (:class:`ResultStore`).
"""

from simulator.planner.backends import DaskBackend, ProcessBackend, SerialBackend, make_backend, run_task
from simulator.planner.grid import Axis, default_axes, parse_axis, resolve_flag
from simulator.planner.keys import RunIdentity, point_key, run_key
from simulator.planner.stats import aggregate, mean_interval
from simulator.planner.store import ResultStore
from simulator.planner.sweep import PointPlan, SweepSpec, plan_points, run_sweep

__all__ = [
    "Axis",
    "DaskBackend",
    "PointPlan",
    "ProcessBackend",
    "ResultStore",
    "RunIdentity",
    "SerialBackend",
    "SweepSpec",
    "aggregate",
    "default_axes",
    "make_backend",
    "mean_interval",
    "parse_axis",
    "plan_points",
    "point_key",
    "resolve_flag",
    "run_key",
    "run_sweep",
    "run_task",
]
