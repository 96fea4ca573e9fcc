"""Seed 000 and the gsm8k predictions, with the roofline defaults and with the fitted profiles
(docs/validation.md, "GPU calibration"): runs the kvplan commands, writes each run's JSON summary
and prints the table's numbers.

    python benchmarks/gpu_predictions.py --out gpu_replay/results/predictions-2026-11-27 \
        [--only profile] [--profiles 2026-11-26]

``--profiles``: which profile set the "profile" column uses: ``2026-11-27`` (default; one H100's
steps and write-back from one device call, gpu_replay/machine_profile.py) or ``2026-11-26`` (the
session-five profiles, whose table is in gpu_replay/results/calibrate-2026-11-26/predictions).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROFILES = ROOT / "gpu_replay" / "profiles"
CALIB = ROOT / "gpu_replay" / "calibration"
SEED000 = (
    "bench-multiturn --model MiMo-V2-Flash --gpu H200 --tp 4 --mem-fraction-static 0.7 --page-size 64 "
    "--swa-full-tokens-ratio 0.2 --max-total-tokens 894000 --num-clients 10 --num-rounds 10 "
    "--request-length 300 --output-length 3000 --request-rate 16 --max-parallel 10 "
    "--ready-queue-policy random --enable-round-barrier --disable-random-sample --tombstone legacy"
).split()
GSM8K = "run --format mooncake --block-size 64 --no-progress".split()
#: profile sets by date: (gpt-oss-120b TP 2 on H100, MiMo-V2-Flash TP 4 transferred)
PROFILE_SETS = {
    "2026-11-27": ("h100-gpt-oss-120b-tp2-fitted-2026-11-27", "transferred-mimo-v2-flash-tp4-2026-11-27"),
    "2026-11-26": ("h100-gpt-oss-120b-tp2-fitted", "transferred-mimo-v2-flash-tp4"),
    # session five's pair with the measured effective expert bytes (gpu_replay/mxfp4_fit.py)
    "measured-bytes": (
        "h100-gpt-oss-120b-tp2-fitted-mxfp4-measured",
        "transferred-mimo-v2-flash-tp4-fp8-measured",
    ),
    # the same with the all-reduce latency of a CUDA graph replay (gpu_replay/graph_allreduce.py)
    "measured-bytes-graph-ar": (
        "h100-gpt-oss-120b-tp2-fitted-mxfp4-measured-graph-ar",
        "transferred-mimo-v2-flash-tp4-fp8-measured-graph-ar",
    ),
}
GPTOSS, MIMO = "gpt-oss", "mimo"
RUNS: dict[str, tuple[list[str], str]] = {
    "seed000-before": ([*SEED000, "--swa-eviction", "none"], MIMO),
    "seed000-after": ([*SEED000, "--swa-eviction", "window"], MIMO),
    "gsm8k-gptoss": (
        [
            *GSM8K,
            "--trace",
            str(CALIB / "gsm8k-gptoss.jsonl"),
            "--model",
            "gpt-oss-120b",
            "--tp",
            "2",
            "--gpu",
            "H100",
        ],
        GPTOSS,
    ),
    "gsm8k-mimo": (
        [
            *GSM8K,
            "--trace",
            str(CALIB / "gsm8k-mimo.jsonl"),
            "--model",
            "MiMo-V2-Flash",
            "--tp",
            "4",
            "--gpu",
            "H200",
        ],
        MIMO,
    ),
}


def run_one(args: list[str], out: Path) -> dict:
    cmd = [sys.executable, "-m", "simulator.cli.main", *args, "--json"]
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    if res.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
    summary = json.loads(res.stdout)
    out.write_text(json.dumps(summary, indent=1) + "\n")
    return summary


#: (model, GPU, TP, profile role, decode batch, context tokens per request) of the --steps table
STEP_ROWS = (("gpt-oss-120b", "H100", 2, GPTOSS, 10, 3300), ("MiMo-V2-Flash", "H200", 4, MIMO, 10, 3300))


def step_table() -> None:
    """One decode step (batch 10, 3.3k context each, as in seed 000's first rounds) under every
    profile set, with the preset's expert bytes (what a run uses) and with the bf16 stand-in's
    2 bytes per parameter (what the microbenchmarks measured): the sets agree on the stand-in and
    differ in how they carry its times over to the preset's MXFP4 experts."""
    from simulator.cost import CostModel, load_profile
    from simulator.gpus import get_gpu
    from simulator.models import load_model

    for model, gpu, tp, role, bs, ctx in STEP_ROWS:
        m, g = load_model(model), get_gpu(gpu)
        sets = {"defaults": None}
        sets |= {
            d: PROFILES / f"{dict(zip((GPTOSS, MIMO), n, strict=True))[role]}.json"
            for d, n in PROFILE_SETS.items()
        }
        for label, path in sets.items():
            prof = load_profile(path) if path else {"version": 1, "coefficients": {}}
            cells = []
            for model_keys in ({}, {"expert_bytes_per_param": 2.0}):
                keys = {**prof.get("model", {}), **model_keys}  # a profile's own bytes, if it sets them
                cm = CostModel.from_presets(m, g, tp, {**prof, "model": keys})
                swa = bs * min(ctx, (cm.geometry.sliding_window or ctx) + 1)
                br = cm.decode_breakdown(bs, bs * ctx, swa)
                cells.append(f"{sum(br.values()) * 1e3:6.2f} ms (MoE {br['moe'] * 1e3:5.2f})")
            print(
                f"{model:14s} TP {tp} {gpu} bs {bs}: {label:10s} preset bytes {cells[0]}, stand-in {cells[1]}"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--out", type=Path, default=None, help="folder for the runs' JSON (required unless --steps)"
    )
    ap.add_argument("--steps", action="store_true", help="print the decode-step table and stop")
    ap.add_argument("--only", choices=("defaults", "profile"), default=None)
    ap.add_argument("--runs", default=",".join(RUNS))
    ap.add_argument("--profiles", choices=tuple(PROFILE_SETS), default="2026-11-27")
    a = ap.parse_args()
    if a.steps:
        step_table()
        return
    if a.out is None:
        ap.error("--out is required")
    names = dict(zip((GPTOSS, MIMO), PROFILE_SETS[a.profiles], strict=True))
    a.out.mkdir(parents=True, exist_ok=True)
    for name in a.runs.split(","):
        args, which = RUNS[name]
        profile = PROFILES / f"{names[which]}.json"
        for variant in ("defaults", "profile"):
            if a.only not in (None, variant):
                continue
            extra = ["--profile", str(profile.relative_to(ROOT))] if variant == "profile" else []
            s = run_one([*args, *extra], a.out / f"{name}-{variant}.json")
            print(
                f"{name:15s} {variant:8s} mean latency {s['latency']['mean']:7.2f} s  duration "
                f"{s['duration_s']:7.1f} s  output {s['output_throughput']:8.0f} tok/s  "
                f"hit rate {s['cache_hit_rate']:.3f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
