"""One machine's cost profile from one device call (issue 13): the step and the write-back
coefficients both measured on the same GPU (H100 or H200), their held-out errors recomputed here
from the committed results, never copied by hand.

Inputs (``--results``, the folder of ``benchmarks/device_step_calib.sh``):

- ``steps.json`` (every shape x repeat) and ``step_calib_report.json`` (the pre-registered choice
  of :mod:`gpu_replay.step_calib`): the chosen form's coefficients go into the profile; their
  held-out and fit errors are recomputed from ``steps.json`` (median of the repeats per shape);
- ``calls-*-cuda-iso.csv.gz`` (``benchmarks/gpu_transfer_check.py``'s replays of the calibration
  op logs): the write-back (D2H) coefficients are the form kvplan prices (``per_call`` or
  ``first_next``: a step's first call dearer than the next, ``kernel_first_call_extra_d2h_s``)
  that leave-one-log-out CV on the fit logs picks, fitted on the fit logs only; the held-out error
  the profile reports is kvplan's own :class:`~simulator.cost.hicache_transfer.HostTransferModel`
  built from the written section pricing the held-out steps' calls (:func:`priced_pct`);
- H2D per layer: that call did not measure the per-layer loads, so the line through an earlier
  machine's curve (``--per-layer``, :func:`gpu_replay.transfer_profile.per_layer_line`) is kept;
- all-reduce: kept from ``--allreduce-from`` (NCCL on H200s; not re-measured).

Writes ``<name>.json`` (gpt-oss-120b TP 2) and, unless ``--no-mimo``,
``transferred-mimo-v2-flash-tp4-<date>.json`` (its step coefficients with the 4-GPU all-reduce of
``--mimo-allreduce-from``) under gpu_replay/profiles/; ``--check`` rebuilds them and fails if the
committed files differ.

    python -m gpu_replay.machine_profile --results gpu_replay/results/steps-2026-11-27-s6 [--check]
    python -m gpu_replay.machine_profile --results gpu_replay/results/steps-2026-11-27-s7-h200 --no-mimo
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from gpu_replay import transfer_model as tm
from gpu_replay.calibrate import SPLIT
from gpu_replay.step_calib import load_measurements, score
from gpu_replay.step_fit import base_model
from gpu_replay.transfer_profile import per_layer_line
from simulator.cost.hicache_transfer import HostTransferModel, transfer_geometry
from simulator.cost.profile import validate_profile
from simulator.gpus import get_gpu
from simulator.hicache_args import HiCacheArgs, resolve_hicache_args
from simulator.models import load_model

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


KVPLAN_FORMS = ("per_call", "first_next")  # the forms HostTransferModel prices (hicache_transfer.py)


def transfer_scores(table: Path) -> dict:
    """The write-back forms, each fitted on the fit logs of ``table``: ``kvplan`` the best by
    leave-one-log-out CV (fit logs only) of the forms kvplan prices, ``per_call`` every call
    alike (kvplan's pricing before the first-call term), ``chosen`` the best of every form."""
    split = json.loads(SPLIT.read_text())
    calls = tm.load_calls(table)
    cv = tm.cross_validate(calls, [Path(p).stem for p in split["oplogs"]["fit"]])
    priceable = [r for r in cv if r["form"] in KVPLAN_FORMS]
    out: dict = {"table": table.name, "repeats": int(calls.secs.shape[1]), "calls": calls}
    out["kvplan_cv_pct"] = {
        f"{r['form']}/{r['objective']}": round(r["cv_median_abs_pct"], 2) for r in priceable
    }
    picks = (
        ("kvplan", priceable[0]),
        ("per_call", {"form": "per_call", "objective": "l2"}),
        ("chosen", cv[0]),
    )
    for label, pick in picks:
        form, obj = pick["form"], pick["objective"]
        r = tm.evaluate(calls, split, form, obj)
        out[label] = {
            "form": form,
            "objective": obj,
            "named": tm.named(form, r["coefficients_s"], PAGE_BYTES),
            "heldout_pct": round(r["heldout"]["median_abs_pct"], 2),
            "noise_pct": round(r["heldout"]["repeat_noise_pct"], 2),
        }
    return out


def _hicache(tr: dict, h2d: dict, gpu: str) -> dict:
    """The profile's ``hicache_transfer``: D2H from the kvplan form (its first call's extra over
    the next ones, when it has one), H2D per layer from ``h2d``."""
    d2h = tr["kvplan"]["named"]
    peak = get_gpu(gpu)
    per_call = d2h.get("next_call_s", d2h.get("per_call_s"))
    out = {
        "kernel_efficiency_d2h": round(d2h["gbps"] / peak.host_copy_gbps("d2h"), 4),
        "kernel_call_overhead_d2h_s": _g4(per_call),
        "kernel_efficiency_h2d": round(h2d["gbps"] / peak.host_copy_gbps("h2d"), 4),
        "kernel_call_overhead_h2d_s": _g4(h2d["call_overhead_s"]),
    }
    if "first_call_s" in d2h:
        out["kernel_first_call_extra_d2h_s"] = _g4(d2h["first_call_s"] - per_call)
    return out


def priced_pct(calls: tm.CallTable, section: dict, gpu: str) -> float:
    """Median |% error| per step of kvplan's own pricing of the replayed write-back calls against
    the median of the repeats: :class:`HostTransferModel` built from ``section`` as ``kvplan run
    --profile`` builds it (kernel io-backend, layer_first, page 64, gpt-oss-120b TP 2); a step's
    first call is priced as a submission (``backup_time``: the first-call extra included), each
    call behind it as one more call of the pool (``pool_time``)."""
    hc = resolve_hicache_args(
        HiCacheArgs(hicache_ratio=2.0, hicache_io_backend="kernel", hicache_mem_layout="layer_first")
    )
    m = HostTransferModel.from_resolved(get_gpu(gpu), hc, 64, {"hicache_transfer": section})
    geo = transfer_geometry(load_model("gpt-oss-120b"), 2, 2)
    pred: dict[tuple[str, int], float] = {}
    meas: dict[tuple[str, int], np.ndarray] = {}
    for log, step, call, pages, secs in zip(
        calls.log, calls.step, calls.call, calls.pages, calls.secs, strict=True
    ):
        key, tokens = (str(log), int(step)), int(pages) * 64
        first = call == 0
        t = m.backup_time(geo, tokens) if first else m.pool_time("d2h", tokens, geo.full, per_layer=False)
        pred[key] = pred.get(key, 0.0) + t
        meas[key] = meas.get(key, 0.0) + secs
    err = [abs(pred[k] / float(np.median(meas[k])) - 1.0) for k in pred]
    return float(np.median(err) * 100.0)


def _d2h_words(named: dict) -> str:
    us = {k: v * 1e6 for k, v in named.items() if k.endswith("_s") and k != "per_page_s"}
    if "first_call_s" in us:
        calls = (
            f"{us['first_call_s']:.1f} us for a step's first call, {us['next_call_s']:.1f} us for each next"
        )
    else:
        calls = f"{us['per_call_s']:.1f} us per call"
    return f"{calls}, {named['gbps']:.2f} GB/s"


def _notes(st: dict, tr: dict, pr: dict, h2d: dict, per_layer: str, ar_source: str) -> str:
    """The profile's notes: every number recomputed here from the committed results."""
    h, k, c = st["heldout_pct"], tr["kvplan"], tr["chosen"]
    cv = ", ".join(f"{n} {v:.2f}%" for n, v in st["cv_pct"].items())
    kcv = ", ".join(f"{n} {v:.2f}%" for n, v in tr["kvplan_cv_pct"].items())
    best = "this form is also the best by CV of every form (first_next_single included)"
    if (c["form"], c["objective"]) != (k["form"], k["objective"]):
        term = " (its per-single-page-call term kvplan does not price)" * (c["form"] == "first_next_single")
        best = f"the best form by CV of every form, {c['form']}/{c['objective']}{term}, "
        best += f"scores {c['heldout_pct']:.2f}%"
    return (
        f"Steps: form '{st['chosen']}' chosen by the pre-registered rule (gpu_replay/calibration/"
        f"step_calib.json; leave-one-shape-out CV median |error| on {st['fit_shapes']} fit shapes: {cv}); "
        f"each shape the median of >= {st['min_repeats']} interleaved repeats on this machine. Held-out "
        f"step shapes ({st['heldout_shapes']}): median |error| {h['all']:.2f}% (prefill {h['prefill']:.2f}%, "
        f"decode {h['decode']:.2f}%); fit shapes {st['fit_pct']:.2f}%. Fitted on bf16-expert MoE "
        "stand-in times (expert bytes 2/param); the profile keeps the preset's MXFP4 bytes. Decode "
        "from CUDA graphs, prefill eager; norms, rotary and sampling not measured; step and "
        "per-request overheads are defaults. Write-back (D2H, hicache_transfer): form "
        f"{k['form']}/{k['objective']}, the best by leave-one-log-out CV on the fit op logs of the forms "
        f"kvplan prices ({kcv}), fitted on the fit op logs of the same machine's replays ({tr['table']}, "
        f"{tr['repeats']} repeats, cuda row kernel, calls isolated): {_d2h_words(k['named'])}. Priced by "
        "kvplan's HostTransferModel with this section, held-out step median |error| "
        f"{pr['kvplan']:.2f}% (fit logs {pr['kvplan_fit']:.2f}%, repeat noise {k['noise_pct']:.2f}%); "
        f"every call alike (per_call/l2, kvplan's pricing before the first-call term) {pr['per_call']:.2f}%; "
        f"{best}. "
        f"H2D per layer not measured in this call: {h2d['call_overhead_s'] * 1e6:.2f} us + bytes / "
        f"{h2d['gbps']:.2f} GB/s from {per_layer}. All-reduce: {ar_source}."
    )


def _priced(tr: dict, h2d: dict, gpu: str) -> dict:
    """kvplan's pricing (:func:`priced_pct`) of the held-out (and fit) logs with the profile's
    section, and with the every-call-alike section fitted on the same logs."""
    split = json.loads(SPLIT.read_text())
    logs = {part: [Path(p).stem for p in split["oplogs"][part]] for part in ("fit", "heldout")}
    held, fit = (tr["calls"].select(logs[p]) for p in ("heldout", "fit"))
    section, flat = _hicache(tr, h2d, gpu), _hicache(tr | {"kvplan": tr["per_call"]}, h2d, gpu)
    return {
        "kvplan": round(priced_pct(held, section, gpu), 2),
        "kvplan_fit": round(priced_pct(fit, section, gpu), 2),
        "per_call": round(priced_pct(held, flat, gpu), 2),
    }


def build(
    results: Path, name: str, per_layer: Path, allreduce_from: Path, mimo_from: Path | None = None
) -> dict:
    """``{name: profile}`` (and the MiMo transfer of its steps with ``mimo_from``), validated."""
    st = step_scores(results)
    tr = transfer_scores(next(results.glob("calls-*-cuda-iso.csv.gz")))
    h2d = per_layer_line(json.loads(per_layer.read_text()), "h2d")
    old = json.loads(allreduce_from.read_text())
    env, gpu = st["environment"], machine_gpu(st["environment"])
    pr = _priced(tr, h2d, gpu)
    rel = results.relative_to(ROOT) if results.is_absolute() and results.is_relative_to(ROOT) else results
    tool = (
        f"bash benchmarks/device_step_calib.sh ({st['command']}; python -m gpu_replay.step_calib; "
        "python benchmarks/gpu_transfer_check.py); per-layer H2D: python benchmarks/gpu_transfer_calib.py; "
        "all-reduce: torchrun --nproc_per_node N benchmarks/gpu_allreduce.py (N = 2, 4); "
        f"python -m gpu_replay.machine_profile --results {rel} --name {name}"
        + ("" if mimo_from else " --no-mimo")
    )
    ar_src = old["provenance"]["source"].split("all-reduce: ")[-1]
    layer_src = f"{per_layer.name} ({json.loads(per_layer.read_text())['environment']['name']})"
    source = (
        f"steps and D2H write-back: {env['name']} (driver {env['driver']}), torch {env['torch']}, "
        f"CUDA {env['cuda']}, host {env['host']}, one call; H2D per layer: {layer_src}; "
        f"all-reduce: kept from {allreduce_from.name} ({ar_src})"
    )
    prov = {"kind": "fitted", "gpu": gpu, "model": "gpt-oss-120b", "tp": 2, "tool": tool}
    prov |= {"date": st["date"], "source": source}
    prov["notes"] = _notes(st, tr, pr, h2d, layer_src, f"{allreduce_from.name}, 2 GPUs ({ar_src})")
    coeffs = {**st["coefficients"], **{k: old["coefficients"][k] for k in AR_KEYS}}
    prof = {"version": 1, "name": name, "description": f"Fitted on one {gpu} in one device call (issue 13)."}
    prof |= {"provenance": prov, "coefficients": coeffs, "hicache_transfer": _hicache(tr, h2d, gpu)}
    out = [prof]
    if mimo_from is not None:
        out.append(_mimo(prof, st, tr, pr, h2d, layer_src, mimo_from))
    for p in out:
        validate_profile(p, origin=p["name"])
    return {p["name"]: p for p in out}


def machine_gpu(env: dict) -> str:
    """The GPU preset of the machine a results folder was measured on."""
    return "H200" if "H200" in env["name"] else "H100"


def _mimo(prof: dict, st: dict, tr: dict, pr: dict, h2d: dict, layer_src: str, mimo_from: Path) -> dict:
    """MiMo-V2-Flash TP 4 with ``prof``'s step coefficients and ``mimo_from``'s 4-GPU all-reduce."""
    name = prof["name"]
    mimo_old = json.loads(mimo_from.read_text())
    mimo = json.loads(json.dumps(prof)) | {"name": f"transferred-mimo-v2-flash-tp4-{st['date']}"}
    del mimo["hicache_transfer"]  # MiMo's pools are not gpt-oss's: no transfer fit carried over
    mimo["description"] = f"TRANSFERRED to MiMo-V2-Flash TP 4 from {name} (issue 13)."
    mimo["coefficients"] |= {k: mimo_old["coefficients"][k] for k in AR_KEYS}
    mimo["provenance"] |= {"model": "MiMo-V2-Flash", "tp": 4}
    ar = mimo_old["provenance"]["source"].split("all-reduce: ")[-1]
    mimo["provenance"]["notes"] = (
        f"TRANSFERRED, not measured for this model: the step coefficients of {name} (gpt-oss-120b TP 2 "
        f"on {prof['provenance']['gpu']}; MiMo's preset lacks hidden size and vocabulary for the "
        f"microbenchmarks) with the 4-GPU all-reduce of {mimo_from.name}; the source's hicache_transfer "
        "section is not carried over (MiMo's pools are not gpt-oss's). The source's notes: "
        + _notes(st, tr, pr, h2d, layer_src, f"{mimo_from.name}, 4 GPUs ({ar})")
    )
    return mimo


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, required=True)
    ap.add_argument("--name", default=None, help="default: <gpu>-gpt-oss-120b-tp2-fitted-<date>")
    for key, default in DEFAULTS.items():
        ap.add_argument(f"--{key.replace('_', '-')}", type=Path, default=ROOT / default)
    ap.add_argument("--no-mimo", action="store_true", help="no transferred MiMo-V2-Flash profile")
    ap.add_argument("--check", action="store_true", help="fail if the committed profiles differ")
    a = ap.parse_args()
    steps = json.loads((a.results / "steps.json").read_text())
    gpu = machine_gpu(steps["environment"]).lower()
    profiles = build(
        a.results,
        a.name or f"{gpu}-gpt-oss-120b-tp2-fitted-{steps['date']}",
        a.per_layer,
        a.allreduce_from,
        None if a.no_mimo else a.mimo_allreduce_from,
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
