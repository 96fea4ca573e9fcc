"""Write the fitted transfer model into the profiles (issue 13, items 5 and the simulator's use).

Two outputs under gpu_replay/profiles/:

- ``<gpu>-<model>-tp<N>-transfer-model.json`` (own schema, ``format`` "kvplan-transfer-profile",
  version 2): per implementation, the chosen form's coefficients (first/next call overhead, seconds
  per page of all layers, GB/s), the simulator form's, and their held-out errors, from
  :mod:`gpu_replay.transfer_model`'s report;
- the cost profile's ``hicache_transfer`` section (the keys of
  :class:`simulator.cost.hicache_transfer.TransferCoefficients`, which
  ``HostTransferModel.from_resolved`` reads): D2H (write-back, one all-layer call per pool) from the
  simulator form fitted on the ``cuda`` kernel's replays; H2D (load-back, one call per layer) from
  a line through the kernel's per-layer loads of 1k-32k prefixes
  (``benchmarks/gpu_transfer_calib.py``, 18 layers back to back, random pages).

    python -m gpu_replay.transfer_profile --results gpu_replay/results/transfer-2026-11-26-s4 \\
        --calls calls-h100m3-cuda-iso --per-layer transfer_calib-h100m1.json \\
        --profile gpu_replay/profiles/h100-gpt-oss-120b-tp2-fitted.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from simulator.cost.profile import validate_profile
from simulator.gpus import get_gpu

__all__ = ["hicache_section", "per_layer_line"]


def per_layer_line(calib: dict, direction: str, impl: str = "cuda[one_stream]") -> dict:
    """``seconds per layer = a + bytes / bw`` through the per-layer loads (relative least squares),
    with each prefix's error."""
    rows = [
        r
        for r in calib.get("runs", [])
        if r["kind"] == "per_layer_curve" and r["impl"] == impl and r["direction"] == direction
    ]
    if len(rows) < 2:
        raise ValueError(f"no per-layer curve of {impl} {direction} in the calibration file")
    b = np.array([r["bytes"] for r in rows], dtype=float)
    t = np.array([r["median_s"] for r in rows])
    (a, inv_bw), *_ = np.linalg.lstsq(
        np.stack([np.ones_like(b), b], axis=1) / t[:, None], np.ones_like(t), rcond=None
    )
    return {
        "call_overhead_s": float(a),
        "gbps": float(1.0 / inv_bw / 1e9),
        "prefix_error_pct": {
            str(r["prefix"]): float((a + inv_bw * x) / y * 100 - 100)
            for r, x, y in zip(rows, b, t, strict=True)
        },
    }


def hicache_section(fit_report: dict, calls: str, calib: dict, peak_gbps: float) -> dict:
    """The ``hicache_transfer`` keys: D2H from the replays' simulator-form fit, H2D per layer from
    the per-layer curve (efficiencies against ``peak_gbps``, the GPU preset's copy peak)."""
    d2h = fit_report[calls]["simulator_form"]["named"]
    h2d = per_layer_line(calib, "h2d")
    return {
        "kernel_efficiency_d2h": round(d2h["gbps"] / peak_gbps, 4),
        "kernel_call_overhead_d2h_s": float(f"{d2h['per_call_s']:.4g}"),
        "kernel_efficiency_h2d": round(h2d["gbps"] / peak_gbps, 4),
        "kernel_call_overhead_h2d_s": float(f"{h2d['call_overhead_s']:.4g}"),
    }


def transfer_model_profile(fit_report: dict, env: dict, provenance: dict) -> dict:
    """The version-2 transfer profile: every calls table's chosen and simulator-form fits."""
    models = {}
    for name, r in fit_report.items():
        c, s = r["chosen"], r["simulator_form"]
        models[name.removeprefix("calls-")] = {
            "form": c["form"],
            "objective": c["objective"],
            "coefficients": c["named"],
            "repeats": r["repeats"],
            "heldout_step_median_abs_pct": round(c["heldout"]["median_abs_pct"], 2),
            "fit_step_median_abs_pct": round(c["fit"]["median_abs_pct"], 2),
            "heldout_per_log": c["heldout"]["per_log"],
            "heldout_on_other_machines_pct": {
                k.removeprefix("calls-"): round(v, 2)
                for k, v in r["heldout_median_abs_pct_on_other_machines"].items()
            },
            "simulator_form": {
                "coefficients": s["named"],
                "heldout_step_median_abs_pct": round(s["heldout"]["median_abs_pct"], 2),
            },
        }
    return {
        "format": "kvplan-transfer-profile",
        "version": 2,
        "provenance": provenance | {"environment": env},
        "models": models,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, required=True)
    ap.add_argument("--calls", required=True, help="the calls table the cost profile's D2H keys come from")
    ap.add_argument("--per-layer", required=True, help="gpu_transfer_calib.py JSON with the per-layer curve")
    ap.add_argument("--profile", type=Path, required=True, help="cost profile to update (hicache_transfer)")
    ap.add_argument("--gpu", default="H100")
    args = ap.parse_args()
    fit_report = json.loads((args.results / "transfer_fit.json").read_text())
    calib = json.loads((args.results / args.per_layer).read_text())
    peak = get_gpu(args.gpu).host_copy_gbps("d2h")
    section = hicache_section(fit_report, args.calls, calib, peak)
    profile = json.loads(args.profile.read_text())
    profile["hicache_transfer"] = section
    prov = profile["provenance"]
    tool = (
        f"python -m gpu_replay.transfer_profile --results {args.results} --calls {args.calls} "
        f"--per-layer {args.per_layer}"
    )
    if "transfer_profile" not in prov.get("tool", ""):
        prov["tool"] = prov.get("tool", "") + "; " + tool
    validate_profile(profile, origin=str(args.profile))
    args.profile.write_text(json.dumps(profile, indent=2) + "\n")
    h2d = per_layer_line(calib, "h2d")
    provenance = {
        "kind": "fitted",
        "gpu": args.gpu,
        "model": prov.get("model"),
        "tp": prov.get("tp"),
        "tool": "python benchmarks/gpu_transfer_calib.py --parts grid,runs,runs2,replay [--isolate]; "
        f"python -m gpu_replay.transfer_model --results {args.results}; " + tool,
        "date": prov.get("date"),
        "notes": "per step of write-back (D2H, all layers of one rank's pool, one call per pool per evicted "
        "leaf): first_next: first_call_s + (calls - 1) x next_call_s + pages x per_page_s "
        "(+ single_page_call_s per one-page call); per_call (the simulator's form): calls x per_call_s + "
        "pages x per_page_s. Held-out errors are per step against the median of the repeats. H2D per "
        f"layer (cuda kernel, 1k-32k prefixes): {h2d['call_overhead_s'] * 1e6:.2f} us + bytes / "
        f"{h2d['gbps']:.2f} GB/s.",
    }
    env = json.loads(next(args.results.glob("replay-summary-*.json")).read_text())["environment"]
    tprof = transfer_model_profile(fit_report, env, provenance)
    name = f"{args.gpu.lower()}-{str(prov.get('model')).lower()}-tp{prov.get('tp')}-transfer-model.json"
    (args.profile.parent / name).write_text(json.dumps(tprof, indent=2) + "\n")
    print(json.dumps(section, indent=1))


if __name__ == "__main__":
    main()
