"""The MoE tile term (``moe_tile_tokens``, simulator/cost/moe_tiles.py) fitted on the fit step
shapes only, chosen against the session-five form by cross-validation, and scored on held-out
shapes of both committed runs (no torch: runs on the CPU from the committed measurements).

Rules, fixed before any score was computed:

- Candidate forms: ``base`` (session three), ``moe_unhidden`` (session five, in the committed
  profile), ``tiles`` (base + tile) and ``tiles_unhidden`` (base + tile + unhidden MoE share).
- The tile is not a continuous coefficient: each fit tries every tile of :data:`TILES` (the
  power-of-two row tiles GEMM kernels use) and keeps the one with the lowest squared log error
  **on the shapes it was given**, so the tile is chosen inside each cross-validation fold too.
- The form is chosen by leave-one-shape-out CV median |error| on run 1's 18 fit shapes with
  :func:`gpu_replay.step_fit.choose_form`'s rule (a form with more terms must win by more than
  0.1 point; the tile counts as one term). The chosen form is fitted on all of run 1's fit shapes.
- Held-out shapes enter no fit and no choice: they are scored once, after the choice, for run 1
  and for run 2 (``run2-h100/steps.json``, a second H100), the run-1 coefficients predicting
  both; every form's held-out scores are reported alongside for the before/after comparison.

    python -m gpu_replay.moe_tile_fit --results gpu_replay/results/calibrate-2026-11-26 [--write-profiles]
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from gpu_replay.calibrate import SPLIT, StepShape, load_step_shapes, median_abs_pct
from gpu_replay.step_fit import (
    BASE_KEYS,
    FORMS,
    PROFILES,  # noqa: F401 - read from here by tests/test_calibrate_moe_tiles.py
    STEP_PROFILES,
    TIE_PCT,
    _Scorer,
    base_model,
    fit_form,
    predictions,
    put_step_form,
)
from simulator.cost.roofline import CostModel
from simulator.models import load_model

__all__ = ["TILE_FORMS", "TILES", "choose", "cv_errors", "fit_tiled", "run"]

#: Row tiles tried by every fit of a tiled form.
TILES = (16, 32, 64, 128, 256)
#: Form name -> (continuous step-shape terms, the tile keys the form sets). The first four were
#: fixed before any score; the ``tiles_prefill*`` forms were added after their scores were seen
#: (docs/gpu-replay.md, sixth session, says so).
TILE_KEYS = ("moe_tile_tokens", "moe_decode_tile_tokens")
TILE_FORMS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "base": ((), ()),
    "moe_unhidden": (FORMS["moe_unhidden"], ()),
    "tiles": ((), TILE_KEYS),
    "tiles_unhidden": (FORMS["moe_unhidden"], TILE_KEYS),
    "tiles_prefill": ((), ("moe_tile_tokens",)),
    "tiles_prefill_unhidden": (FORMS["moe_unhidden"], ("moe_tile_tokens",)),
}
PREREGISTERED = ("base", "moe_unhidden", "tiles", "tiles_unhidden")
RUN2_STEPS = "run2-h100/steps.json"


def _with_tile(base: CostModel, tiles: dict) -> CostModel:
    """``base`` with the tile keys of ``tiles`` set (the others 0)."""
    full = {k: float(tiles.get(k, 0.0)) for k in TILE_KEYS}
    return replace(base, coefficients=replace(base.coefficients, **full))


def fit_tiled(base: CostModel, shapes: list[StepShape], form: str, **kw) -> dict:
    """The form's coefficients fitted on ``shapes`` (and only those): for a tiled form, one fit per
    tile of :data:`TILES`, keeping the lowest squared log error on ``shapes``."""
    extra, keys = TILE_FORMS[form]
    if not keys:
        return fit_form(base, shapes, extra, **kw)
    best: tuple[float, dict] | None = None
    for tile in TILES:
        tiles = dict.fromkeys(keys, float(tile))
        model = _with_tile(base, tiles)
        coeffs = fit_form(model, shapes, extra, **kw)
        val = _Scorer(model, shapes)(coeffs)
        if best is None or val < best[0]:
            best = (val, {**coeffs, **tiles})
    return best[1]


def predict(base: CostModel, coeffs: dict, shapes: list[StepShape]) -> np.ndarray:
    rest = {k: v for k, v in coeffs.items() if k not in TILE_KEYS}
    return predictions(_with_tile(base, coeffs), rest, shapes)


def cv_errors(base: CostModel, shapes: list[StepShape], form: str, **kw) -> np.ndarray:
    """Leave-one-shape-out signed errors: each shape predicted by the form fitted on the others."""
    out = []
    for i, s in enumerate(shapes):
        coeffs = fit_tiled(base, shapes[:i] + shapes[i + 1 :], form, **kw)
        out.append(predict(base, coeffs, [s])[0] / s.total - 1.0)
    return np.array(out)


def _terms(form: str) -> int:
    extra, keys = TILE_FORMS[form]
    return len(extra) + int(bool(keys))


def choose(cv: dict[str, float]) -> str:
    """Lowest CV median |error|; a form with more terms must beat one with fewer by more than
    :data:`~gpu_replay.step_fit.TIE_PCT` points (the rule of gpu_replay.step_fit.choose_form)."""
    order = sorted(cv, key=lambda name: (_terms(name), cv[name]))
    best = order[0]
    for name in order[1:]:
        if cv[name] < cv[best] - TIE_PCT:
            best = name
    return best


def _rows(base: CostModel, coeffs: dict, shapes: list[StepShape]) -> dict:
    pred = predict(base, coeffs, shapes)
    meas = np.array([s.total for s in shapes])
    return {
        "median_abs_pct": median_abs_pct(pred, meas),
        "rows": [
            {
                "phase": s.phase,
                "a": s.a,
                "b": s.b,
                "measured_s": s.total,
                "error_pct": round((p / s.total - 1) * 100, 2),
            }
            for s, p in zip(shapes, pred, strict=True)
        ],
    }


def run(results: Path, steps: str, gpu: str, forms: list[str], cv_from: Path | None = None, **kw) -> dict:
    """CV the forms on run 1's fit shapes (or take a form's CV from the report ``cv_from``, the
    same deterministic computation), choose, then fit every form on all of them and score fit and
    held-out shapes of run 1 and run 2 with those run-1 coefficients."""
    split = json.loads(SPLIT.read_text())
    model, tp = split["model"], split["tp"]
    spec = load_model(model)
    layers = (spec.num_full_layers, spec.num_swa_layers)
    run1 = load_step_shapes(results / steps, layers)
    run2_path = results / RUN2_STEPS
    run2 = load_step_shapes(run2_path, layers) if run2_path.exists() else None
    base = base_model(model, gpu, tp)
    cv = json.loads(cv_from.read_text())["cv"] if cv_from else {}
    cv = {n: v for n, v in cv.items() if n in forms}
    for name in forms:
        if name in cv:
            continue
        err = cv_errors(base, run1["fit"], name, **kw)
        cv[name] = {
            "median_abs_pct": float(np.median(np.abs(err)) * 100),
            "errors_pct": [round(float(e) * 100, 2) for e in err],
        }
        print("cv", name, round(cv[name]["median_abs_pct"], 2), flush=True)
    chosen = choose({n: v["median_abs_pct"] for n, v in cv.items()})
    report: dict = {"model": model, "tp": tp, "gpu": gpu, "steps": steps, "tiles": list(TILES), "cv": cv}
    report["chosen"] = chosen
    pre = {n: v["median_abs_pct"] for n, v in cv.items() if n in PREREGISTERED}
    report["chosen_preregistered"] = choose(pre) if pre else None
    report["forms"] = {}
    for name in forms:
        coeffs = fit_tiled(base, run1["fit"], name, **kw)
        entry = {"coefficients": coeffs, "run1_fit": _rows(base, coeffs, run1["fit"])}
        entry["run1_heldout"] = _rows(base, coeffs, run1["heldout"])
        if run2 is not None:
            entry["run2_fit"] = _rows(base, coeffs, run2["fit"])
            entry["run2_heldout"] = _rows(base, coeffs, run2["heldout"])
        report["forms"][name] = entry
    return report


def write_profiles(report: dict, command: str) -> None:
    """Put the preregistered choice's coefficients into the committed step profiles (keeping their
    all-reduce and ``hicache_transfer`` entries) and say in the provenance how they were chosen.
    A form added after scores were seen is reported, never written, even where the rule prefers it:
    choosing it would use the held-out scores."""

    step_keys = BASE_KEYS + tuple(k for f in FORMS.values() for k in f) + TILE_KEYS
    chosen = report["chosen_preregistered"]
    entry = report["forms"][chosen]
    cv = report["cv"]
    tile = entry["coefficients"].get("moe_tile_tokens", 0)
    shapes = len(entry["run1_fit"]["rows"])
    summary = (
        f"Step form '{chosen}' (gpu_replay.moe_tile_fit; prefill tile {tile:g}) chosen by "
        f"leave-one-shape-out CV on the {shapes} fit shapes (median |error|: "
        + ", ".join(f"{n} {v['median_abs_pct']:.1f}%" for n, v in cv.items())
        + f"; over all forms the rule prefers '{report['chosen']}', added after scores were seen, "
        "not used); held-out step shapes " + f"{entry['run1_heldout']['median_abs_pct']:.1f}% "
        f"(fit shapes {entry['run1_fit']['median_abs_pct']:.1f}%). "
    )
    put_step_form(entry["coefficients"], step_keys, command, summary)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, required=True)
    ap.add_argument("--steps", default="steps-h100.json")
    ap.add_argument("--gpu", default="H100")
    ap.add_argument("--forms", default=",".join(TILE_FORMS))
    ap.add_argument("--cv-from", type=Path, default=None, help="reuse the CV scores of an earlier report")
    ap.add_argument("--out", type=Path, default=None, help="report JSON (default: RESULTS/moe_tile_fit.json)")
    ap.add_argument("--write-profiles", action="store_true", help=f"update {', '.join(STEP_PROFILES)}")
    args = ap.parse_args()
    report = run(args.results, args.steps, args.gpu, args.forms.split(","), args.cv_from)
    (args.out or args.results / "moe_tile_fit.json").write_text(json.dumps(report, indent=1) + "\n")
    if args.write_profiles:
        write_profiles(report, f"python -m gpu_replay.moe_tile_fit --results {args.results} --write-profiles")
    print("chosen", report["chosen"], report["forms"][report["chosen"]]["coefficients"])
    for name, e in report["forms"].items():
        parts = [
            f"{k} {e[k]['median_abs_pct']:.2f}"
            for k in ("run1_fit", "run1_heldout", "run2_fit", "run2_heldout")
            if k in e
        ]
        print(name, *parts)


if __name__ == "__main__":
    main()
