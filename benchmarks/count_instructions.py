"""Instructions one simulation executes, counted by valgrind (a drift-free cross-check).

Usage: python benchmarks/count_instructions.py [--trace NAME] [CHECKOUT ...]

On a shared VM the CPU time of the same run moves by 10% or more over minutes. The number of
machine instructions does not: this runs :func:`simulate_speed.run_once` (trace read to summary)
under ``valgrind --tool=callgrind`` once with zero runs and once with one run, per checkout, and
prints the difference. Instructions are not time (cache misses are not counted), but a change
that removes work shows up here without noise. Needs valgrind; takes about a minute per checkout.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEED = ROOT / "benchmarks" / "simulate_speed.py"

CHILD = """
import sys, importlib.util
from pathlib import Path
checkout, trace, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, checkout)
spec = importlib.util.spec_from_file_location("simulate_speed", {speed!r})
speed = importlib.util.module_from_spec(spec)
spec.loader.exec_module(speed)
import simulator.engine.simulate, simulator.engine.metrics, traces  # imports outside the count
for _ in range(runs):
    speed.run_once(Path(trace))
"""


def instructions(checkout: Path, trace: Path, runs: int) -> int:
    cmd = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        "-c",
        CHILD.format(speed=str(SPEED)),
        str(checkout),
        str(trace),
        str(runs),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
    match = re.search(r"Collected : (\d+)", out)
    if match is None:
        raise RuntimeError(f"no instruction count in valgrind's output:\n{out[-2000:]}")
    return int(match.group(1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("checkouts", nargs="*", type=Path, default=[ROOT])
    ap.add_argument(
        "--trace",
        default="synthetic_trace",
        help="a trace in ../shared/traces/mooncake, or a JSONL file's path",
    )
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed")
    trace = Path(args.trace)
    if not trace.is_file():
        trace = ROOT.parent / "shared" / "traces" / "mooncake" / f"{args.trace}.jsonl"
    for checkout in args.checkouts:
        one = instructions(checkout.resolve(), trace, 1) - instructions(checkout.resolve(), trace, 0)
        print(f"{checkout}: {one / 1e6:,.0f} M instructions for one run of {args.trace}", flush=True)


if __name__ == "__main__":
    main()
