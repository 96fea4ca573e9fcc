"""Why the plan recommends what it does: which constraint binds, or what would be needed.

When the SLOs are met, the binding constraint is the one that fails at the next cheaper step:
the recommended column's largest failing ``--mem-fraction-static`` (the bisection's lower
bracket), the SWA ratios tried beside it, and the smaller HiCache ratios. When nothing meets
them, the recommendation is the closest candidate (smallest normalised violation) and each
violated SLO gets the best value any candidate reached and what that suggests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from simulator.planner.plan_search import Point, SearchTrail
from simulator.planner.slo import FAILED_PATH, describe_failures

if TYPE_CHECKING:
    from simulator.planner.plan_run import PlanSetup, SweepOracle


def _where(oracle: SweepOracle, point: Point) -> str:
    """``--mem-fraction-static 0.07 (9.3 GiB KV, $0.28/h), --swa-full-tokens-ratio 0.3``."""
    col, f = point
    ev = oracle.evaluated[point]
    parts = [f"--mem-fraction-static {f:g}"]
    if ev.cost is not None:
        parts[0] += f" ({ev.cost.gpu_kv_gib:.1f} GiB KV, ${ev.cost.per_hour:.3f}/h)"
    if col.swa is not None:
        parts.append(f"--swa-full-tokens-ratio {col.swa:g}")
    if oracle.setup.hicache_axis:
        parts.append("HiCache off" if col.hicache is None else f"--hicache-ratio {col.hicache:g}")
    return ", ".join(parts)


def reasons(setup: PlanSetup, oracle: SweepOracle, trail: SearchTrail, pick: Point) -> list[str]:
    """The reasons, one sentence each."""
    if trail.best is not None:
        return met_reasons(setup, oracle, trail, pick)
    return unmet_reasons(setup, oracle, trail, pick)


def met_reasons(setup: PlanSetup, oracle: SweepOracle, trail: SearchTrail, pick: Point) -> list[str]:
    col, f = pick
    out = [f"cheapest configuration meeting every SLO: {_where(oracle, pick)}"]
    lo = trail.brackets.get(col, (setup.space.f0, f))[0]
    below = (col, lo)
    if setup.base.mem_fraction_static is not None:
        out.append("GPU memory was not searched (--mem-fraction-static given)")
    elif below in oracle.evaluated and lo < f:
        fails = describe_failures(oracle.evaluated[below].verdict, setup.slos)
        out.append(f"GPU memory binds: the next cheaper step, {_where(oracle, below)}, fails: {fails}")
    else:
        out.append(
            "GPU memory does not bind within the search: the smallest KV budget searched meets "
            "every SLO (a smaller one was not tried)"
        )
    same_f = [p for p in oracle.evaluated if p[1] == lo and p[0] != col and p[0].hicache == col.hicache]
    failing_swa = [p for p in same_f if not oracle.evaluated[p].verdict.met]
    if col.swa is not None and failing_swa:
        tried = ", ".join(f"{p[0].swa:g}" for p in sorted(failing_swa, key=lambda p: p[0].swa or 0))
        out.append(
            f"no other --swa-full-tokens-ratio tried at --mem-fraction-static {lo:g} ({tried}) "
            "meets every SLO either"
        )
    if setup.hicache_axis:
        out.append(_hicache_reason(oracle, pick))
    out.append(_tightest(setup, oracle, pick))
    return out


def _hicache_reason(oracle: SweepOracle, pick: Point) -> str:
    col, f = pick
    lower = [
        p
        for p in oracle.evaluated
        if p[1] == f
        and p[0].swa == col.swa
        and _host(p) < _host(pick)
        and not oracle.evaluated[p].verdict.met
    ]
    if col.hicache is None:
        return "host RAM: HiCache off is enough (no host pool)"
    if not lower:
        return f"host RAM: --hicache-ratio {col.hicache:g} (no smaller host pool was tried at this memory)"
    nearest = max(lower, key=_host)
    fails = describe_failures(oracle.evaluated[nearest].verdict, oracle.setup.slos)
    return f"host RAM binds: {_where(oracle, nearest)} fails: {fails}"


def _host(point: Point) -> float:
    return 0.0 if point[0].hicache is None else point[0].hicache


def _tightest(setup: PlanSetup, oracle: SweepOracle, pick: Point) -> str:
    """The SLO with the least normalised margin at the recommended point."""
    verdict = oracle.evaluated[pick].verdict
    margins = []
    for s in setup.slos:
        v = verdict.values.get(s.path)
        if v is not None:
            scale = abs(s.bound) if s.bound != 0 else 1.0
            margins.append((abs(v - s.bound) / scale, s, v))
    if not margins:
        return "no request aborted or rejected"
    _, s, v = min(margins, key=lambda m: m[0])
    return f"tightest SLO at the recommendation: {s.path} = {v:.4g} (bound {s.op} {s.bound:g})"


def unmet_reasons(setup: PlanSetup, oracle: SweepOracle, trail: SearchTrail, pick: Point) -> list[str]:
    ev = oracle.evaluated[pick]
    out = [
        f"no configuration searched meets every SLO; closest (smallest normalised violation, "
        f"{ev.verdict.total:.3g}): {_where(oracle, pick)}: {describe_failures(ev.verdict, setup.slos)}"
    ]
    for s in setup.slos:
        if ev.verdict.violations[s.text] == 0:
            continue
        best = _best_value(oracle, trail, s)
        if best is None:
            out.append(f"{s.text}: no run produced {s.path}")
            continue
        value, point = best
        out.append(
            f"{s.text}: the best any configuration reached is {value:.4g} ({_where(oracle, point)}); "
            + _needed(setup, s, point)
        )
    if ev.verdict.violations[FAILED_PATH] > 0:
        out.append(
            "requests are aborted or rejected at the closest configuration: prompts longer than "
            "the context or the KV pool (--allow-auto-truncate cuts them), or too little memory"
        )
    return out


def _best_value(oracle: SweepOracle, trail: SearchTrail, slo: Any) -> tuple[float, Point] | None:
    """The best value of ``slo`` over the evaluated points; ties: the first in the search's
    order (``trail.results``: the coarse grid's order, whatever batches ran it)."""
    found = [(oracle.evaluated[p].verdict.values.get(slo.path), p) for p in trail.results]
    found = [(v, p) for v, p in found if v is not None]
    if not found:
        return None
    pick = min if slo.upper else max
    return pick(found, key=lambda vp: vp[0])


def _needed(setup: PlanSetup, slo: Any, point: Point) -> str:
    """What the best value's position suggests."""
    top = max(setup.space.fractions)
    if point[1] >= top:
        return (
            f"it is best at the most GPU memory searched (--mem-fraction-static {top:g}): more KV "
            "memory per rank than that (--max-mem-fraction), more ranks (--tp) or a larger GPU, "
            "less load (see --what-if), or a looser bound"
        )
    return (
        "more memory does not improve it beyond that point: the bound is out of reach of the KV "
        "cache (compute-bound, or a hit rate above the trace's reuse); loosen it or change the workload"
    )
