"""What the MXFP4 decode measurement says about the step forms, and why prefill at 4,096 tokens
is missed (issue 13). CPU only: it reads the committed results of benchmarks/device_mxfp4.sh and
benchmarks/device_profile_long.sh and prices the same shapes with kvplan's cost model.

**Decode MoE.** The calibration fitted its step forms on a bf16 stand-in (``grouped``:
``torch._grouped_mm``), and a run prices the preset's MXFP4 experts (0.54 bytes a parameter). The
forms agree on the stand-in and part on MXFP4: ``moe_unhidden`` prices a small batch's MoE by the
bytes of the touched experts (it shrinks about 3.7-fold), the ``tiles`` forms by each touched
expert's row tile of compute (it barely shrinks). :func:`form_scores` puts each profile's
predicted ratio (MoE price with the preset's bytes over the price with 2 bytes a parameter) beside
the measured ratio (Triton's own MXFP4 path, ``tl.dot_scaled``, over the same kernel on bf16
experts, the routing both share subtracted), per batch size. :func:`effective_bytes` is the fitted
coefficient: the bytes a parameter at which the bytes form reproduces the measured ratio (2 x the
median ratio), for MXFP4 and for e4m3 (fp8) experts; a profile's ``model.expert_bytes_per_param``
carries it.

**Prefill at 4,096 tokens.** :func:`prefill_cliff` interpolates the stand-in's measured MoE layer
(steps.json, median of the repeats) between 3,840 and 4,352 new tokens, and reports what 4,096 takes
beyond the line, times the layers, as a share of the measured step; the probe of device_mxfp4.sh
shows which part of the MoE holds it.

    python -m gpu_replay.mxfp4_fit [--write-profiles] [--check]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "gpu_replay" / "results"
RUN = RESULTS / "mxfp4-2026-11-27-h200-run3"
#: the decode runs by machine (one call each; the H200's third run is the first with tl.dot_scaled)
MACHINE_RUNS = {"H200": RUN, "H100": RESULTS / "mxfp4-2026-11-27-h100"}
REPORT = RESULTS / "mxfp4-2026-11-27-fit.json"
STEPS = RESULTS / "steps-2026-11-27-s8-h200"
PROFILES = ROOT / "gpu_replay" / "profiles"
#: profiles compared (name, GPU preset): the step forms each machine's rule chose
FORM_PROFILES = (
    ("h200-gpt-oss-120b-tp2-fitted-2026-11-27", "H200"),  # moe_unhidden
    ("h200-gpt-oss-120b-tp2-fitted-2026-11-27-s8", "H200"),  # tiles_unhidden (tile 64)
    ("h100-gpt-oss-120b-tp2-fitted-2026-11-27", "H100"),  # tiles (tile 256)
)
STANDIN_BPP = 2.0  # the stand-in's bf16 experts
LAYERS = 36  # gpt-oss-120b


def _rows(run: Path = RUN) -> list[dict]:
    return json.loads((run / "mxfp4_decode.json").read_text())["decode"]


VARIANTS = ("mxfp4_ds", "mxfp4", "fp8")  # Triton's tl.dot_scaled MXFP4, this module's, e4m3
#: the kernel whose ratio stands for each format: MXFP4 through Triton's own upcast (what SGLang's
#: triton_kernels builds on), FP8 through the hardware e4m3 conversion
FORMAT_KERNEL = {"mxfp4": "mxfp4_ds", "fp8": "fp8"}


def measured_ratios(rows: list[dict]) -> list[dict]:
    """Per batch size, the routing subtracted from every layer: each variant over the same
    Triton kernel on bf16 experts (``<v>_vs_bf16``: the data format alone), and each over the
    calibration's stand-in (``<v>_vs_grouped``: ``torch._grouped_mm``, what the fits saw)."""
    out = []
    for r in rows:
        rt = r["routing_s"]
        row = {"batch": r["batch"]}
        for v in (*VARIANTS, "bf16"):
            if f"{v}_s" in r:
                row[f"{v}_vs_grouped"] = (r[f"{v}_s"] - rt) / (r["grouped_s"] - rt)
        for v in VARIANTS:
            if f"{v}_s" in r:
                row[f"{v}_vs_bf16"] = (r[f"{v}_s"] - rt) / (r["bf16_s"] - rt)
        out.append(row)
    return out


def effective_bytes(rows: list[dict]) -> dict[str, float]:
    """Bytes a parameter at which the bytes form reproduces each format's measured decode ratio:
    2 x the median over batch sizes of its kernel's ratio to the same kernel on bf16 experts."""
    ratios = measured_ratios(rows)
    return {
        fmt: round(STANDIN_BPP * statistics.median(r[f"{k}_vs_bf16"] for r in ratios), 3)
        for fmt, k in FORMAT_KERNEL.items()
    }


def predicted_ratio(profile: str, gpu: str, batch: int, bpp: float | None = None) -> float:
    """A profile's decode MoE price of gpt-oss-120b TP 2 with ``bpp`` bytes a parameter (the
    preset's MXFP4 when None) over its price with the stand-in's 2 bytes."""
    from simulator.cost import CostModel, load_profile
    from simulator.gpus import get_gpu
    from simulator.models import load_model

    prof = load_profile(PROFILES / f"{profile}.json")
    m, g = load_model("gpt-oss-120b"), get_gpu(gpu)

    def moe(keys: dict) -> float:
        cm = CostModel.from_presets(m, g, 2, {**prof, "model": keys})
        return cm.decode_breakdown(batch, batch * 4096, batch * 129)["moe"]

    return moe({} if bpp is None else {"expert_bytes_per_param": bpp}) / moe(
        {"expert_bytes_per_param": STANDIN_BPP}
    )


def form_scores(rows: list[dict]) -> dict:
    """Per profile (its form): predicted MXFP4 / bf16 ratio per batch size beside the measured
    ``mxfp4_ds_vs_bf16``, and the median |predicted / measured - 1| in %."""
    meas = {r["batch"]: r["mxfp4_ds_vs_bf16"] for r in measured_ratios(rows)}
    out = {}
    for name, gpu in FORM_PROFILES:
        pred = {b: predicted_ratio(name, gpu, b) for b in meas}
        err = [abs(pred[b] / meas[b] - 1) * 100 for b in meas]
        form = _form(name)
        out[name] = {
            "form": form,
            "predicted": {b: round(p, 3) for b, p in pred.items()},
            "median_abs_pct": round(statistics.median(err), 1),
        }
    return out


def _form(profile: str) -> str:
    c = json.loads((PROFILES / f"{profile}.json").read_text())["coefficients"]
    tiles = c.get("moe_decode_tile_tokens", 0)
    unhidden = c.get("moe_unhidden_fraction", 0)
    if tiles:
        return f"tiles{'_unhidden' if unhidden else ''} (tile {int(tiles)})"
    return "moe_unhidden" if unhidden else "base"


STEP_RUNS = ("steps-2026-11-27-s6", "steps-2026-11-27-s7-h200", "steps-2026-11-27-s8-h200")
CLIFF_SHAPES = ((4096, 0), (4096, 4096))  # the held-out prefills at 4,096 new tokens


def prefill_cliff(steps: Path = STEPS) -> dict:
    """The stand-in's MoE layer at 4,096 new tokens against the line through 3,840 and 4,352
    (steps.json, no prefix, median of the repeats); the excess times the layers as a share of the
    measured 4,096 step; and the held-out error of the run's chosen fit at the two 4,096-token
    prefills, as scored and with the excess taken out of the measurement (what the fit would
    score if the stand-in's grouped GEMM had no cliff there)."""
    rows = json.loads((steps / "steps.json").read_text())["rows"]

    def med(a: int, key: str, b: int = 0) -> float:
        v = [r[key] for r in rows if r["phase"] == "prefill" and (r["a"], r["b"]) == (a, b)]
        return statistics.median(v)

    lo, hi = med(3840, "moe_s"), med(4352, "moe_s")
    excess = med(4096, "moe_s") - (lo + (hi - lo) * (4096 - 3840) / (4352 - 3840))
    rep = json.loads((steps / "step_calib_report.json").read_text())
    held = {(r["phase"], r["a"], r["b"]): r for r in rep["results"][rep["chosen"]]["heldout"]["rows"]}
    errors = {}
    for a, b in CLIFF_SHAPES:
        r = held[("prefill", a, b)]
        flat = r["measured_s"] - excess * LAYERS
        errors[f"{a}+{b}"] = {
            "scored_pct": r["error_pct"],
            "without_cliff_pct": round((r["simulated_s"] / flat - 1) * 100, 2),
        }
    return {
        "chosen": rep["chosen"],
        "moe_ms": {t: round(med(t, "moe_s") * 1e3, 3) for t in (3840, 4096, 4352)},
        "excess_ms_per_layer": round(excess * 1e3, 3),
        "excess_pct_of_step": round(excess * LAYERS / med(4096, "total_s") * 100, 1),
        "heldout_4096": errors,
    }


def probe_cliff(run: Path = RUN) -> dict:
    """The probe's grouped GEMMs (up + down, ms) around 4,096 tokens, and 4,096 over the mean of
    its neighbours 4,064 and 4,128 (in %)."""
    probe = {p["tokens"]: p for p in json.loads((run / "mxfp4_decode.json").read_text())["prefill_probe"]}

    def gemms(t: int) -> float:
        return probe[t]["up_s"] + probe[t]["down_s"]

    return {
        "gemms_ms": {t: round(gemms(t) * 1e3, 3) for t in sorted(probe)},
        "4096_over_neighbours_pct": round((gemms(4096) / ((gemms(4064) + gemms(4128)) / 2) - 1) * 100, 1),
    }


#: the profile options: (new name, session-five profile it extends, the measured kernel whose
#: effective bytes it carries). Session five's pair is the bytes form (moe_unhidden), the one
#: whose price follows ``expert_bytes_per_param``; gpt-oss's experts are MXFP4, MiMo's FP8.
OPTIONS = (
    ("h100-gpt-oss-120b-tp2-fitted-mxfp4-measured", "h100-gpt-oss-120b-tp2-fitted", "mxfp4", "H100"),
    ("transferred-mimo-v2-flash-tp4-fp8-measured", "transferred-mimo-v2-flash-tp4", "fp8", "H200"),
)


def option_profiles(effective: dict[str, dict[str, float]]) -> dict[str, dict]:
    """Session five's profiles with ``model.expert_bytes_per_param`` set to the measured
    effective bytes of the matching kernel (``kvplan run --profile`` reads the model section)."""
    from simulator.cost.profile import validate_profile

    out = {}
    for name, base, kernel, gpu in OPTIONS:  # the GPU its runs use (gsm8k gpt-oss H100, seed 000 H200)
        eff = effective[gpu]
        prof = json.loads((PROFILES / f"{base}.json").read_text())
        prof["name"] = name
        prof["description"] = f"{base} with the measured {kernel} expert bytes (issue 13)."
        prof["model"] = {"expert_bytes_per_param": eff[kernel]}
        prov = prof["provenance"]
        prov["tool"] += "; python -m gpu_replay.mxfp4_fit --write-profiles"
        prov["notes"] = (
            f"{base}'s coefficients (bytes form, moe_unhidden) with model.expert_bytes_per_param = "
            f"{eff[kernel]}: the bytes a parameter at which that form prices the decode MoE of the "
            f"{FORMAT_KERNEL[kernel]} Triton kernel of benchmarks/gpu_mxfp4_decode.py (one {gpu}, "
            f"{MACHINE_RUNS[gpu].name}) as measured against the same kernel on bf16 experts (2 x the "
            "median ratio over batch sizes 1-256, routing subtracted). The kernels are kvplan's Triton "
            f"ones, not SGLang's triton_kernels; see gpu_replay/mxfp4_fit.py. {base}'s notes: "
            + prov["notes"]
        )
        validate_profile(prof, origin=name)
        out[name] = prof
    return out


def report() -> dict:
    out: dict = {"machines": {}}
    for gpu, run in MACHINE_RUNS.items():
        rows = _rows(run)
        out["machines"][gpu] = {
            "run": run.name,
            "measured": [{k: round(v, 3) for k, v in r.items()} for r in measured_ratios(rows)],
            "effective_bytes_per_param": effective_bytes(rows),
            "forms": form_scores(rows),
            "probe_4096": probe_cliff(run),
        }
    out["prefill_4096"] = {run: prefill_cliff(RESULTS / run) for run in STEP_RUNS}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail if the committed files differ")
    ap.add_argument("--write-profiles", action="store_true", help="also write the option profiles")
    a = ap.parse_args()
    rep = json.loads(json.dumps(report()))  # int keys as JSON writes them
    effective = {gpu: m["effective_bytes_per_param"] for gpu, m in rep["machines"].items()}
    for name, prof in option_profiles(effective).items():
        ppath = PROFILES / f"{name}.json"
        if a.check and json.loads(ppath.read_text()) != prof:
            sys.exit(f"stale: {ppath.relative_to(ROOT)} (rerun with --write-profiles)")
        if a.write_profiles:
            ppath.write_text(json.dumps(prof, indent=2) + "\n")
            print(ppath.relative_to(ROOT), "written")
    for gpu, m in rep["machines"].items():
        for r in m["measured"]:
            print(gpu, "  ".join(f"{k} {v}" for k, v in r.items()))
        for name, f in m["forms"].items():
            print(gpu, f"{name} ({f['form']}): median |pred/meas - 1| {f['median_abs_pct']}%")
        print(gpu, "effective bytes/param", m["effective_bytes_per_param"], "probe", m["probe_4096"])
    for run, c in rep["prefill_4096"].items():
        print("prefill 4096", run, c)
    if a.check:
        if json.loads(REPORT.read_text()) != rep:
            sys.exit(f"stale: {REPORT.relative_to(ROOT)} (rerun without --check)")
        print(REPORT.relative_to(ROOT), "checked")
    else:
        REPORT.write_text(json.dumps(rep, indent=1) + "\n")
        print(REPORT.relative_to(ROOT), "written")


if __name__ == "__main__":
    main()
