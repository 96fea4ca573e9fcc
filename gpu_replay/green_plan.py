"""The plan, the arithmetic and the tables of :mod:`gpu_replay.scatter_green` (no CUDA here, so the
CPU tests and ``--dry-run`` exercise all of it).

Hidden fraction of a load behind compute, two ways (both clipped to [0, 1]):

- ``hidden_full`` = (compute time on the whole GPU + load time - both) / load time: the honest
  number, charging the partition's slowdown of the compute to the overlap;
- ``hidden_part`` = the same with the compute timed alone on its own partition (what hides behind
  compute that already runs on fewer SMs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = [
    "Plan",
    "curve_table",
    "hidden",
    "overlap_row",
    "overlap_table",
    "pct",
    "synthetic_result",
    "verdict_lines",
    "verdicts",
]

TARGET_PCT = 90.0
TARGET_HIDDEN = 0.9


@dataclass(frozen=True)
class Plan:
    """What one run measures. ``modes``: ``split`` (loads on a green context of k SMs, compute on
    the rest), ``plain_load`` (compute on the rest, loads on an ordinary stream, k blocks); the
    unpartitioned baseline (``none``: PER_LAYER_TMA on the whole GPU) is always measured."""

    ks: tuple[int, ...] = (4, 8, 16, 24, 32)
    prefixes: tuple[int, ...] = (1024, 2048, 4096, 8192, 16384, 32768)
    overlap_prefixes: tuple[int, ...] = (4096, 32768)
    ratios: tuple[float, ...] = (1.0, 1.25, 1.5)
    orders: tuple[str, ...] = ("load_first", "compute_first", "pipelined")
    directions: tuple[str, ...] = ("h2d", "d2h")
    modes: tuple[str, ...] = ("split", "plain_load")

    def overlap_cells(self, prefix: int) -> list[tuple[str, int, str, str]]:
        """(mode, k, direction, order) for one prefix: the baseline first (k = 0), then each k."""
        cells = [("none", 0, d, o) for d in self.directions for o in self.orders]
        for k in self.ks:
            for mode in self.modes:
                cells += [(mode, k, d, o) for d in self.directions for o in self.orders]
        return cells


def hidden(load_s: float, compute_s: float, both_s: float) -> float:
    """Fraction of the load's time that the overlap removed, clipped to [0, 1]."""
    if load_s <= 0:
        return 0.0
    return max(0.0, min(1.0, (compute_s + load_s - both_s) / load_s))


def pct(gbps: float, peak: float) -> float:
    return 100.0 * gbps / peak if peak > 0 else float("nan")


def _fmt(x, nd: int = 1) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.{nd}f}"


def curve_table(res: dict) -> str:
    """Per-layer load alone, % of the run's copy peak: one row per (mode, k), H2D then D2H."""
    rows = res.get("curve", [])
    prefixes = sorted({r["prefix"] for r in rows})
    keys = sorted({(r["mode"], r["k"]) for r in rows}, key=lambda t: (t[0] != "none", t[1], t[0]))
    head = "mode        k  sms | " + " ".join(f"h{p // 1024}k".rjust(5) for p in prefixes)
    head += " | " + " ".join(f"d{p // 1024}k".rjust(5) for p in prefixes)
    out = ["per-layer load alone, % of copy peak (h = H2D, d = D2H)", head]
    for mode, k in keys:
        mine = {(r["direction"], r["prefix"]): r for r in rows if r["mode"] == mode and r["k"] == k}
        sms = next(iter(mine.values())).get("load_sms", 0)
        cells = [
            " ".join(_fmt(mine.get((d, p), {}).get("pct")).rjust(5) for p in prefixes) for d in ("h2d", "d2h")
        ]
        out.append(f"{mode:10s} {k:2d} {sms:4d} | " + " | ".join(cells))
    return "\n".join(out)


def overlap_table(res: dict) -> str:
    """One row per (prefix, mode, k, direction, order): load % of peak alone and while overlapped,
    compute slowdown on the partition, hidden fraction vs full-GPU compute and vs partition compute
    at each compute ratio."""
    rows = res.get("overlap", [])
    ratios = sorted({r["ratio"] for r in rows})
    rh = "/".join(f"{x:g}" for x in ratios)
    out = [
        "overlap: load % of peak alone / overlapped; compute slowdown on the partition; "
        f"hidden vs full-GPU compute ({rh}x) | vs partition compute",
        "pref mode        k dir order          alone  ovl  slow | hidden_full    | hidden_part",
    ]
    groups: dict[tuple, list] = {}
    for r in rows:
        groups.setdefault((r["prefix"], r["mode"], r["k"], r["direction"], r["order"]), []).append(r)
    for key in sorted(groups, key=lambda t: (t[0], t[1] != "none", t[2], t[1], t[3], t[4])):
        g = sorted(groups[key], key=lambda r: r["ratio"])
        prefix, mode, k, d, order = key
        slow = g[0]["compute_part_s"] / g[0]["compute_full_s"] if g[0]["compute_full_s"] else float("nan")
        hf = " ".join(_fmt(100 * r["hidden_full"], 0).rjust(3) for r in g)
        hp = " ".join(_fmt(100 * r["hidden_part"], 0).rjust(3) for r in g)
        out.append(
            f"{prefix // 1024:3d}k {mode:10s} {k:2d} {d} {order:13s} "
            f"{_fmt(g[0]['pct_alone']).rjust(5)} {_fmt(min(r['pct_overlapped'] for r in g)).rjust(5)} "
            f"{_fmt(slow, 2).rjust(5)} | {hf.ljust(13)} | {hp}"
        )
    return "\n".join(out)


def verdicts(res: dict) -> list[dict]:
    """Per (mode, k, direction, order): does the 4k per-layer load reach 90% of the peak alone
    (timed on the cell's own streams; the overlapped figure is recorded beside it), and is
    >= 90% hidden (vs full-GPU compute) at every ratio at every overlap prefix? The issue's
    targets, both at once."""
    rows = res.get("overlap", [])
    keys = sorted({(r["mode"], r["k"], r["direction"], r["order"]) for r in rows})
    out = []
    for mode, k, d, order in keys:
        mine = [r for r in rows if (r["mode"], r["k"], r["direction"], r["order"]) == (mode, k, d, order)]
        at4k = [r for r in mine if r["prefix"] == 4096]
        bw_alone = min((r["pct_alone"] for r in at4k), default=float("nan"))
        bw_ovl = min((r["pct_overlapped"] for r in at4k), default=float("nan"))
        h_full = min((r["hidden_full"] for r in mine), default=float("nan"))
        h_part = min((r["hidden_part"] for r in mine), default=float("nan"))
        out.append(
            {
                "mode": mode,
                "k": k,
                "direction": d,
                "order": order,
                "pct_4k_alone": bw_alone,
                "pct_4k_overlapped_min": bw_ovl,
                "hidden_full_min": h_full,
                "hidden_part_min": h_part,
                "meets_both": bool(bw_alone >= TARGET_PCT and h_full >= TARGET_HIDDEN),
            }
        )
    return out


def verdict_lines(res: dict) -> str:
    met = [v for v in res.get("verdicts", []) if v["meets_both"]]

    def score(v: dict) -> float:
        s = min(v["pct_4k_alone"] / TARGET_PCT, v["hidden_full_min"] / TARGET_HIDDEN)
        return -1.0 if math.isnan(s) else s

    best = sorted(res.get("verdicts", []), key=score, reverse=True)[:5]
    lines = [f"cells meeting both targets (4k >= 90% alone, >= 90% hidden vs full-GPU compute): {len(met)}"]
    for v in met + [b for b in best if b not in met]:
        lines.append(
            f"  {v['mode']:10s} k={v['k']:2d} {v['direction']} {v['order']:13s} "
            f"4k {_fmt(v['pct_4k_alone'])}% "
            f"(ovl {_fmt(v['pct_4k_overlapped_min'])}%) hidden_full>={_fmt(100 * v['hidden_full_min'], 0)}% "
            f"hidden_part>={_fmt(100 * v['hidden_part_min'], 0)}%{'  MEETS' if v['meets_both'] else ''}"
        )
    return "\n".join(lines)


def _synthetic_load(k: int, mode: str, prefix: int, direction: str, peak: float) -> float:
    """A made-up but shaped per-layer bandwidth (GB/s) for the dry run: rises with the prefix and
    the SM count, D2H a little faster."""
    sms = 132 if mode == "none" else max(k, 8)
    eff = 0.93 * (1 - math.exp(-prefix / 1500)) * (1 - math.exp(-sms / 6))
    return peak * eff * (1.02 if direction == "d2h" else 1.0)


def synthetic_result(plan: Plan, page_layer_bytes: int = 64 << 10, layers: int = 18) -> dict:
    """What a run's JSON holds, with synthetic numbers (``dry_run: True``), for the tables and
    the tests: the load model above; compute on k fewer SMs slows by 132 / (132 - k); the overlap
    leaves the longer of the two plus a tenth of the shorter."""
    peak = {"h2d": 55.0, "d2h": 55.0}
    res: dict = {"dry_run": True, "peak_gbps": peak, "curve": [], "overlap": []}
    for mode, k in [("none", 0)] + [("split", k) for k in plan.ks]:
        for d in plan.directions:
            for p in plan.prefixes:
                g = _synthetic_load(k, mode, p, d, peak[d])
                sms = 132 if mode == "none" else max(k, 8)
                res["curve"].append(
                    {"mode": mode, "k": k, "load_sms": sms, "direction": d, "prefix": p, "gbps": g}
                    | {"pct": pct(g, peak[d])}
                )
    for prefix in plan.overlap_prefixes:
        nbytes = prefix // 64 * page_layer_bytes
        for mode, k, d, order in plan.overlap_cells(prefix):
            g = _synthetic_load(k, "none" if mode == "none" else "split", prefix, d, peak[d])
            t_load = layers * nbytes / (g * 1e9)
            slow = 132 / (132 - max(k, 8)) if mode != "none" else 1.0
            for ratio in plan.ratios:
                t_full = ratio * t_load
                t_part = t_full * slow
                both = max(t_part, t_load) + 0.1 * min(t_part, t_load) * (1.0 if mode == "none" else 0.3)
                res["overlap"].append(
                    overlap_row(mode, k, d, order, prefix, ratio, t_load, t_full, t_part, both)
                )
                res["overlap"][-1] |= {
                    "pct_alone": pct(g, peak[d]),
                    "pct_overlapped": pct(g / (1.05 if mode == "none" else 1.01), peak[d]),
                }
    res["verdicts"] = verdicts(res)
    return res


def overlap_row(
    mode: str, k: int, d: str, order: str, prefix: int, ratio: float, t_load, t_full, t_part, both
) -> dict:
    return {
        "mode": mode,
        "k": k,
        "direction": d,
        "order": order,
        "prefix": prefix,
        "ratio": ratio,
        "load_s": t_load,
        "compute_full_s": t_full,
        "compute_part_s": t_part,
        "compute_over_load": t_full / t_load if t_load else float("nan"),
        "both_s": both,
        "hidden_full": hidden(t_load, t_full, both),
        "hidden_part": hidden(t_load, t_part, both),
    }
