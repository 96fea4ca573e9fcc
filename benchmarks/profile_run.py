"""Where the whole ``kvplan run`` process spends its time (issue 14, item 1).

Usage::

    python benchmarks/profile_run.py TRACE [--top 15] [--prof FILE] [-- extra kvplan run options]
    python benchmarks/profile_run.py --generate 12000 --seed 0   # the Mooncake-format generator

Runs ``kvplan run --trace TRACE`` (gpt-oss-120b, H200, TP 8, page 64, the default scheduler loop)
in a child process under cProfile, from interpreter start to the printed summary, then prints the
phases (imports, reading the trace, the simulation, the report) and the functions with the most
time of their own. ``--generate N`` first writes N requests of ``trace_stats_bigfile.generate``
(multi-turn Mooncake format, arrivals spread over one hour at N = 12,000: rate N / 3600 per second,
the same rate for any N) to a temporary file. cProfile roughly doubles the run's time and weighs
small Python functions more than C calls, so read the shares, not the seconds.
"""

from __future__ import annotations

import argparse
import os
import pstats
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from whole_process import CONFIG_ARGS  # noqa: E402

#: (label, function name, file suffix) of the phases, by cumulative time.
PHASES = (
    ("imports", "_find_and_load", "<frozen importlib._bootstrap>"),
    ("read the trace", "load_trace", "traces/load.py"),
    ("simulate", "simulate", "simulator/engine/simulate.py"),
    ("run_config", "run_config", "simulator/run.py"),
)


def profile(trace: Path, prof: Path, extra: list[str]) -> None:
    cmd = [sys.executable, "-m", "cProfile", "-o", str(prof), "-m", "simulator.cli.main", "run"]
    cmd += [
        "--trace",
        str(trace),
        *CONFIG_ARGS,
        *extra,
        "--max-abort-fraction",
        "1",
        "--json",
        "--no-progress",
    ]
    # Bytecode cached as for a user's install: with PYTHONDONTWRITEBYTECODE set, every run would
    # profile compiling the project's sources (`builtins.compile` at the top of the own-time
    # list), which no user pays. The site-packages already hold theirs.
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    compile_all = [sys.executable, "-m", "compileall", "-q", "simulator", "traces", "policies"]
    subprocess.run(compile_all, check=True, stdout=subprocess.DEVNULL, cwd=HERE.parent, env=env)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=HERE.parent, env=env)


def report(prof: Path, top: int) -> str:
    stats = pstats.Stats(str(prof)).stats  # type: ignore[attr-defined]
    total = max(v[3] for v in stats.values())

    def cum(fn: str, suffix: str) -> float:
        return max([v[3] for k, v in stats.items() if k[2] == fn and k[0].endswith(suffix)] or [0.0])

    phase = {label: cum(fn, suffix) for label, fn, suffix in PHASES}
    phase["pool sizing and report"] = phase.pop("run_config") - phase["simulate"]
    calls = sum(v[1] for v in stats.values())
    lines = [f"total {total:.2f} s under cProfile, {calls / 1e6:.1f}M calls"]
    lines += [f"  {label}: {t:.2f} s ({t / total:.0%})" for label, t in phase.items()]
    lines.append(f"  top {top} by own time:")
    for (path, line, fn), v in sorted(stats.items(), key=lambda kv: -kv[1][2])[:top]:
        where = path.replace(str(HERE.parent) + "/", "")
        lines.append(f"    {v[2]:7.2f} s own {v[3]:7.2f} s cum {v[1]:>9,d} calls  {where}:{line}({fn})")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", type=Path)
    ap.add_argument("--generate", type=int, default=None, metavar="N", help="profile N generated requests")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--prof", type=Path, default=None, help="keep the cProfile output here")
    ap.add_argument("extra", nargs="*", help="more `kvplan run` options (after --)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trace = args.trace
        if args.generate:
            from trace_stats_bigfile import generate

            trace = Path(tmp) / f"mooncake_gen{args.generate}.jsonl"
            generate(trace, args.generate, args.seed, rate=12_000 / 3600)
        if trace is None:
            ap.error("give a TRACE or --generate N")
        prof = args.prof or Path(tmp) / "run.prof"
        profile(trace, prof, args.extra)
        print(report(prof, args.top))


if __name__ == "__main__":
    main()
