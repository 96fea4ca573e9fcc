"""Fit and score the step profile from one machine's repeated step measurements (issue 13,
seventh session; numpy only, so it runs on the CPU or on the device host after the measurement).

Input: the JSON of ``benchmarks/gpu_step_calib.py``: one row per measured shape and repeat. A
shape's time is the median of its repeats. The shapes and the rule were fixed and committed before
the device run (``gpu_replay/calibration/step_calib.json``; docs/gpu-replay.md, "Seventh
session"):

- fit shapes: split.json's fit shapes plus the extra fit-only prefills; held-out shapes:
  split.json's held-out shapes, which **never** enter a fit or a choice. A held-out shape found
  among the fit shapes (by label or by size) raises :class:`HeldOutLeak` before anything is fitted;
- every form of ``step_calib.json``'s ``forms`` (from :data:`gpu_replay.moe_tile_fit.TILE_FORMS`) is
  scored by leave-one-shape-out CV on the fit shapes, the tile chosen inside each fold;
  :func:`gpu_replay.moe_tile_fit.choose` picks the form; it is fitted on every fit shape;
- reported once, after the choice: held-out median |% error| per set (prefill, decode, all) and
  per shape, for the chosen form, every other form and the committed profile's coefficients.

    python -m gpu_replay.step_calib --measurements OUT/steps.json --out OUT [--workers 16]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import time
from pathlib import Path

import numpy as np

from gpu_replay import moe_tile_fit as mtf
from gpu_replay.calibrate import SPLIT, StepShape, median_abs_pct
from gpu_replay.step_fit import BASE_KEYS, FORMS, PROFILES, base_model
from simulator.cost.profile import validate_profile

__all__ = ["CONFIG", "HeldOutLeak", "check_no_leak", "heldout_keys", "load_measurements", "run"]

CONFIG = Path(__file__).resolve().parent / "calibration" / "step_calib.json"
PROFILE = "h100-gpt-oss-120b-tp2-fitted"
STEP_KEYS = BASE_KEYS + tuple(k for f in FORMS.values() for k in f) + mtf.TILE_KEYS


class HeldOutLeak(ValueError):
    """A held-out shape reached the fit set."""


def _key(s: StepShape) -> tuple[str, int, int]:
    return (s.phase, s.a, s.b)


def heldout_keys(split: dict | None = None) -> set[tuple[str, int, int]]:
    """The committed held-out step shapes of split.json as ``(phase, a, b)``."""
    split = split or json.loads(SPLIT.read_text())
    return {(ph, int(a), int(b)) for ph, rows in split["step_shapes"]["heldout"].items() for a, b in rows}


def check_no_leak(fit: list[StepShape], heldout: set[tuple[str, int, int]]) -> None:
    """Raise :class:`HeldOutLeak` if any fit shape is a held-out shape."""
    leaked = sorted({_key(s) for s in fit} & heldout)
    if leaked:
        raise HeldOutLeak(f"held-out shapes in the fit set: {leaked}")


def load_measurements(data: dict) -> tuple[dict[str, list[StepShape]], list[dict]]:
    """Shapes by set (``fit``, ``heldout``), each at the median of its repeats, and a row of
    repeat statistics per shape. A held-out shape labelled ``fit`` raises :class:`HeldOutLeak`."""
    reps: dict[tuple[str, str, int, int], list[float]] = {}
    for r in data["rows"]:
        reps.setdefault((r["set"], r["phase"], int(r["a"]), int(r["b"])), []).append(float(r["total_s"]))
    shapes: dict[str, list[StepShape]] = {"fit": [], "heldout": []}
    stats = []
    for (part, phase, a, b), secs in sorted(reps.items()):
        med = statistics.median(secs)
        shapes[part].append(StepShape(phase, a, b, {}, med))
        noise = statistics.median(abs(s / med - 1.0) for s in secs) * 100.0
        spread = (max(secs) - min(secs)) / med * 100.0
        stats.append({"set": part, "phase": phase, "a": a, "b": b, "repeats": len(secs)})
        stats[-1] |= {"median_s": med, "repeat_noise_pct": noise, "spread_pct": spread}
    check_no_leak(shapes["fit"], heldout_keys())
    return shapes, stats


# ---- cross-validation, in worker processes (fork: the fit shapes are inherited, not pickled) ----
_STATE: dict = {}


def _fold(task: tuple[str, int]) -> tuple[str, int, float]:
    form, i = task
    base, fit = _STATE["base"], _STATE["fit"]
    rest = fit[:i] + fit[i + 1 :]
    coeffs = mtf.fit_tiled(base, rest, form)
    return form, i, float(mtf.predict(base, coeffs, [fit[i]])[0] / fit[i].total - 1.0)


def _full(form: str) -> tuple[str, dict]:
    return form, mtf.fit_tiled(_STATE["base"], _STATE["fit"], form)


def _map(fn, tasks: list, workers: int) -> list:
    if workers <= 1 or len(tasks) <= 1:
        return [fn(t) for t in tasks]
    with mp.get_context("fork").Pool(min(workers, len(tasks))) as pool:
        return pool.map(fn, tasks, chunksize=1)


def cross_validate(base, fit: list[StepShape], forms: list[str], workers: int) -> dict:
    """Leave-one-shape-out signed errors per form (the fit shapes only)."""
    check_no_leak(fit, heldout_keys())
    _STATE.update(base=base, fit=fit)
    out = {f: [0.0] * len(fit) for f in forms}
    for form, i, err in _map(_fold, [(f, i) for f in forms for i in range(len(fit))], workers):
        out[form][i] = err
    return {
        f: {
            "median_abs_pct": float(np.median(np.abs(e)) * 100),
            "errors_pct": [round(x * 100, 2) for x in e],
        }
        for f, e in out.items()
    }


def score(base, coeffs: dict, shapes: list[StepShape]) -> dict:
    """Per shape signed % error and the median |% error| per phase and over all shapes."""
    pred = mtf.predict(base, coeffs, shapes)
    meas = np.array([s.total for s in shapes])
    rows = [
        {"phase": s.phase, "a": s.a, "b": s.b, "measured_s": s.total, "simulated_s": float(p)}
        | {"error_pct": round((p / s.total - 1.0) * 100, 2)}
        for s, p in zip(shapes, pred, strict=True)
    ]
    out: dict = {"all": median_abs_pct(pred, meas) if len(shapes) else None, "rows": rows}
    for phase in ("prefill", "decode"):
        m = np.array([s.phase == phase for s in shapes], dtype=bool)
        out[phase] = median_abs_pct(pred[m], meas[m]) if m.any() else None
    return out


def committed_coefficients(path: Path | None = None) -> dict:
    """The step keys of the committed profile (the 'before' of this calibration)."""
    prof = json.loads((path or PROFILES / f"{PROFILE}.json").read_text())
    return {k: v for k, v in prof["coefficients"].items() if k in STEP_KEYS}


def run(data: dict, forms: list[str], gpu: str, workers: int = 1) -> dict:
    """CV, choice, fit of every form on the fit shapes, then the held-out scores."""
    split = json.loads(SPLIT.read_text())
    shapes, stats = load_measurements(data)
    if not shapes["fit"] or not shapes["heldout"]:
        raise ValueError("the measurements need fit and held-out shapes")
    base = base_model(split["model"], gpu, split["tp"])
    t0 = time.perf_counter()
    cv = cross_validate(base, shapes["fit"], forms, workers)
    chosen = mtf.choose({n: v["median_abs_pct"] for n, v in cv.items()})
    fitted = dict(_map(_full, forms, workers))
    report: dict = {"model": split["model"], "tp": split["tp"], "gpu": gpu, "forms": forms, "cv": cv}
    report |= {"chosen": chosen, "tie_pct": mtf.TIE_PCT, "tiles": list(mtf.TILES), "repeat_stats": stats}
    report["results"] = {
        name: {
            "coefficients": coeffs,
            "fit": score(base, coeffs, shapes["fit"]),
            "heldout": score(base, coeffs, shapes["heldout"]),
        }
        for name, coeffs in fitted.items()
    }
    before = committed_coefficients()
    report["committed_profile"] = {
        "coefficients": before,
        "fit": score(base, before, shapes["fit"]),
        "heldout": score(base, before, shapes["heldout"]),
    }
    report["fit_wall_s"] = time.perf_counter() - t0
    return report


def fitted_profile(report: dict, env: dict, command: str, date: str) -> dict:
    """The committed profile with the chosen form's step coefficients (its all-reduce and
    ``hicache_transfer`` entries kept) and this run's provenance."""
    prof = json.loads((PROFILES / f"{PROFILE}.json").read_text())
    res = report["results"][report["chosen"]]
    kept = {k: v for k, v in prof["coefficients"].items() if k not in STEP_KEYS}
    prof["coefficients"] = {**res["coefficients"], **kept}
    held = res["heldout"]
    prof["name"] = f"{report['gpu'].lower()}-{report['model'].lower()}-tp{report['tp']}-fitted"
    prov = prof["provenance"]
    prov |= {"kind": "fitted", "gpu": report["gpu"], "date": date}
    prov["tool"] = f"{prov['tool']}; {command}"  # the all-reduce and transfer commands still apply
    prov["source"] = (
        f"step coefficients: {env.get('name')} (driver {env.get('driver')}), torch {env.get('torch')}, "
        f"CUDA {env.get('cuda')}, host {env.get('host')}; all-reduce and hicache_transfer kept from the "
        f"earlier profile ({prov['source']})"
    )
    cv = ", ".join(f"{n} {v['median_abs_pct']:.2f}%" for n, v in report["cv"].items())
    prov["notes"] = f"{_carried_notes(prov['notes'])} [step form] " + (
        f"Step form '{report['chosen']}' chosen by the pre-registered rule (gpu_replay/calibration/"
        f"step_calib.json): leave-one-shape-out CV on {len(res['fit']['rows'])} fit shapes, each the "
        f"median of >= {min(s['repeats'] for s in report['repeat_stats'])} interleaved repeats on one "
        f"machine (CV median |error|: {cv}). Held-out step shapes, scored once after the choice: "
        f"{held['all']:.2f}% (prefill {held['prefill']:.2f}%, decode {held['decode']:.2f}%); fit shapes "
        f"{res['fit']['all']:.2f}%. Fitted on bf16-expert MoE stand-in times (expert bytes 2/param); "
        "the profile keeps the preset's MXFP4 bytes. Decode from CUDA graphs, prefill eager."
    )
    validate_profile(prof, origin=PROFILE)
    return prof


def _carried_notes(notes: str) -> str:
    """The earlier profile's notes that still hold for the new one: its general remarks, without
    its own held-out scores (a sentence naming "held-out step shapes") or its step-form section,
    which this fit replaces."""
    kept = [s for s in notes.split("[step form] ")[0].split(". ") if "held-out step shapes" not in s]
    return ". ".join(kept).strip()


def _fmt(v: float | None) -> str:
    return "  n/a" if v is None else f"{v:5.2f}"


def print_report(report: dict) -> None:
    print(f"chosen form: {report['chosen']} (fit wall {report['fit_wall_s']:.1f} s)")
    print("form                     CV     | held-out prefill decode  all | fit all")
    entries = [(n, report["cv"][n]["median_abs_pct"], r) for n, r in report["results"].items()]
    entries.append(("committed profile", None, report["committed_profile"]))
    for name, cv, r in entries:
        h, mark = r["heldout"], "*" if name == report["chosen"] else " "
        print(
            f"{mark}{name:23s} {_fmt(cv)} |        {_fmt(h['prefill'])}  {_fmt(h['decode'])} "
            f"{_fmt(h['all'])} | {_fmt(r['fit']['all'])}"
        )
    res = report["results"][report["chosen"]]
    noise = {(s["phase"], s["a"], s["b"], s["set"]): s for s in report["repeat_stats"]}
    for part in ("heldout", "fit"):
        for row in res[part]["rows"]:
            st = noise[(row["phase"], row["a"], row["b"], part)]
            print(
                f"{part:7s} {row['phase']:7s} {row['a']:6d} {row['b']:6d}: measured "
                f"{row['measured_s'] * 1e3:8.3f} ms (x{st['repeats']}, noise {st['repeat_noise_pct']:.1f}%, "
                f"spread {st['spread_pct']:.1f}%) simulated {row['simulated_s'] * 1e3:8.3f} ms "
                f"error {row['error_pct']:+6.2f}%"
            )
    print("coefficients", json.dumps(res["coefficients"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measurements", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True, help="folder for the report and the profile")
    ap.add_argument("--gpu", default=None, help="GPU preset (default: from the measured device name)")
    ap.add_argument("--forms", default=None, help="default: step_calib.json's pre-registered forms")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    data = json.loads(args.measurements.read_text())
    env = data.get("environment", {})
    gpu = args.gpu or ("H200" if "H200" in str(env.get("name")) else "H100")
    forms = args.forms.split(",") if args.forms else json.loads(CONFIG.read_text())["forms"]
    report = run(data, forms, gpu, args.workers)
    report["environment"] = env
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "step_calib_report.json").write_text(json.dumps(report, indent=1) + "\n")
    command = f"{data.get('command', 'benchmarks/gpu_step_calib.py')}; python -m gpu_replay.step_calib"
    prof = fitted_profile(report, env, command, data.get("date", time.strftime("%Y-%m-%d")))
    name = f"{gpu.lower()}-{report['model'].lower()}-tp{report['tp']}-fitted.json"
    (args.out / name).write_text(json.dumps(prof, indent=2) + "\n")
    print_report(report)


if __name__ == "__main__":
    main()
