"""Choosing a configuration for a report: memory cost, SLOs, the default rule, launch flags.

A plan directory carries its own recommendation (``plan.json``); a bare sweep store does not,
so the report chooses by one of two documented rules (docs/reports.md):

- with SLOs (``--slo "ttft.p90<=1.0,cache_hit_rate>=0.6"``): the cheapest point with no failed
  request that meets every bound; when none does, the point that misses them by the least
  (``met`` false);
- without: among the points with no failed request, those within ``HIT_RATE_TOLERANCE`` of the
  best hit rate, the cheapest; ties go to the lower p90 TTFT, then grid order.

Memory cost is the planner's (:mod:`simulator.planner.plan_cost`, one definition for `plan` and
`report`): the GPU KV budget plus the HiCache host pools, all TP ranks, priced per GiB-hour.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from simulator.errors import ConfigError, KvplanError
from simulator.planner.plan_cost import (
    DEFAULT_GPU_PRICE,
    DEFAULT_HOST_PRICE,
    Prices,
    kv_memory_gib,
    price_per_hour,
)
from simulator.reports.source import Point

__all__ = ["DEFAULT_GPU_PRICE", "DEFAULT_HOST_PRICE", "Prices"]  # the planner's, re-exported
HIT_RATE_TOLERANCE = 0.005
_OPS = {"<=": operator.le, "<": operator.lt, ">=": operator.ge, ">": operator.gt}


@dataclass(frozen=True)
class Slo:
    """One bound on a dotted path into the run summary (``ttft.p90<=1.0``)."""

    metric: str
    op: str
    bound: float

    def met(self, value: float | None) -> bool:
        return value is not None and _OPS[self.op](value, self.bound)

    def miss(self, value: float | None) -> float:
        """How far ``value`` is from the bound, relative to it (0 when met)."""
        if value is None:
            return float("inf")
        gap = value - self.bound if self.op in ("<=", "<") else self.bound - value
        return max(0.0, gap) / max(abs(self.bound), 1e-9)

    @property
    def lower_is_better(self) -> bool:
        return self.op in ("<=", "<")

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.bound:g}"


def parse_slo(text: str | None) -> tuple[Slo, ...]:
    """``"ttft.p90<=1.0,cache_hit_rate>=0.6"`` as bounds, parsed by the planner's SLO parser
    (:func:`simulator.planner.slo.parse_slos`, one grammar for `plan` and `report`); a malformed
    item is one :class:`ConfigError` line."""
    from simulator.errors import FlagError
    from simulator.planner.slo import parse_slos

    if not text or not text.strip():
        return ()
    try:
        return tuple(Slo(s.path, s.op, s.bound) for s in parse_slos(text))
    except FlagError as exc:
        raise ConfigError(str(exc)) from None


def metric(summary: dict[str, Any] | None, path: str) -> float | None:
    """A number of a run summary by dotted path (``ttft.p90``), or None."""
    value: Any = summary
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def memory(config: dict[str, Any]) -> dict[str, float | None]:
    """GPU KV and host memory (GiB, all TP ranks) as the planner prices them
    (:func:`simulator.planner.plan_cost.kv_memory_gib`), and the pools' tokens; None for each
    where SGLang refuses the configuration (such a point has no cost)."""
    from simulator.reports.configs import sim_config

    cfg = sim_config(config)
    sized = kv_memory_gib(cfg)
    try:
        sizes = cfg.pool_sizes().to_dict() if sized is not None else None
    except KvplanError:
        sizes = None
    if sized is None or sizes is None:
        return dict.fromkeys(("gpu_kv_gib", "host_kv_gib", "full_tokens", "swa_tokens"))
    return {
        "gpu_kv_gib": sized[0],
        "host_kv_gib": sized[1],
        "full_tokens": float(sizes["full_tokens"]),
        "swa_tokens": float(sizes.get("swa_tokens") or 0),
    }


def cost_per_hour(mem: dict[str, float | None], prices: Prices) -> float | None:
    """The planner's price (:func:`simulator.planner.plan_cost.price_per_hour`) of ``mem``."""
    if mem["gpu_kv_gib"] is None or mem["host_kv_gib"] is None:
        return None
    return price_per_hour(mem["gpu_kv_gib"], mem["host_kv_gib"], prices)


@dataclass(frozen=True)
class Choice:
    """The chosen point, whether it meets the SLOs (None: no SLO given), and why."""

    point: Point
    met: bool | None
    rule: str


def choose(points: Sequence[Point], costs: Sequence[float], slos: Sequence[Slo]) -> Choice:
    """The recommendation over ``points`` (``costs`` per point, same order)."""
    ok = [i for i, p in enumerate(points) if p.metrics is not None and p.failed == 0]
    if slos:
        return _choose_slo(points, costs, slos, ok)
    if not ok:
        raise ConfigError("every point of the sweep failed requests or was refused: nothing to recommend")
    hit = {i: metric(points[i].metrics, "cache_hit_rate") or 0.0 for i in ok}
    best = max(hit.values())
    near = [i for i in ok if hit[i] >= best - HIT_RATE_TOLERANCE]
    pick = min(near, key=lambda i: (costs[i], metric(points[i].metrics, "ttft.p90") or 0.0, i))
    rule = (
        f"no SLO given: the cheapest point with no failed request whose hit rate is within "
        f"{HIT_RATE_TOLERANCE} of the best ({best:.4f}); ties to the lower p90 TTFT"
    )
    return Choice(points[pick], None, rule)


def _choose_slo(
    points: Sequence[Point], costs: Sequence[float], slos: Sequence[Slo], ok: list[int]
) -> Choice:
    def misses(i: int) -> float:
        return sum(s.miss(metric(points[i].metrics, s.metric)) for s in slos)

    meeting = [i for i in ok if misses(i) == 0.0]
    text = ", ".join(map(str, slos))
    if meeting:
        pick = min(meeting, key=lambda i: (costs[i], i))
        return Choice(points[pick], True, f"the cheapest point with no failed request meeting {text}")
    candidates = ok or [i for i, p in enumerate(points) if p.metrics is not None]
    if not candidates:
        raise ConfigError("every point of the sweep was refused: nothing to recommend")
    pick = min(candidates, key=lambda i: (points[i].failed, misses(i), costs[i], i))
    return Choice(points[pick], False, f"no point meets {text}: the closest (smallest relative miss)")


def pareto_front(costs: Sequence[float], values: Sequence[float | None], lower_is_better: bool) -> list[int]:
    """Indices of the points no other point beats on both cost and value, by increasing cost."""
    pts = sorted(
        (c, v if lower_is_better else -v, i)
        for i, (c, v) in enumerate(zip(costs, values, strict=True))
        if v is not None
    )
    front, best = [], float("inf")
    for _, v, i in pts:
        if v < best:
            front.append(i)
            best = v
    return front
