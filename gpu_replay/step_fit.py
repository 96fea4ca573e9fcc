"""Step-time model forms, their fit, and the choice between them by cross-validation on the fit
shapes only (no torch here: runs on the CPU from the committed measurements).

The roofline prices each kernel group at ``max(FLOP time, byte time)``. Measured prefill steps of
gpt-oss-120b between 1k and 4k new tokens do not follow that corner: the MoE's grouped GEMM keeps
reading every expert while its math grows, so its time is closer to the sum of the two than to
their max. :data:`FORMS` adds the cost model's step-shape terms (``*_unhidden_fraction``,
``moe_flops_half_tokens``; all 0 by default, which is the plain roofline) to the base form of
session three (five efficiencies and the two per-layer floors). :func:`choose_form` scores every
form by leave-one-shape-out cross-validation on the ``fit`` shapes, and the rule is fixed before
any score is seen: the lowest cross-validated median |% error| wins; a form within
:data:`TIE_PCT` points of a smaller one loses to it. The held-out shapes enter nothing here.

    python -m gpu_replay.step_fit --results gpu_replay/results/calibrate-2026-11-26
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np

from gpu_replay.calibrate import (
    EFFICIENCIES,
    FLOORS,
    HELD_AT_ZERO,
    SPLIT,
    STAND_IN_EXPERT_BYTES,
    StepShape,
    _cost,
    load_step_shapes,
    median_abs_pct,
    predict_step,
)
from simulator.cost.roofline import CostModel
from simulator.gpus import get_gpu
from simulator.models import load_model

__all__ = ["FORMS", "TIE_PCT", "choose_form", "cv_errors", "fit_form"]

#: Candidate forms: the base coefficients plus these step-shape terms.
FORMS: dict[str, tuple[str, ...]] = {
    "base": (),
    "moe_unhidden": ("moe_unhidden_fraction",),
    "linear_unhidden": ("moe_unhidden_fraction", "dense_unhidden_fraction"),
    "all_unhidden": (
        "moe_unhidden_fraction",
        "dense_unhidden_fraction",
        "prefill_attention_unhidden_fraction",
    ),
    "moe_half": ("moe_flops_half_tokens",),
    "moe_unhidden_half": ("moe_unhidden_fraction", "moe_flops_half_tokens"),
}
#: A larger form must beat a smaller one by more than this many points of CV median error.
TIE_PCT = 0.1
BASE_KEYS = EFFICIENCIES + FLOORS
_START = {**dict.fromkeys(EFFICIENCIES, 0.5), **dict.fromkeys(FLOORS, 40e-6)}


def _grid(key: str, points: int) -> np.ndarray:
    if key in EFFICIENCIES:
        return np.exp(np.linspace(math.log(0.02), math.log(1.5), points))
    if key in FLOORS:
        return np.exp(np.linspace(math.log(1e-6), math.log(3e-3), points))
    if key.endswith("_unhidden_fraction"):
        return np.linspace(0.0, 1.0, points)
    if key == "moe_flops_half_tokens":
        return np.concatenate([[0.0], np.exp(np.linspace(math.log(16.0), math.log(16384.0), points - 1))])
    raise KeyError(key)


class _Scorer:
    """Squared log error of whole steps for a coefficient dict, on a fixed cost model base (the
    model geometry is built once; each trial only swaps the coefficients)."""

    def __init__(self, base: CostModel, shapes: list[StepShape]) -> None:
        self.base, self.shapes = base, shapes

    def model(self, coeffs: dict) -> CostModel:
        return replace(self.base, coefficients=replace(self.base.coefficients, **coeffs))

    def __call__(self, coeffs: dict) -> float:
        cm = self.model(coeffs)
        return sum(math.log(predict_step(cm, s) / s.total) ** 2 for s in self.shapes)


def base_model(model_name: str, gpu_name: str, tp: int) -> CostModel:
    """The cost model the step fits start from: overheads held at 0, bf16 stand-in expert bytes."""
    return _cost(load_model(model_name), get_gpu(gpu_name), tp, dict(HELD_AT_ZERO), STAND_IN_EXPERT_BYTES)


def _valid(key: str, v: float) -> bool:
    if key in EFFICIENCIES:
        return 0 < v <= 1.5
    if key.endswith("_unhidden_fraction"):
        return 0 <= v <= 1
    return v >= 0


def fit_form(
    base: CostModel, shapes: list[StepShape], extra: tuple[str, ...], rounds: int = 3, points: int = 41
) -> dict:
    """Coordinate search over log/linear grids, then shrinking multiplicative steps, of the base
    coefficients and ``extra`` on the squared log error of ``shapes`` (as
    :func:`gpu_replay.calibrate.fit_steps` does for the base form)."""
    score = _Scorer(base, shapes)
    keys = BASE_KEYS + tuple(extra)
    coeffs = {k: _START.get(k, 0.0) for k in keys}
    grids = {k: _grid(k, points) for k in keys}
    for _ in range(rounds):
        for key in keys:
            coeffs[key] = float(min(grids[key], key=lambda v, k=key: score({**coeffs, k: float(v)})))
    best = score(coeffs)
    for step in (0.05, 0.02, 0.01, 0.005, 0.002):
        improved = True
        while improved:
            improved = False
            for key in keys:
                for f in (1 + step, 1 - step):
                    trial = {**coeffs, key: coeffs[key] * f}
                    if not _valid(key, trial[key]):
                        continue
                    val = score(trial)
                    if val < best - 1e-12:
                        coeffs, best, improved = trial, val, True
    return {k: float(f"{v:.4g}") for k, v in coeffs.items()}


def predictions(base: CostModel, coeffs: dict, shapes: list[StepShape]) -> np.ndarray:
    cm = _Scorer(base, shapes).model(coeffs)
    return np.array([predict_step(cm, s) for s in shapes])


def cv_errors(base: CostModel, shapes: list[StepShape], extra: tuple[str, ...], **kw) -> np.ndarray:
    """Leave-one-shape-out: each shape's signed error when the form is fitted on the others."""
    out = []
    for i, s in enumerate(shapes):
        coeffs = fit_form(base, shapes[:i] + shapes[i + 1 :], extra, **kw)
        out.append(predictions(base, coeffs, [s])[0] / s.total - 1.0)
    return np.array(out)


def choose_form(cv: dict[str, float]) -> str:
    """The rule fixed before scoring: lowest CV median error; within :data:`TIE_PCT` of a form
    with fewer terms, the smaller form."""
    order = sorted(cv, key=lambda name: (len(FORMS[name]), cv[name]))
    best = order[0]
    for name in order[1:]:
        if cv[name] < cv[best] - TIE_PCT:
            best = name
    return best


def run(results: Path, steps: str, gpu: str, forms: list[str], **kw) -> dict:
    """CV every form on the fit shapes, fit the chosen one on all of them, then score held-out."""
    split = json.loads(SPLIT.read_text())
    model, tp = split["model"], split["tp"]
    spec = load_model(model)
    shapes = load_step_shapes(results / steps, (spec.num_full_layers, spec.num_swa_layers))
    base = base_model(model, gpu, tp)
    fit = shapes["fit"]
    cv = {}
    for name in forms:
        err = cv_errors(base, fit, FORMS[name], **kw)
        cv[name] = {
            "median_abs_pct": float(np.median(np.abs(err)) * 100),
            "mean_abs_pct": float(np.mean(np.abs(err)) * 100),
            "errors_pct": [round(float(e) * 100, 2) for e in err],
        }
        print(name, round(cv[name]["median_abs_pct"], 2), round(cv[name]["mean_abs_pct"], 2), flush=True)
    chosen = choose_form({n: v["median_abs_pct"] for n, v in cv.items()})
    coeffs = fit_form(base, fit, FORMS[chosen], **kw)
    report: dict = {"model": model, "tp": tp, "gpu": gpu, "steps": steps, "cv": cv, "chosen": chosen}
    report["coefficients"] = coeffs
    for part in ("fit", "heldout"):
        pred = predictions(base, coeffs, shapes[part])
        meas = np.array([s.total for s in shapes[part]])
        report[part] = {
            "median_abs_pct": median_abs_pct(pred, meas),
            "rows": [
                {"phase": s.phase, "a": s.a, "b": s.b, "measured_s": s.total, "simulated_s": float(p)}
                for s, p in zip(shapes[part], pred, strict=True)
            ],
        }
    return report


PROFILES = Path(__file__).resolve().parent / "profiles"
STEP_PROFILES = ("h100-gpt-oss-120b-tp2-fitted", "transferred-mimo-v2-flash-tp4")


def write_step_profiles(report: dict, command: str) -> None:
    """Put the chosen form's coefficients into the committed cost profiles (the gpt-oss fit and
    the MiMo profile that carries its kernel coefficients), keeping their all-reduce and
    ``hicache_transfer`` entries, and say in the provenance how they were chosen and scored."""
    from simulator.cost.profile import validate_profile

    steps_keys = BASE_KEYS + tuple(k for f in FORMS.values() for k in f)
    cv = report["cv"]
    terms = ", ".join(FORMS[report["chosen"]]) or "base terms only"
    summary = (
        f"Step form '{report['chosen']}' ({terms}) chosen by leave-one-shape-out CV on the "
        f"{len(report['fit']['rows'])} fit shapes (median |error|: "
        + ", ".join(f"{n} {v['median_abs_pct']:.1f}%" for n, v in cv.items())
        + f"); held-out step shapes {report['heldout']['median_abs_pct']:.1f}% "
        f"(fit shapes {report['fit']['median_abs_pct']:.1f}%), scored once after the choice. "
    )
    for name in STEP_PROFILES:
        path = PROFILES / f"{name}.json"
        prof = json.loads(path.read_text())
        coeffs = {k: v for k, v in prof["coefficients"].items() if k not in steps_keys}
        prof["coefficients"] = {**report["coefficients"], **coeffs}
        prov = prof["provenance"]
        if command not in prov["tool"]:
            prov["tool"] = f"{prov['tool']}; {command}"
        notes = prov["notes"].split("[step form] ")[0].rstrip()
        prov["notes"] = f"{notes} [step form] {summary}"
        validate_profile(prof, origin=name)
        path.write_text(json.dumps(prof, indent=2) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, required=True)
    ap.add_argument("--steps", default="steps-h100.json")
    ap.add_argument("--gpu", default="H100")
    ap.add_argument("--forms", default=",".join(FORMS))
    ap.add_argument("--out", type=Path, default=None, help="report JSON (default: RESULTS/step_fit.json)")
    ap.add_argument("--write-profiles", action="store_true", help=f"update {', '.join(STEP_PROFILES)}")
    args = ap.parse_args()
    report = run(args.results, args.steps, args.gpu, args.forms.split(","))
    (args.out or args.results / "step_fit.json").write_text(json.dumps(report, indent=1) + "\n")
    if args.write_profiles:
        write_step_profiles(
            report, f"python -m gpu_replay.step_fit --results {args.results} --write-profiles"
        )
    print("chosen", report["chosen"], report["coefficients"])
    print(
        "fit",
        round(report["fit"]["median_abs_pct"], 2),
        "heldout",
        round(report["heldout"]["median_abs_pct"], 2),
    )


if __name__ == "__main__":
    main()
