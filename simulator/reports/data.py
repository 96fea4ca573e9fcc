"""Assemble everything a report shows, as one JSON-ready dict (no plotting, no rendering).

:func:`assemble` reads the points of a :class:`~simulator.reports.source.ReportSource`, prices
them, takes the plan's recommendation (or chooses one, :mod:`simulator.reports.recommend`),
runs the recommended configuration once more on the trace to get its usage over time, and
computes the figures' data (:mod:`simulator.reports.figures`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simulator.errors import ConfigError
from simulator.reports import figures
from simulator.reports.configs import flags_string, launch_flags, sim_config
from simulator.reports.recommend import Choice, Prices, Slo, choose, cost_per_hour, memory, metric, parse_slo
from simulator.reports.source import Point, ReportSource

TABLE_METRICS = ("cache_hit_rate", "ttft.p90", "latency.p90", "failed")


@dataclass(frozen=True)
class ReportOptions:
    """How to build a report: SLOs for a bare store, prices, where the trace is, table size."""

    slo: str | None = None
    prices: Prices = field(default_factory=Prices)
    trace: Path | None = None
    fmt: str | None = None
    block_size: int | None = None
    top: int = 10
    # The trace itself, already loaded: `kvplan plan -o` passes the one it planned on (--limit
    # and --what-if applied), which no file holds.
    loaded_trace: Any = None


def load_report_trace(source: ReportSource, opts: ReportOptions) -> Any:
    """The trace the sweep ran on: ``opts.trace`` or the store's ``trace_source``, cut to the
    sweep's request count when the store's trace hash says it was (``--limit``), and checked
    against that hash."""
    from simulator.provenance import trace_hash
    from traces import load_trace

    want = source.provenance["trace_hash"]
    if opts.loaded_trace is not None:
        if trace_hash(opts.loaded_trace) != want:
            raise ConfigError(f"the given trace is not the one the sweep ran on (hash {want[:16]})")
        return opts.loaded_trace
    path = opts.trace or Path(source.provenance.get("trace_source") or "")
    if not str(path) or not Path(path).exists():
        raise ConfigError(f"the sweep's trace {str(path)!r} is not here: give it with --trace")
    trace = load_trace(Path(path), fmt=opts.fmt, block_size=opts.block_size)
    if trace_hash(trace) == want:
        return trace
    served = next((p.metrics for p in source.points if p.metrics), None) or {}
    n = int(served.get("requests_submitted") or served.get("requests") or 0)
    if 0 < n < len(trace) and trace_hash(trace.head(n)) == want:
        return trace.head(n)
    raise ConfigError(f"{path}: not the trace the sweep ran on (its content hash differs from {want[:16]})")


def plan_slos(plan: dict[str, Any] | None, given: str | None) -> tuple[Slo, ...]:
    """SLOs from ``--slo``, else from ``plan.json``'s ``slo``: the map ``kvplan plan`` writes,
    SLO text -> {path, op, bound, value, met[, implied]} (simulator/planner/plan_report.py); the
    implied ``failed==0`` is left out (every report already asks for no failed request)."""
    if given:
        return parse_slo(given)
    slo = (plan or {}).get("slo") or {}
    if not isinstance(slo, dict):
        raise ConfigError(f"plan.json: 'slo' is a {type(slo).__name__}, expected kvplan plan's SLO map")
    out = []
    for text, entry in slo.items():
        if not isinstance(entry, dict) or not {"path", "op", "bound"} <= entry.keys():
            raise ConfigError(f"plan.json: SLO {text!r} lacks its path, op and bound")
        if not entry.get("implied"):
            out.append(Slo(str(entry["path"]), str(entry["op"]), float(entry["bound"])))
    return tuple(out)


def plan_choice(points: tuple[Point, ...], plan: dict[str, Any], axes: tuple[str, ...]) -> Choice | None:
    """The point ``plan.json`` recommends: the one whose launch flags include all of its flags."""
    want = (plan.get("recommended") or {}).get("flags") or {}
    fields = flag_fields()
    known = {fields[k]: v for k, v in want.items() if k in fields}
    for p in points:
        if known and all(_same(p.config.get(f), v) for f, v in known.items()):
            return Choice(p, plan.get("met"), "the plan's recommendation (plan.json)")
    return None


def flag_fields() -> dict[str, str]:
    """SGLang launch flag -> configuration key (``group.field`` for grouped flags)."""
    from simulator.cli.server_flags import SERVER_FLAGS

    return {
        f.sglang_name: f.field if f.group is None else f"{f.group}.{f.field}"
        for f in SERVER_FLAGS
        if f.sglang_name is not None
    }


def _same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool):
        return abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(b)))
    return a == b or str(a) == str(b)


def assemble(source: ReportSource, opts: ReportOptions) -> dict[str, Any]:
    """The report's whole content (what ``figures.json`` holds and the renderers show)."""
    from simulator.run import run_config

    points, axes = source.points, source.axes
    mems = [memory(p.config) for p in points]
    costs = [cost_per_hour(m, opts.prices) for m in mems]
    slos = plan_slos(source.plan, opts.slo)
    notes: list[str] = []
    choice = plan_choice(points, source.plan, axes) if source.plan else None
    if source.plan and choice is None:
        notes.append("plan.json's recommended flags match no point of its store: chosen by the report's rule")
    choice = choice or choose(points, costs, slos)
    rec = choice.point
    trace = load_report_trace(source, opts)
    run = run_config(trace, sim_config({**rec.config, "seed": rec.seeds[0]}))  # its first seed
    labels = [point_label(p, axes) for p in points]
    flags = launch_flags(rec.config, axes)
    return {
        "source": {"kind": source.kind, "path": str(source.path), "store": str(source.store_path)},
        "axes": [{"field": a, "flag": figures.flag_name(a)} for a in axes],
        "recommended": _recommended(rec, choice, flags, points.index(rec), mems, costs, run.summary),
        "slo": [str(s) for s in slos],
        "figures": _figures(points, axes, rec, costs, mems, labels, slos, trace, run, notes),
        "table": top_table(points, axes, mems, costs, slos, opts.top),
        "assumptions": assumptions(source, rec, trace, opts.prices),
        "notes": notes,
    }


def _recommended(
    rec: Point, choice: Choice, flags: dict, index: int, mems: list, costs: list, rerun: dict
) -> dict[str, Any]:
    plan_flags = flags_string(flags)
    return {
        "flags": flags,
        "launch_flags": plan_flags,
        "metrics": {m: metric(rec.metrics, m) for m in (*TABLE_METRICS, "request_throughput")},
        "met": choice.met,
        "rule": choice.rule,
        "memory": mems[index],
        "cost_per_hour": costs[index],
        "rerun_matches_store": _rerun_matches(rec.metrics, rerun) if len(rec.seeds) == 1 else None,
    }


def _rerun_matches(stored: dict | None, rerun: dict) -> bool:
    """Whether the rerun (for the time series) reproduced the stored result's main numbers
    (None with several seeds: the stored numbers are means)."""
    return stored is not None and all(metric(stored, m) == metric(rerun, m) for m in TABLE_METRICS)


def _figures(points, axes, rec, costs, mems, labels, slos, trace, run, notes) -> dict[str, Any]:
    x, y, axis_notes = figures.heatmap_axes(axes)
    notes.extend(axis_notes)
    fixed = {a: rec.config.get(a) for a in axes if a not in (x, y)}
    pareto_metrics = {s.metric: s.lower_is_better for s in slos} or dict(figures.DEFAULT_PARETO)
    sweep_pts = [
        {"full_tokens": int(m["full_tokens"]), "hit_rate": metric(p.metrics, "cache_hit_rate")}
        for p, m in zip(points, mems, strict=True)
        if p.metrics is not None and p.failed == 0
    ]
    return {
        "heatmap_hit_rate": figures.heatmap(points, x, y, "cache_hit_rate", fixed),
        "heatmap_ttft_p90": figures.heatmap(points, x, y, "ttft.p90", fixed),
        "capacity": figures.capacity_curve(trace, rec.config, sweep_pts),
        "usage": figures.usage_series(run.frames, run.pools),
        "pareto": [figures.pareto(points, costs, m, low, labels) for m, low in pareto_metrics.items()],
    }


def point_label(point: Point, axes: tuple[str, ...]) -> str:
    return ", ".join(f"{figures.flag_name(a).lstrip('-')}={point.config.get(a)}" for a in axes) or "the point"


def top_table(points, axes, mems, costs, slos, top: int) -> list[dict[str, Any]]:
    """The best ``top`` points: those meeting the SLOs (or serving every request) first, then by
    hit rate (no SLO) or cost (SLOs)."""
    rows = []
    for i, p in enumerate(points):
        meets = p.failed == 0 and all(s.met(metric(p.metrics, s.metric)) for s in slos)
        row = {figures.flag_name(a): p.config.get(a) for a in axes}
        row.update({m: metric(p.metrics, m) for m in TABLE_METRICS})
        row.update(
            gpu_kv_gib=mems[i]["gpu_kv_gib"], host_kv_gib=mems[i]["host_kv_gib"], cost_per_hour=costs[i]
        )
        row.update(meets=meets, error=p.error)
        rows.append((i, row))

    def cost(row: dict[str, Any]) -> float:
        return float("inf") if row["cost_per_hour"] is None else row["cost_per_hour"]

    if slos:
        rows.sort(key=lambda r: (not r[1]["meets"], cost(r[1]), r[0]))
    else:
        rows.sort(key=lambda r: (not r[1]["meets"], -(r[1]["cache_hit_rate"] or 0.0), cost(r[1]), r[0]))
    return [row for _, row in rows[:top]]


def assumptions(source: ReportSource, rec: Point, trace: Any, prices: Prices) -> dict[str, Any]:
    """Model, GPU, the recommended point's resolved pools, trace statistics, cost-model
    profile, prices, and where the numbers came from."""
    from traces import trace_stats

    cfg = sim_config(rec.config)
    sizes = cfg.pool_sizes().to_dict()
    stats = trace_stats(trace, int(sizes["page_size"]))
    return {
        "model": cfg.model,
        "gpu": cfg.gpu,
        "tp": cfg.tp,
        "page_size": sizes["page_size"],
        "sliding_window": sizes.get("sliding_window"),
        "pools": {
            k: sizes.get(k) for k in ("full_tokens", "swa_tokens", "host_full_tokens", "host_swa_tokens")
        },
        "sizing_notes": sizes.get("notes", []),
        "trace": {k: stats.get(k) for k in _TRACE_KEYS},
        "profile": source.provenance["profile"],
        "prices_usd_per_gib_hour": {"gpu": prices.gpu_gib_hour, "host": prices.host_gib_hour},
        "provenance": source.provenance,
        "points": len(source.points),
        "seeds": sorted({s for p in source.points for s in p.seeds}),
    }


_TRACE_KEYS = (
    "source",
    "requests",
    "time_span_s",
    "request_rate_per_s",
    "input_len",
    "output_len",
    "total_input_tokens",
    "total_output_tokens",
    "sessions",
    "multi_turn_sessions",
    "distinct_pages",
    "infinite_cache_hit_rate",
)
