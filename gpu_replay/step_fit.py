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

    python -m gpu_replay.step_fit --results gpu_replay/results/calibrate-2026-11-26 --write-profiles

Run it after ``python -m gpu_replay.calibrate``, which rewrites the profiles' step coefficients
with the base form.
"""

from __future__ import annotations

import argparse
import itertools
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


class _Features:
    """Each shape's FLOP and byte seconds per kernel group at unit efficiencies, from the cost
    model's own per-rank constants, so that a trial's step times are a few array operations
    (the fits try tens of thousands of coefficient sets). :func:`fit_form` checks the result
    against :func:`~gpu_replay.calibrate.predict_step` on the real cost model."""

    def __init__(self, base: CostModel, shapes: list[StepShape]) -> None:
        r, c, g = base._r, base.coefficients, base.geometry
        peak, hbm = c.peak_tflops * 1e12, c.hbm_bandwidth_gbps * 1e9
        w = g.sliding_window or 0
        rows = []
        for s in shapes:
            if s.phase == "prefill":
                n, req, fp, sp, fr, sr = base._prefill_inputs([s.a], [s.b])
            else:
                n = req = float(s.a)
                fp = fr = float(s.a * s.b)
                sp = sr = float(s.a * min(s.b, w + 1)) if w else fp
            touched = r.num_experts * (1.0 - r.miss_per_token**n) if r.num_experts else 0.0
            rows.append(
                [
                    (r.dense_flops_per_token * n + r.lm_head_flops_per_request * req) / peak,
                    r.dense_bytes / hbm,
                    r.moe_flops_per_token / peak,
                    base.moe_flop_tokens(n, s.phase) if r.num_experts else 0.0,
                    touched * r.expert_bytes / hbm,
                    fp * r.full_flops_per_pair / peak,
                    (fr + n) * r.full_kv_bytes / hbm,
                    sp * r.swa_flops_per_pair / peak,
                    (sr + n) * r.swa_kv_bytes / hbm,
                    1.0 if s.phase == "prefill" else 0.0,
                ]
            )
        self.x = np.array(rows).T
        self.layers = float(g.num_layers)
        self.measured = np.array([s.total for s in shapes])

    def times(self, k: dict) -> np.ndarray:
        dc, dm, cpt, n, mm, fc, fm, sc, sm, pre = self.x

        def group(c, m, f):
            return np.maximum(c, m) + f * np.minimum(c, m)

        e_w, e_a, e_kv = (
            k["weight_bandwidth_efficiency"],
            k["attention_flops_efficiency"],
            k["kv_bandwidth_efficiency"],
        )
        fa = pre * k.get("prefill_attention_unhidden_fraction", 0.0)
        dense = group(dc / k["dense_flops_efficiency"], dm / e_w, k.get("dense_unhidden_fraction", 0.0))
        moe_c = cpt * (n + k.get("moe_flops_half_tokens", 0.0)) / k["moe_flops_efficiency"]
        moe = np.where(n > 0, group(moe_c, mm / e_w, k.get("moe_unhidden_fraction", 0.0)), 0.0)
        attn = group(fc / e_a, fm / e_kv, fa) + group(sc / e_a, sm / e_kv, fa)
        floor = np.where(pre > 0, k["prefill_layer_overhead_s"], k["decode_layer_overhead_s"]) * self.layers
        return dense + moe + attn + floor


class _Scorer:
    """Squared log error of whole steps for a coefficient dict (fast path: :class:`_Features`);
    :meth:`model` gives the real cost model for those coefficients."""

    def __init__(self, base: CostModel, shapes: list[StepShape]) -> None:
        self.base, self.shapes = base, shapes
        self.features = _Features(base, shapes) if shapes else None

    def model(self, coeffs: dict) -> CostModel:
        return replace(self.base, coefficients=replace(self.base.coefficients, **coeffs))

    def __call__(self, coeffs: dict) -> float:
        f = self.features
        return float(np.sum(np.log(f.times(coeffs) / f.measured) ** 2))


def base_model(model_name: str, gpu_name: str, tp: int) -> CostModel:
    """The cost model the step fits start from: overheads held at 0, bf16 stand-in expert bytes."""
    return _cost(load_model(model_name), get_gpu(gpu_name), tp, dict(HELD_AT_ZERO), STAND_IN_EXPERT_BYTES)


def _valid(key: str, v: float) -> bool:
    if key in EFFICIENCIES:
        return 0 < v <= 1.5
    if key.endswith("_unhidden_fraction"):
        return 0 <= v <= 1
    return v >= 0


#: Starting values of the step-shape terms; every combination is one start of the search.
_STARTS = {
    "dense_unhidden_fraction": (0.0, 1.0),
    "moe_unhidden_fraction": (0.0, 0.5, 1.0),
    "prefill_attention_unhidden_fraction": (0.0, 1.0),
    "moe_flops_half_tokens": (0.0, 1024.0),
}


def fit_form(
    base: CostModel, shapes: list[StepShape], extra: tuple[str, ...], rounds: int = 2, points: int = 31
) -> dict:
    """The coefficients of the base form plus ``extra`` that minimise the squared log error of
    ``shapes``: from every combination of :data:`_STARTS` for the extra terms, a coordinate
    search over log/linear grids then shrinking multiplicative steps (the search alone can stall
    at a term's start: the terms trade off against the efficiencies); the best end point wins."""
    score = _Scorer(base, shapes)
    best: tuple[float, dict] | None = None
    for start in itertools.product(*(_STARTS[k] for k in extra)):
        coeffs = _search(score, {**_START, **dict(zip(extra, start, strict=True))}, rounds, points)
        val = score(coeffs)
        if best is None or val < best[0]:
            best = (val, coeffs)
    out = {k: float(f"{v:.4g}") for k, v in best[1].items()}
    exact = predictions(base, out, shapes)
    fast = score.features.times(out)
    if not np.allclose(exact, fast, rtol=1e-9, atol=0):
        raise AssertionError(f"fast step times disagree with the cost model: {exact} vs {fast}")
    return out


def _search(score: _Scorer, coeffs: dict, rounds: int, points: int) -> dict:
    keys = tuple(coeffs)
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
    return coeffs


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
    put_step_form(report["coefficients"], steps_keys, command, summary)


def put_step_form(coefficients: dict, step_keys: tuple, command: str, summary: str) -> None:
    """Replace the step-form keys of every committed step profile by ``coefficients`` (other
    entries kept), append ``command`` to the tool line and ``summary`` as the notes' step form."""
    from simulator.cost.profile import validate_profile

    for name in STEP_PROFILES:
        path = PROFILES / f"{name}.json"
        prof = json.loads(path.read_text())
        kept = {k: v for k, v in prof["coefficients"].items() if k not in step_keys}
        prof["coefficients"] = {**coefficients, **kept}
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
