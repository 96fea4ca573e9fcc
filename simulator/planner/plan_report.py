"""The plan ``kvplan plan`` prints: launch flags, the reasons, the candidates (docs/planner.md).

:func:`plan_object` turns a finished search into the ``--json`` object::

    {"recommended": {"flags": {...}, "metrics": {...}, "cost": {...}},
     "launch_flags": "...", "slo": {...}, "met": true, "candidates": [...],
     "reasons": [...], "search": {...}, "provenance": {...}}

``flags`` uses SGLang's launch-flag spelling (a boolean flag as ``true``); every one of them is
also a ``kvplan run`` flag, so the recommendation can be checked by running it.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from simulator.engine.config import SimConfig
from simulator.hicache_args import HiCacheArgs
from simulator.planner.plan_search import Point, SearchTrail, closest
from simulator.planner.slo import FAILED_PATH, describe_failures

if TYPE_CHECKING:
    from simulator.planner.plan_run import PlanSetup, SweepOracle

# Always printed (when set): what the plan searched and what sizes the pools.
_ALWAYS = ("tp", "page_size", "mem_fraction_static", "swa_full_tokens_ratio")
_DEFAULTS = dataclasses.asdict(SimConfig()) | dataclasses.asdict(HiCacheArgs())


def sglang_flags(cfg: SimConfig) -> dict[str, Any]:
    """The SGLang launch flags of ``cfg``: the searched ratios, TP and page size, and every
    other SGLang flag whose value is not the default (the model path is the user's own)."""
    from simulator.cli.server_flags import SERVER_FLAGS

    values = dataclasses.asdict(cfg)
    values.update(dataclasses.asdict(cfg.hicache))
    out: dict[str, Any] = {}
    for flag in SERVER_FLAGS:
        name = flag.sglang_name
        if name is None or flag.field == "model":
            continue
        value = values[flag.field]
        if value is None or (flag.field not in _ALWAYS and value == _DEFAULTS[flag.field]):
            continue
        if isinstance(value, bool):
            if not value:
                continue
        out[name] = value
    if cfg.hicache.enabled:
        out["--enable-hierarchical-cache"] = True
    return out


def launch_string(flags: dict[str, Any]) -> str:
    """The flags as one command-line string (a boolean flag bare)."""
    parts = []
    for name, value in flags.items():
        parts.append(name if value is True else f"{name} {value}")
    return " ".join(parts)


def plan_object(setup: PlanSetup, oracle: SweepOracle, trail: SearchTrail) -> dict[str, Any]:
    """The ``--json`` object of a finished search."""
    from simulator.planner.plan_reasons import reasons

    met = trail.best is not None
    pick = trail.best if met else closest(trail.results)
    if pick is None:
        raise ValueError("the search evaluated no point")
    chosen = oracle.evaluated[pick]
    flags = sglang_flags(chosen.config)
    recommended = {
        "flags": flags,
        "metrics": chosen.record["metrics"],
        "cost": None if chosen.cost is None else chosen.cost.to_dict(),
        "error": chosen.record["error"],
    }
    if setup.seeds > 1:  # the mean over the seeds; met at every one of them
        recommended.update(seeds=chosen.record["seeds"], interval=chosen.record.get("interval"))
    return {
        "recommended": recommended,
        "launch_flags": launch_string(flags),
        "slo": slo_object(setup, oracle, pick),
        "met": met,
        "candidates": [candidate(oracle, p, trail) for p in trail.results],
        "reasons": reasons(setup, oracle, trail, pick),
        "search": search_object(setup, oracle),
        "provenance": oracle.identity.provenance(setup.base),
    }


def slo_object(setup: PlanSetup, oracle: SweepOracle, pick: Point) -> dict[str, Any]:
    """Each SLO (and the implied no-failure one) with its value and verdict at ``pick``."""
    verdict = oracle.evaluated[pick].verdict
    out: dict[str, Any] = {}
    for s in setup.slos:
        out[s.text] = {
            "path": s.path,
            "op": s.op,
            "bound": s.bound,
            "value": verdict.values.get(s.path),
            "met": verdict.violations[s.text] == 0,
        }
    out["failed==0"] = {
        "path": FAILED_PATH,
        "op": "<=",
        "bound": 0,
        "value": verdict.values.get(FAILED_PATH),
        "met": verdict.violations[FAILED_PATH] == 0,
        "implied": True,
    }
    return out


def candidate(oracle: SweepOracle, point: Point, trail: SearchTrail) -> dict[str, Any]:
    """One evaluated point, as the ``candidates`` list gives it (in evaluation order)."""
    ev = oracle.evaluated[point]
    return {
        "flags": sglang_flags(ev.config),
        "stage": trail.stages[point],
        "cost": None if ev.cost is None else ev.cost.to_dict(),
        "met": ev.verdict.met,
        "violation": ev.verdict.total,
        "values": ev.verdict.values,
        "failing": describe_failures(ev.verdict, oracle.setup.slos) if not ev.verdict.met else None,
        "key": ev.record["key"],
        "error": ev.record["error"],
    }


def search_object(setup: PlanSetup, oracle: SweepOracle) -> dict[str, Any]:
    """How the plan searched: grid, prices, batches (one sweep each), runs, notes."""
    space = setup.space
    summaries = oracle.summaries
    return {
        "mem_fraction_levels": list(space.fractions),
        "f0": space.f0,
        "swa_ratios": list(space.swa_ratios),
        "hicache_ratios": list(space.hicache_ratios),
        "hicache_searched": setup.hicache_axis,
        "seeds": setup.seeds,
        "prices": dataclasses.asdict(setup.prices),
        "batches": [
            {"stage": s["stage"], "points": s["points"], "ran": s["ran"], "reused": s["reused"]}
            for s in summaries
        ],
        "runs": sum(s["runs"] for s in summaries),
        "ran": sum(s["ran"] for s in summaries),
        "reused": sum(s["reused"] for s in summaries),
        "backend": oracle.backend.name,
        "workers": oracle.backend.workers,
        "store": None if oracle.store is None else str(oracle.store.path),
        "notes": list(setup.notes),
    }


def format_text(plan: dict[str, Any]) -> str:
    """The plan as text: the verdict, the flags to paste, the reasons, the cost."""
    rec = plan["recommended"]
    head = "meets every SLO" if plan["met"] else "NO configuration searched meets every SLO; closest"
    lines = [f"kvplan plan: {head}:", "", f"  {plan['launch_flags']}", ""]
    if rec["cost"] is not None:
        c = rec["cost"]
        lines.append(
            f"cost: {c['gpu_kv_gib']:.1f} GiB GPU KV + {c['host_gib']:.1f} GiB host "
            f"= ${c['per_hour']:.3f}/hour"
        )
    for text, s in plan["slo"].items():
        value = "n/a" if s["value"] is None else f"{s['value']:.4g}"
        lines.append(f"  {'ok  ' if s['met'] else 'FAIL'} {text}: {value}")
    lines.append("why:")
    lines += [f"  - {r}" for r in plan["reasons"]]
    search = plan["search"]
    lines.append(
        f"searched {len(plan['candidates'])} configurations ({search['ran']} runs executed, "
        f"{search['reused']} from the store) on {search['backend']} ({search['workers']} workers)"
    )
    lines += [f"note: {n}" for n in search["notes"]]
    return "\n".join(lines)
