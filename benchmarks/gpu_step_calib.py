"""Step shapes measured with interleaved repeats on one GPU, for the calibration (issue 13,
seventh session; benchmarks/device_step_calib.sh runs it, then ``python -m gpu_replay.step_calib``
fits and scores).

Shapes: split.json's fit and held-out step shapes plus the extra fit-only prefills of
gpu_replay/calibration/step_calib.json (all fixed before the run). One unrecorded warm-up pass,
then passes over every shape in a freshly shuffled order (seeded by the pass number), so that
clock and thermal drift hit all shapes alike; it stops after ``--repeats`` passes, or earlier once
``--budget-s`` would be exceeded by one more pass (never before ``min_repeats``). Operators are
benchmarks/gpu_step_time.py's: prefill steps eager (``step``), decode steps from CUDA graphs
(``decode_graph_step``), as gpu_calibrate.py measured them.

    python benchmarks/gpu_step_calib.py --out $OUT/steps.json
    python benchmarks/gpu_step_calib.py --dry-run --out /tmp/steps.json   # CPU: synthetic times
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

Shape = tuple[str, str, int, int]  # (set, phase, a, b)
Timer = Callable[[str, int, int], dict]


def shapes(split: dict, config: dict) -> list[Shape]:
    """Every measured shape: split.json's fit and held-out shapes, then the extra fit prefills."""
    out: list[Shape] = []
    for part in ("fit", "heldout"):
        for phase in ("prefill", "decode"):
            out += [(part, phase, int(a), int(b)) for a, b in split["step_shapes"][part][phase]]
    out += [("fit", "prefill", int(a), int(b)) for a, b in config["extra_fit_prefill"]]
    held = {s[1:] for s in out if s[0] == "heldout"}
    leaked = [s for s in out if s[0] == "fit" and s[1:] in held]
    if leaked or len(set(out)) != len(out):
        raise ValueError(f"held-out shapes among the fit shapes, or duplicates: {leaked}")
    return out


def measure(
    todo: list[Shape],
    timer: Timer,
    repeats: int,
    min_repeats: int,
    budget_s: float,
    log=print,
    on_pass: Callable[[dict], None] | None = None,
) -> dict:
    """Passes over ``todo`` in shuffled orders; one row per shape and pass (``on_pass`` gets the
    rows so far after each recorded pass, so a killed run keeps its finished passes)."""
    rows, errors = [], []
    t0 = time.perf_counter()
    for rep in range(-1, repeats):  # pass -1: the warm-up, not recorded
        start = time.perf_counter()
        order = list(todo)
        random.Random(1000 + rep).shuffle(order)
        for k, (part, phase, a, b) in enumerate(order):
            try:
                row = timer(phase, a, b)
            except Exception as exc:  # noqa: BLE001 - record and go on
                errors.append(f"pass {rep} {part} {phase} {a}/{b}: {type(exc).__name__}: {exc}")
                log("ERROR", errors[-1][:300])
                continue
            if rep >= 0:
                rows.append({"set": part, "phase": phase, "a": a, "b": b, "rep": rep, "order": k} | row)
        took = time.perf_counter() - start
        log(f"pass {rep:2d}: {len(order)} shapes in {took:.1f} s (elapsed {time.perf_counter() - t0:.1f} s)")
        done = rep + 1
        if on_pass and done:
            on_pass({"rows": rows, "errors": errors, "passes": done})
        if done >= min_repeats and time.perf_counter() - t0 + took > budget_s:
            log(f"stopping after {done} recorded passes: budget {budget_s:.0f} s")
            break
    return {"rows": rows, "errors": errors, "passes": len({r["rep"] for r in rows})}


def cuda_timer(model: str, tp: int) -> tuple[Timer, dict]:
    """The device timer (gpu_step_time's operators) and its environment."""
    import gpu_calibrate  # noqa: F401 - stubs the trace readers where pandas is missing
    import gpu_step_time as st
    import torch

    from gpu_replay.replay_report import device_info

    r = st.RankShapes(model, tp)
    ops = st.Ops(r)

    def timer(phase: str, a: int, b: int) -> dict:
        try:
            if phase == "prefill":
                row = st.step(ops, r, a, ops.attn_prefill(a, b), ops.attn_prefill_swa(a), 1)
                return row | {"total_s": row["step_s"]}
            row = st.decode_graph_step(ops, r, a, b)
            gc.collect()  # free the two captured graphs' pools before the next shape
            return row | {"total_s": row["step_graph_s"]}
        finally:
            torch.cuda.empty_cache()

    env = device_info("cuda")
    env["shapes"] = {k: v for k, v in vars(r).items() if k != "spec"}
    return timer, env | {"grouped": ops.grouped}


def synthetic_timer(model: str, tp: int, seed: int = 0) -> tuple[Timer, dict]:
    """CPU stand-in for ``--dry-run``: the committed profile's step times with a 128-row prefill
    MoE tile and 1% noise, so the whole pipeline (and the fit's tile search) is exercised."""
    from dataclasses import replace

    from gpu_replay.calibrate import StepShape, predict_step
    from gpu_replay.step_calib import committed_coefficients
    from gpu_replay.step_fit import _Scorer, base_model

    base = base_model(model, "H100", tp)
    coeffs = committed_coefficients()
    cm = _Scorer(base, []).model(coeffs)
    cm = replace(cm, coefficients=replace(cm.coefficients, moe_tile_tokens=128.0))
    rng = random.Random(seed)

    def timer(phase: str, a: int, b: int) -> dict:
        t = predict_step(cm, StepShape(phase, a, b, {}))
        return {"total_s": t * (1.0 + rng.gauss(0.0, 0.01))}

    env = {"device": "cpu", "name": "dry-run (synthetic)", "driver": None, "torch": None, "cuda": None}
    return timer, env | {"host": platform.node()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")) / "steps.json")
    ap.add_argument("--repeats", type=int, default=None, help="default: step_calib.json's")
    ap.add_argument("--min-repeats", type=int, default=None, help="default: step_calib.json's")
    ap.add_argument("--budget-s", type=float, default=200.0, help="stop adding passes past this")
    ap.add_argument("--dry-run", action="store_true", help="CPU: synthetic times, no torch")
    args = ap.parse_args()
    split = json.loads((ROOT / "gpu_replay" / "calibration" / "split.json").read_text())
    config = json.loads((ROOT / "gpu_replay" / "calibration" / "step_calib.json").read_text())
    repeats = args.repeats or config["repeats"]
    min_repeats = min(repeats, args.min_repeats or config["min_repeats"])
    todo = shapes(split, config)
    t0 = time.perf_counter()
    make = synthetic_timer if args.dry_run else cuda_timer
    timer, env = make(split["model"], split["tp"])
    print(f"setup {time.perf_counter() - t0:.1f} s; {len(todo)} shapes; {env.get('name')}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"environment": env, "config": config, "date": time.strftime("%Y-%m-%d")}
    meta["command"] = "python benchmarks/gpu_step_calib.py " + " ".join(sys.argv[1:])

    def write(part: dict) -> dict:
        out = part | meta | {"wall_s": time.perf_counter() - t0}
        args.out.write_text(json.dumps(out, indent=1))
        return out

    res = write(
        measure(
            todo,
            timer,
            repeats,
            min_repeats,
            args.budget_s,
            log=lambda *a: print(*a, flush=True),
            on_pass=write,
        )
    )
    print(
        f"{len(res['rows'])} rows, {res['passes']} passes, {len(res['errors'])} errors, "
        f"wall {res['wall_s']:.1f} s"
    )


if __name__ == "__main__":
    main()
