"""Wall time of a 100-configuration ``kvplan sweep`` on each backend (issue 12, item 6).

Usage::

    python benchmarks/sweep_speed.py [--configs 100] [--limit N] [--backends j1,j2,dask1,dask2] [--out FILE]

Sweeps the Mooncake synthetic trace (../shared/traces/mooncake/synthetic_trace.jsonl) with
gpt-oss-120b on H200, TP 8, page 64 and the default scheduler loop over a grid of
``--swa-full-tokens-ratio`` (10 values, 0.1 to 1.0) times ``--max-total-tokens`` (10 values,
300k to 3M tokens): 100 configurations, each one ``run_config`` call. The same grid runs on
``-j 1`` (in this process), ``-j 2`` (two local worker processes), and a Dask LocalCluster with one
and with two workers, one after the other in this one process, each timed from the start of the
sweep (pool or cluster start-up included) to its last result, with no result store (the store
adds one small file write per configuration). ``--configs N`` (10, 20, ..., 100) keeps the first
N / 10 token caps (a quick check). Every backend must give the same results: the script checks it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT.parent / "shared" / "traces" / "mooncake" / "synthetic_trace.jsonl"
GRID = ("swa-full-tokens-ratio=0.1:1.0:0.1", "max-total-tokens=300000:3000000:300000")
BACKENDS = {"j1": (1, None), "j2": (2, None), "dask1": (1, "local"), "dask2": (2, "local")}


def sweep_once(trace, spec, backend_name: str) -> tuple[float, list[str]]:
    """(wall seconds, the points as JSON) of one sweep on one backend."""
    from simulator.planner import make_backend, run_sweep

    jobs, dask = BACKENDS[backend_name]
    records: list[dict] = []
    start = time.perf_counter()
    run_sweep(trace, spec, backend=make_backend(jobs, dask), on_point=records.append)
    return time.perf_counter() - start, [json.dumps(r) for r in records]


def build_spec(configs: int):
    """The benchmark's grid: 10 SWA ratios times the first ``configs // 10`` token caps."""
    import dataclasses

    from simulator.engine.config import SimConfig
    from simulator.planner import SweepSpec, parse_axis

    if configs % 10 or not 10 <= configs <= 100:
        raise SystemExit("--configs must be 10, 20, ..., 100")
    swa, caps = (parse_axis(g) for g in GRID)
    caps = dataclasses.replace(caps, values=caps.values[: configs // 10])
    return SweepSpec(SimConfig(model="gpt-oss-120b", gpu="H200", tp=8, page_size=64), (caps, swa))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", type=int, default=100)
    ap.add_argument("--limit", type=int, default=None, help="serve only the first N requests")
    ap.add_argument("--backends", default="j1,j2,dask1,dask2")
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--out", type=Path, default=None, help="also write the results as JSON here")
    args = ap.parse_args()

    from simulator.provenance import provenance
    from traces import load_trace

    trace = load_trace(args.trace)
    if args.limit is not None:
        trace = trace.head(args.limit)
    spec = build_spec(args.configs)
    n = 1
    for axis in spec.axes:
        n *= len(axis.values)
    print(f"{n} configurations of {args.trace.name} ({len(trace)} requests); "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
    results, reference = {}, None
    for name in args.backends.split(","):
        wall, points = sweep_once(trace, spec, name)
        same = reference is None or points == reference
        reference = points if reference is None else reference
        results[name] = {"wall_s": wall, "configs_per_s": n / wall, "same_results": same}
        print(f"{name:6s} {wall:8.1f} s  {n / wall:6.2f} configs/s  same results: {same}", flush=True)
        if not same:
            sys.exit(f"{name} gave other results than {args.backends.split(',')[0]}")
    if args.out is not None:
        facts = dict(
            configs=n,
            requests=len(trace),
            python=platform.python_version(),
            cpus=os.cpu_count(),
            load_after=os.getloadavg(),
            provenance=provenance(trace),
        )
        args.out.write_text(json.dumps({"facts": facts, "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
