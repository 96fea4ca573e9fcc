"""Simulated requests per second of ``kvplan run`` (issue 4, item 6).

Usage: python benchmarks/simulate_speed.py [--repeat 3] [--out docs/benchmarks-simulate.md]

Runs the whole simulation (trace pages, pool sizing, cost model, server, clients, metrics
recorder) for gpt-oss-120b on H200, TP 8, page 64, on the Mooncake synthetic trace and the
Mooncake arXiv head, on one core, and reports the best of ``--repeat`` runs. Also runs each
trace once with fast-forward off (one simulated step per Python iteration) for reference.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulator.engine.config import SimConfig  # noqa: E402
from simulator.engine.metrics import Recorder  # noqa: E402
from simulator.engine.simulate import simulate  # noqa: E402
from traces import load_trace  # noqa: E402

SHARED = ROOT.parent / "shared" / "traces" / "mooncake"
TRACES = [
    ("Mooncake synthetic", SHARED / "synthetic_trace.jsonl"),
    ("Mooncake arXiv head (1000)", SHARED / "arxiv_trace_head1000.jsonl"),
]


def run_once(trace, cfg: SimConfig) -> tuple[float, dict]:
    """CPU seconds of one run (``time.process_time``: the work done on our one core, without
    time the VM's CPU was taken away, which makes wall time noisy here), plus wall seconds."""
    w0, c0 = time.perf_counter(), time.process_time()
    rec = Recorder.from_config(cfg)
    server = simulate(trace, cfg, rec)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    return cpu, dict(
        wall=wall, summary=rec.summary(), forward_steps=server.forward_ct, decode_steps=server.decode_steps
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    rows = [
        f"| trace | requests | simulated forward steps | CPU s (best of {args.repeat}) | wall s "
        "| simulated requests/s (CPU) | fast-forward off: CPU s | req/s | cache hit rate |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, path in TRACES:
        if not path.exists():
            print(f"skip {name}: {path} missing", file=sys.stderr)
            continue
        trace = load_trace(path)
        cfg = SimConfig(model="gpt-oss-120b", gpu="H200", tp=8, page_size=64)
        best, info = min((run_once(trace, cfg) for _ in range(args.repeat)), key=lambda x: x[0])
        slow, _ = run_once(
            trace, SimConfig(model="gpt-oss-120b", gpu="H200", tp=8, page_size=64, fast_forward=False)
        )
        n = len(trace)
        rows.append(
            f"| {name} | {n} | {info['forward_steps']:,} | {best:.3f} | {info['wall']:.3f} | "
            f"**{n / best:,.0f}** | {slow:.2f} | {n / slow:,.0f} | {info['summary']['cache_hit_rate']:.4f} |"
        )
        print(rows[-1], flush=True)
    footer = (
        f"\n\nMachine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs (one used), "
        f"Python {platform.python_version()}. "
        f"Command: `python benchmarks/simulate_speed.py --repeat {args.repeat}`.\n"
    )
    text = "\n".join(rows) + footer
    if args.out:
        tmp = args.out.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(args.out)
    print(text)


if __name__ == "__main__":
    main()
