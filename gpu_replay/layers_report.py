"""Tables of the ninth session's device calls (issue 13), from the committed JSON:
``gpu_replay/results/layers-2026-11-27-s9`` (:mod:`gpu_replay.scatter_persist`) and
``gpu_replay/results/ceiling-2026-11-27-s9`` (:mod:`gpu_replay.scatter_ceiling`).

    python -m gpu_replay.layers_report            # markdown tables, as in docs/gpu-replay.md

The run's copy peak follows the issue's rule: the best 1 GiB copy per direction, or any rate
measured in the same run that beats it (:func:`run_peak`); every percentage here is against it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent / "results"
LAYERS = ROOT / "layers-2026-11-27-s9"
CEILING = ROOT / "ceiling-2026-11-27-s9"


def _gpu(res: dict) -> str:
    name = res.get("env", {}).get("gpu", "")
    return "H200" if "H200" in name else "H100" if "H100" in name else name


def load(folder: Path, pattern: str) -> dict:
    return {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob(pattern))}


def run_peak(res: dict) -> dict:
    """Per direction, GB/s: the 1 GiB copy peak, raised by any rate the run measured above it
    (gated copy-engine or SM rates included: bytes the link moved in the time measured)."""
    peak = dict(res["peak_gbps"])
    for part in ("ce", "sm", "gated", "bulk"):
        for r in res.get(part, []):
            d = r["direction"]
            for key in ("gated_best_pct", "gated_pct", "issued_pct", "best_pct", "pct"):
                if key in r:
                    peak[d] = max(peak[d], r[key] / 100 * res["peak_gbps"][d])
            if "gbps_best" in r:
                peak[d] = max(peak[d], r["gbps_best"])
    return peak


def ceiling_table(runs: dict) -> str:
    """One row per call and direction, every percentage against :func:`run_peak`."""
    lines = [
        "| call | dir | 1 GiB peak GB/s | run peak | "
        "engines, random 32 KiB copies (2 GiB span), gated / issued | "
        "driver issue per copy | engines, the bulk transfer's own copies, gated | SM kernels, gated | "
        "bulk as issued: engines alone / best split |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, res in runs.items():
        pk, rp = res["peak_gbps"], run_peak(res)
        for d in ("h2d", "d2h"):
            scale = pk[d] / rp[d]
            ce = [
                r
                for r in res.get("ce", [])
                if r["size"] == 32 << 10
                and r["layout"] == "random"
                and r.get("region_bytes", 2 << 30) == 2 << 30
                and r["streams"] == 4
                and r["direction"] == d
            ]
            g = [r for r in res.get("gated", []) if r["direction"] == d and r["impl"].startswith("ce[")]
            sm = [r for r in res.get("sm", []) if r["direction"] == d]
            bulk = [r for r in res.get("bulk", []) if r["direction"] == d]
            eng = [r["pct"] for r in bulk if r["mover"].startswith("ce[")]
            spl = [r["pct"] for r in bulk if r["mover"].startswith("split")]
            row = [
                f"{name} ({_gpu(res)})",
                d.upper(),
                f"{pk[d]:.2f}",
                f"{rp[d]:.2f}",
                f"{ce[0]['gated_pct'] * scale:.1f} / {ce[0]['issued_pct'] * scale:.1f}" if ce else "-",
                f"{ce[0]['issue_s_per_copy'] * 1e6:.2f} us" if ce else "-",
                f"{100 * max(r['gbps'] for r in g) / rp[d]:.1f}" if g else "-",
                f"{max(r['gated_pct'] for r in sm) * scale:.1f}" if sm else "-",
                f"{max(eng) * scale:.1f} / {max(spl) * scale:.1f}" if eng and spl else "-",
            ]
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def attrs_table(runs: dict) -> str:
    """The cudaMemcpyBatchAsync attribute knobs (scatter_ceiling.batch_attrs): issue per copy of
    random 32 KiB copies and the bulk movers as issued, % of the run's peak."""
    lines = [
        "| call | knob | issue per 32 KiB copy H2D / D2H | engines alone (2 / 4 threads) H2D, D2H | "
        "splits (0.85 / 0.9 on 16 blocks) H2D, D2H |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, res in runs.items():
        rp = run_peak(res)
        scale = {d: res["peak_gbps"][d] / rp[d] for d in ("h2d", "d2h")}
        rows = res.get("attrs", [])
        for knob in sorted({r["knob"] for r in rows}):
            ce = {
                r["direction"]: r["issue_s_per_copy"] * 1e6
                for r in rows
                if r["knob"] == knob and r["part"] == "ce" and r["layout"] == "random"
            }
            bulk = {
                (r["mover"], r["direction"]): r["pct"]
                for r in rows
                if r["knob"] == knob and r["part"] == "bulk"
            }

            def cell(names, bulk=bulk, scale=scale):
                return ", ".join(
                    " / ".join(f"{bulk[n, d] * scale[d]:.1f}" for n in names if (n, d) in bulk)
                    for d in ("h2d", "d2h")
                )

            issue = " / ".join(f"{ce.get(d, float('nan')):.2f}" for d in ("h2d", "d2h"))
            engines = cell(("ce[s2mb128sorted]", "ce[s4mb128sorted]"))
            splits = cell(("split[0.85]", "split[0.9]sm16"))
            lines.append(f"| {name} ({_gpu(res)}) | {knob} | {issue} us | {engines} | {splits} |")
    return "\n".join(lines)


def curve_table(runs: dict, movers=None) -> str:
    lines = [
        "| call | mover | H2D 1k / 2k / 4k / 8k / 16k / 32k | D2H 1k / 2k / 4k / 8k / 16k / 32k |",
        "| --- | --- | --- | --- |",
    ]
    for name, res in runs.items():
        order = list(dict.fromkeys(r["mover"] for r in res.get("curve", [])))
        for m in order:
            if movers and m not in movers:
                continue
            cells = []
            for d in ("h2d", "d2h"):
                rows = sorted(
                    (r for r in res["curve"] if r["mover"] == m and r["direction"] == d),
                    key=lambda r: r["prefix"],
                )
                cells.append(" / ".join(f"{r['pct']:.1f}" for r in rows))
            lines.append(f"| {name} ({_gpu(res)}) | `{m}` | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def verdicts(res: dict) -> list[dict]:
    """Per (mover, direction, order): the 4k load alone (% of peak, the cell's own timing) and the
    hidden fraction at each ratio at 4k; meets_both when the first is >= 90 and every hidden >= 0.9."""
    out = []
    cells = res.get("cells", [])
    keys = list(dict.fromkeys((r["mover"], r["direction"], r["order"]) for r in cells))
    for m, d, o in keys:
        at4k = [r for r in cells if (r["mover"], r["direction"], r["order"], r["prefix"]) == (m, d, o, 4096)]
        if not at4k:
            continue
        bw = min(r["pct_alone"] for r in at4k)
        hid = [r["hidden"] for r in at4k]
        out.append(
            {
                "mover": m,
                "direction": d,
                "order": o,
                "pct_4k": bw,
                "hidden": hid,
                "ratios": [r["compute_over_load"] for r in at4k],
                "slowdown": [r.get("compute_span_overlapped_s", float("nan")) / r["compute_s"] for r in at4k],
                "meets_both": bw >= 90 and min(hid) >= 0.9,
            }
        )
    return out


def overlap_table(runs: dict, direction: str = "h2d", movers=None, orders=None) -> str:
    lines = [
        "| call | mover | order | 4k load alone | hidden at compute/load (4k) | compute slowed | "
        "hidden 32k | both targets |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, res in runs.items():
        cells = res.get("cells", [])
        for v in verdicts(res):
            if v["direction"] != direction or (movers and v["mover"] not in movers):
                continue
            if orders and v["order"] not in orders:
                continue
            at32 = [
                r["hidden"]
                for r in cells
                if (r["mover"], r["direction"], r["order"], r["prefix"])
                == (v["mover"], direction, v["order"], 32768)
            ]
            hid = " / ".join(f"{h:.2f} ({c:.2f}x)" for h, c in zip(v["hidden"], v["ratios"], strict=True))
            slow = " / ".join(f"{x:.2f}" for x in v["slowdown"])
            lines.append(
                f"| {name} ({_gpu(res)}) | `{v['mover']}` | {v['order']} | {v['pct_4k']:.1f} | "
                f"{hid} | {slow} | "
                + (" / ".join(f"{h:.2f}" for h in at32) if at32 else "-")
                + f" | {'yes' if v['meets_both'] else 'no'} |"
            )
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", default=str(LAYERS))
    ap.add_argument("--ceiling", default=str(CEILING))
    ap.add_argument(
        "--movers", default="", help="comma-separated: only these movers in the curve / overlap tables"
    )
    ap.add_argument("--orders", default="", help="comma-separated: only these orders in the overlap tables")
    a = ap.parse_args(argv)
    movers = [m for m in a.movers.split(",") if m] or None
    orders = [o for o in a.orders.split(",") if o] or None
    layers = load(Path(a.layers), "persist*.json")
    ceilings = load(Path(a.ceiling), "ceiling*.json")
    print("## Bulk ceilings\n")
    print(ceiling_table(ceilings))
    print("\n## Batch attribute knobs\n")
    print(attrs_table(load(Path(a.ceiling), "attrs*.json")))
    print("\n## Per-layer curves\n")
    print(curve_table(layers, movers))
    print("\n## Overlap, H2D\n")
    print(overlap_table(layers, "h2d", movers, orders))
    print("\n## Overlap, D2H\n")
    print(overlap_table(layers, "d2h", movers, orders))
    met = [(n, v["mover"], v["order"]) for n, r in layers.items() for v in verdicts(r) if v["meets_both"]]
    print(f"\ncells meeting both targets (4k alone >= 90%, hidden >= 0.90 at every ratio): {met or 'none'}")


if __name__ == "__main__":
    main()
