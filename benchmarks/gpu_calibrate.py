"""Measurements for the calibration (issue 13, item 5), in one device call.

Reads gpu_replay/calibration/split.json (fixed before any fit) and measures, on one GPU:
- step shapes (fit and held-out): each operator of one TP rank with the preset's real shapes
  (benchmarks/gpu_step_time.py's operators: qkv/o projections, attention with the window on SWA
  layers, the MoE with its expert count and top-k as a grouped GEMM, the LM head);
- op logs (fit and held-out): ``kvplan gpu-replay`` on CUDA with HiCache write_back of the
  evictions, for each transfer implementation named, one warm-up replay first;
writing $OUT/calibrate/steps.json, $OUT/calibrate/replay/<log>-<impl>.{csv,json} and a log.
gpu_replay/calibrate.py fits the profiles from them on the CPU.

    python benchmarks/gpu_calibrate.py --out $OUT/calibrate
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import types
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))


def _stub_traces_if_missing() -> None:
    """The device machine may lack the trace readers' dependencies (pandas, pyarrow); the replay
    needs only ``traces.output.umask_mode`` from that package."""
    try:
        import traces.output  # noqa: F401
    except ImportError:
        pkg = types.ModuleType("traces")
        pkg.__path__ = []
        out = types.ModuleType("traces.output")

        def umask_mode() -> int:
            mask = os.umask(0)
            os.umask(mask)
            return 0o666 & ~mask

        out.umask_mode = umask_mode
        sys.modules["traces"], sys.modules["traces.output"] = pkg, out


_stub_traces_if_missing()

import torch  # noqa: E402

IMPLS = {  # name -> (io_backend, impl, layout)
    "cuda": ("kernel", "cuda", "layer_first"),
    "cxx_batch": ("direct", "cxx_batch", "page_first_direct"),
    "triton": ("kernel", "triton", "page_first"),
}


def measure_steps(split: dict, out: Path) -> None:
    import gpu_step_time as st

    r = st.RankShapes(split["model"], split["tp"])
    ops = st.Ops(r)
    res: dict = {"shapes": dict(vars(r), spec=None), "rows": [], "errors": []}
    # warm up cuBLAS / SDPA / grouped GEMM once
    st.step(ops, r, 512, ops.attn_prefill(512, 0), ops.attn_prefill_swa(512), 1)
    for part in ("fit", "heldout"):
        for phase in ("prefill", "decode"):
            for a, b in split["step_shapes"][part][phase]:
                try:
                    if phase == "prefill":
                        row = st.step(ops, r, a, ops.attn_prefill(a, b), ops.attn_prefill_swa(a), 1)
                    else:
                        swa_ctx = min(b, r.window + 1) if r.window else b
                        row = st.step(ops, r, a, ops.attn_decode(a, b), ops.attn_decode(a, swa_ctx), a)
                        try:
                            row |= st.decode_graph_step(ops, r, a, b)
                        except Exception as exc:  # noqa: BLE001 - the eager row still counts
                            res["errors"].append(f"graph {a}/{b}: {type(exc).__name__}: {exc}")
                    res["rows"].append({"set": part, "phase": phase, "a": a, "b": b} | row)
                    graph = f" graph {1e3 * row['step_graph_s']:9.3f} ms" if "step_graph_s" in row else ""
                    print(
                        f"{part:7s} {phase:7s} {a:6d} {b:6d}: {1e3 * row['step_s']:9.3f} ms{graph}",
                        flush=True,
                    )
                except Exception as exc:  # noqa: BLE001 - record and go on
                    res["errors"].append(f"{part} {phase} {a}/{b}: {type(exc).__name__}: {exc}")
                torch.cuda.empty_cache()
    res["grouped"] = ops.grouped
    (out / "steps.json").write_text(json.dumps(res, indent=1))


def replay_logs(split: dict, impls: list[str], out: Path) -> None:
    from gpu_replay.oplog_replay import OpLogReplay, ReplayOptions
    from gpu_replay.replay_report import summarize, write_json, write_table
    from simulator.oplog import read_op_log

    base = ROOT / "gpu_replay" / "calibration"
    (out / "replay").mkdir(parents=True, exist_ok=True)
    for name in impls:
        backend, impl, layout = IMPLS[name]
        opts = ReplayOptions(device="cuda", io_backend=backend, impl=impl, layout=layout, write_back=True)
        for i, rel in enumerate(
            [split["oplogs"]["fit"][0], *split["oplogs"]["fit"], *split["oplogs"]["heldout"]]
        ):
            log = read_op_log(base / rel)
            t0 = time.perf_counter()
            # the warm-up replay also checks page state and data every 20 page-changing steps
            replay = OpLogReplay(log, replace(opts, verify="every", check_every=20) if i == 0 else opts)
            try:
                rows = replay.run()
            finally:
                replay.release()
            s = summarize(replay, rows, time.perf_counter() - t0)
            print(
                f"checks {replay.checks:4d} {name:9s} {Path(rel).stem:30s} {'warmup' if i == 0 else '':6s} "
                f"write {s['write_gbps'] or 0:7.1f} GB/s backup {s['backup_gbps'] or 0:6.1f} GB/s "
                f"({s['backup_pages']} pages) wall {s['wall_s']:.1f} s",
                flush=True,
            )
            if i == 0:
                continue
            stem = f"{Path(rel).stem}-{name}"
            write_table(out / "replay" / f"{stem}.csv", rows)
            write_json(out / "replay" / f"{stem}.json", s)
            del replay
            torch.cuda.empty_cache()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "calibrate"))
    ap.add_argument("--impls", default="cuda,cxx_batch")
    ap.add_argument("--skip-steps", action="store_true")
    ap.add_argument("--skip-replay", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    split = json.loads((ROOT / "gpu_replay" / "calibration" / "split.json").read_text())
    t0 = time.perf_counter()
    if not args.skip_replay:
        replay_logs(split, args.impls.split(","), out)
    if not args.skip_steps:
        measure_steps(split, out)
    print(f"wall {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
