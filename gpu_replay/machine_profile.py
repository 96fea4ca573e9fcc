"""One machine's cost profile from one device call (issue 13, eighth session): the step and the
write-back coefficients both measured on the same H100, their held-out errors recomputed here
from the committed results, never copied by hand.

Inputs (``--results``, the folder of ``benchmarks/device_step_calib.sh``):

- ``steps.json`` (every shape x repeat) and ``step_calib_report.json`` (the pre-registered choice
  of :mod:`gpu_replay.step_calib`): the chosen form's coefficients go into the profile; their
  held-out and fit errors are recomputed from ``steps.json`` (median of the repeats per shape);
- ``calls-*-cuda-iso.csv.gz`` (``benchmarks/gpu_transfer_check.py``'s replays of the calibration
  op logs): the write-back (D2H) coefficients are the simulator's form (``per_call``, L2, as
  :func:`gpu_replay.transfer_profile.hicache_section` takes them), fitted on the fit logs only;
  the form chosen by leave-one-log-out CV (which the simulator cannot price) is reported beside it;
- H2D per layer: that call did not measure the per-layer loads, so the line through an earlier
  machine's curve (``--per-layer``, :func:`gpu_replay.transfer_profile.per_layer_line`) is kept;
- all-reduce: kept from ``--allreduce-from`` (NCCL on H200s; not re-measured).

Writes ``<name>.json`` (gpt-oss-120b TP 2) and ``transferred-mimo-v2-flash-tp4-<date>.json`` (its
kernel coefficients with the 4-GPU all-reduce of ``--mimo-allreduce-from``) under
gpu_replay/profiles/; ``--check`` rebuilds them and fails if the committed files differ.

    python -m gpu_replay.machine_profile --results gpu_replay/results/steps-2026-11-27-s6 [--check]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gpu_replay import transfer_model as tm
from gpu_replay.calibrate import SPLIT
from gpu_replay.step_calib import load_measurements, score
from gpu_replay.step_fit import base_model
from gpu_replay.transfer_profile import per_layer_line
from simulator.cost.profile import validate_profile
from simulator.gpus import get_gpu

__all__ = ["build", "step_scores", "transfer_scores"]

ROOT = Path(__file__).resolve().parents[1]
PROFILES = ROOT / "gpu_replay" / "profiles"
PAGE_BYTES = 18 * 64 * 1024  # one page of gpt-oss-120b at TP 2, all 36 layers' K + V of one pool
DEFAULTS = {
    "per_layer": "gpu_replay/results/transfer-2026-11-26-s4/transfer_calib-h100m1.json",
    "allreduce_from": "gpu_replay/profiles/h100-gpt-oss-120b-tp2-fitted.json",
    "mimo_allreduce_from": "gpu_replay/profiles/transferred-mimo-v2-flash-tp4.json",
}
AR_KEYS = ("allreduce_bus_gbps", "allreduce_latency_s")


def _g4(x: float) -> float:
    return float(f"{x:.4g}")


def step_scores(results: Path) -> dict:
    """The chosen step form, its coefficients, the CV table of the report, and the fit and
    held-out median |% error| recomputed from ``steps.json`` with those coefficients."""
    report = json.loads((results / "step_calib_report.json").read_text())
    data = json.loads((results / "steps.json").read_text())
    shapes, stats = load_measurements(data)
    coeffs = report["results"][report["chosen"]]["coefficients"]
    base = base_model(report["model"], report["gpu"], report["tp"])
    held, fit = score(base, coeffs, shapes["heldout"]), score(base, coeffs, shapes["fit"])
    return {
        "chosen": report["chosen"],
        "coefficients": coeffs,
        "cv_pct": {n: round(v["median_abs_pct"], 2) for n, v in report["cv"].items()},
        "heldout_pct": {k: round(held[k], 2) for k in ("all", "prefill", "decode")},
        "heldout_shapes": len(held["rows"]),
        "fit_pct": round(fit["all"], 2),
        "fit_shapes": len(fit["rows"]),
        "min_repeats": min(s["repeats"] for s in stats),
        "environment": data["environment"],
        "command": data["command"],
        "date": data["date"],
    }


def transfer_scores(table: Path) -> dict:
    """The simulator's per-call form (L2) and the CV-chosen form, each fitted on the fit logs of
    ``table`` and scored per step on its held-out logs (against the median of the repeats)."""
    split = json.loads(SPLIT.read_text())
    calls = tm.load_calls(table)
    cv = tm.cross_validate(calls, [Path(p).stem for p in split["oplogs"]["fit"]])
    out = {"table": table.name, "repeats": int(calls.secs.shape[1])}
    for label, form, obj in (("simulator", "per_call", "l2"), ("chosen", cv[0]["form"], cv[0]["objective"])):
        r = tm.evaluate(calls, split, form, obj)
        out[label] = {
            "form": form,
            "objective": obj,
            "named": tm.named(form, r["coefficients_s"], PAGE_BYTES),
            "heldout_pct": round(r["heldout"]["median_abs_pct"], 2),
            "fit_pct": round(r["fit"]["median_abs_pct"], 2),
            "noise_pct": round(r["heldout"]["repeat_noise_pct"], 2),
            "per_log_pct": {k: round(v["median_abs_pct"], 2) for k, v in r["heldout"]["per_log"].items()},
        }
    return out


def _hicache(tr: dict, h2d: dict, gpu: str) -> dict:
    d2h = tr["simulator"]["named"]
    peak = get_gpu(gpu)
    return {
        "kernel_efficiency_d2h": round(d2h["gbps"] / peak.host_copy_gbps("d2h"), 4),
        "kernel_call_overhead_d2h_s": _g4(d2h["per_call_s"]),
        "kernel_efficiency_h2d": round(h2d["gbps"] / peak.host_copy_gbps("h2d"), 4),
        "kernel_call_overhead_h2d_s": _g4(h2d["call_overhead_s"]),
    }


def _notes(st: dict, tr: dict, h2d: dict, ar_source: str) -> str:
    h, s, c = st["heldout_pct"], tr["simulator"], tr["chosen"]
    cv = ", ".join(f"{n} {v:.2f}%" for n, v in st["cv_pct"].items())
    return (
        f"Steps: form '{st['chosen']}' chosen by the pre-registered rule (gpu_replay/calibration/"
        f"step_calib.json; leave-one-shape-out CV median |error| on {st['fit_shapes']} fit shapes: {cv}); "
        f"each shape the median of >= {st['min_repeats']} interleaved repeats on this machine. Held-out "
        f"step shapes ({st['heldout_shapes']}): median |error| {h['all']:.2f}% (prefill {h['prefill']:.2f}%, "
        f"decode {h['decode']:.2f}%); fit shapes {st['fit_pct']:.2f}%. Fitted on bf16-expert MoE "
        "stand-in times (expert bytes 2/param); the profile keeps the preset's MXFP4 bytes. Decode "
        "from CUDA graphs, prefill eager; norms, rotary and sampling not measured; step and "
        "per-request overheads are defaults. Write-back (D2H, hicache_transfer): the simulator's "
        f"per-call form ({s['form']}/{s['objective']}) fitted on the fit op logs of the same machine's "
        f"replays ({tr['table']}, {tr['repeats']} repeats, cuda row kernel, calls isolated): held-out "
        f"step median |error| {s['heldout_pct']:.2f}% (fit {s['fit_pct']:.2f}%, repeat noise "
        f"{s['noise_pct']:.2f}%); the CV-chosen form {c['form']}/{c['objective']} (first call of a "
        f"step dearer than the next, which the simulator does not price) scores {c['heldout_pct']:.2f}%. "
        f"H2D per layer not measured in this call: {h2d['call_overhead_s'] * 1e6:.2f} us + bytes / "
        f"{h2d['gbps']:.2f} GB/s from the earlier machine's per-layer curve. All-reduce: {ar_source}."
    )


def build(results: Path, name: str, per_layer: Path, allreduce_from: Path, mimo_from: Path) -> dict:
    """``{name: profile, mimo name: profile}``, each validated."""
    st = step_scores(results)
    tr = transfer_scores(next(results.glob("calls-*-cuda-iso.csv.gz")))
    h2d = per_layer_line(json.loads(per_layer.read_text()), "h2d")
    old = json.loads(allreduce_from.read_text())
    env, gpu = st["environment"], "H200" if "H200" in st["environment"]["name"] else "H100"
    rel = results.relative_to(ROOT) if results.is_absolute() and results.is_relative_to(ROOT) else results
    tool = (
        f"bash benchmarks/device_step_calib.sh ({st['command']}; python -m gpu_replay.step_calib; "
        "python benchmarks/gpu_transfer_check.py); per-layer H2D: python benchmarks/gpu_transfer_calib.py; "
        "all-reduce: torchrun --nproc_per_node N benchmarks/gpu_allreduce.py (N = 2, 4); "
        f"python -m gpu_replay.machine_profile --results {rel} --name {name}"
    )
    ar_src = old["provenance"]["source"].split("all-reduce: ")[-1]
    source = (
        f"steps and D2H write-back: {env['name']} (driver {env['driver']}), torch {env['torch']}, "
        f"CUDA {env['cuda']}, host {env['host']}, one call; H2D per layer: {per_layer.name}; "
        f"all-reduce: kept from {allreduce_from.name} ({ar_src})"
    )
    prov = {"kind": "fitted", "gpu": gpu, "model": "gpt-oss-120b", "tp": 2, "tool": tool}
    prov |= {"date": st["date"], "source": source}
    prov["notes"] = _notes(st, tr, h2d, f"{allreduce_from.name}, 2 GPUs")
    coeffs = {**st["coefficients"], **{k: old["coefficients"][k] for k in AR_KEYS}}
    prof = {"version": 1, "name": name, "description": "Fitted on one H100 in one device call (issue 13)."}
    prof |= {"provenance": prov, "coefficients": coeffs, "hicache_transfer": _hicache(tr, h2d, gpu)}
    mimo_old = json.loads(mimo_from.read_text())
    mimo_name = f"transferred-mimo-v2-flash-tp4-{st['date']}"
    mimo = json.loads(json.dumps(prof)) | {"name": mimo_name}
    del mimo["hicache_transfer"]  # MiMo's pools are not gpt-oss's: no transfer fit carried over
    mimo["description"] = f"TRANSFERRED to MiMo-V2-Flash TP 4 from {name} (issue 13)."
    mimo["coefficients"] |= {k: mimo_old["coefficients"][k] for k in AR_KEYS}
    mimo["provenance"] |= {"model": "MiMo-V2-Flash", "tp": 4}
    mimo["provenance"]["notes"] = (
        f"TRANSFERRED, not measured for this model: the step coefficients of {name} (gpt-oss-120b TP 2 "
        "on H100; MiMo's preset lacks hidden size and vocabulary for the microbenchmarks) with the "
        f"4-GPU all-reduce of {mimo_from.name}. " + _notes(st, tr, h2d, f"{mimo_from.name}, 4 GPUs")
    )
    for p in (prof, mimo):
        validate_profile(p, origin=p["name"])
    return {p["name"]: p for p in (prof, mimo)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, required=True)
    ap.add_argument("--name", default=None, help="default: h100-gpt-oss-120b-tp2-fitted-<date>")
    for key, default in DEFAULTS.items():
        ap.add_argument(f"--{key.replace('_', '-')}", type=Path, default=ROOT / default)
    ap.add_argument("--check", action="store_true", help="fail if the committed profiles differ")
    a = ap.parse_args()
    date = json.loads((a.results / "steps.json").read_text())["date"]
    profiles = build(
        a.results,
        a.name or f"h100-gpt-oss-120b-tp2-fitted-{date}",
        a.per_layer,
        a.allreduce_from,
        a.mimo_allreduce_from,
    )
    stale = []
    for name, prof in profiles.items():
        path, text = PROFILES / f"{name}.json", json.dumps(prof, indent=2) + "\n"
        if a.check:
            stale += [] if path.exists() and json.loads(path.read_text()) == prof else [path.name]
        else:
            path.write_text(text)
        print(path.relative_to(ROOT), "checked" if a.check else "written")
    print(profiles[next(iter(profiles))]["provenance"]["notes"])
    if stale:
        sys.exit(f"stale: {', '.join(stale)} (rerun without --check)")


if __name__ == "__main__":
    main()
