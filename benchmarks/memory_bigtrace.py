"""Peak memory and wall time of ``kvplan run`` and ``kvplan cache-replay`` on a big Mooncake trace.

Usage::

    .venv/bin/python benchmarks/memory_bigtrace.py [--requests 1000000] [--seed 0]
        [--max-blocks 240] [--keep DIR] [--checkout DIR] [--commands run,cache-replay]

The trace is ``trace_stats_bigfile.generate``'s (deterministic for a seed), with every prompt
capped at ``--max-blocks`` 512-token blocks: 240 blocks (122,880 tokens) plus the longest output
(4,096) stays below gpt-oss-120b's context of 131,072, so no request is rejected. Each command runs
as a child process (``python -m simulator.cli.main`` of ``--checkout``, default this one); its
peak RSS is the child's own ``ru_maxrss`` from ``os.wait4``, and its wall time is measured here.

``run`` serves it on gpt-oss-120b, H200, TP 8, page 64; ``cache-replay`` replays it at page 64
with its default pools. One JSON object is printed with the file's facts and, per command, the
command line, peak RSS (MiB), wall time (s), exit status and the headline result.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trace_stats_bigfile import generate  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RUN_FLAGS = ["--model", "gpt-oss-120b", "--gpu", "H200", "--tp", "8", "--page-size", "64"]


def command(name: str, trace: Path) -> list[str]:
    """The kvplan arguments of one measured command."""
    if name == "run":
        return ["run", "--trace", str(trace), *RUN_FLAGS, "--json", "--no-progress"]
    if name == "cache-replay":
        return ["cache-replay", str(trace), "--page-size", "64"]
    raise SystemExit(f"unknown command {name!r} (run, cache-replay)")


def measure(args: list[str], checkout: Path) -> dict:
    """Run ``kvplan ARGS`` from ``checkout`` as a child; its peak RSS, wall time and output."""
    extra = os.environ.get("PYTHONPATH")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(checkout), *([extra] if extra else [])]))
    cmd = [sys.executable, "-m", "simulator.cli.main", *args]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=checkout, env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    return {
        "command": " ".join(["kvplan", *args]),
        "exit_status": os.waitstatus_to_exitcode(status),
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
        "wall_s": round(wall, 1),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
        "result": headline(args[0], stdout) if stdout else stderr.strip()[-500:],
    }


def headline(name: str, stdout: str) -> dict | str:
    """The numbers that show the run served everything (and what it found)."""
    if name == "run":
        s = json.loads(stdout)
        keys = ("requests", "requests_submitted", "aborted", "rejected", "failed", "unfinished")
        keys += ("cache_hit_rate", "duration_s", "decode_steps", "prefill_batches")
        return {k: s.get(k) for k in keys}
    lines = [ln for ln in stdout.splitlines() if "requests" in ln or "hit rate" in ln or "aborted" in ln]
    return " | ".join(" ".join(ln.replace("│", " ").split()) for ln in lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-blocks", type=int, default=240, help="prompt cap in 512-token blocks")
    ap.add_argument("--keep", type=Path, default=None, help="write (or reuse) the trace in this directory")
    ap.add_argument("--checkout", type=Path, default=ROOT, help="the kvplan checkout to measure")
    ap.add_argument("--commands", default="run,cache-replay")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"mooncake_{args.requests}_s{args.seed}_b{args.max_blocks}.jsonl"
        t0 = time.perf_counter()
        facts = {"requests": args.requests, "seed": args.seed, "max_blocks": args.max_blocks}
        if not path.exists():
            facts.update(generate(path, args.requests, args.seed, args.max_blocks))
        facts.update(bytes=path.stat().st_size, generate_s=round(time.perf_counter() - t0, 1))
        report = {"file": facts, "checkout": str(args.checkout.resolve()), "commands": []}
        for name in filter(None, args.commands.split(",")):
            report["commands"].append(measure(command(name, path), args.checkout.resolve()))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
