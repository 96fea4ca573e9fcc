"""Whole-process speed of ``kvplan run`` (issue 14, item 4): one child process per run.

What a user waits for: interpreter start-up, imports, reading the trace, the run, the summary and
its printing. Each run is ``python -m simulator.cli.main run --trace T <CONFIG> --json`` in a child
process whose working directory (and ``PYTHONPATH``) is the checkout under test, so the same Python
environment times two checkouts side by side. The child's CPU time comes from
``getrusage(RUSAGE_CHILDREN)`` (user + system), so time the VM's CPU was taken away by neighbours
does not count; wall time is reported next to it. Bytecode is cached as for a user's install, but
outside the checkouts (``PYTHONPYCACHEPREFIX``, one directory per checkout, filled by one untimed
run first), so a read-only checkout is not timed compiling its sources.

Rounds interleave the checkouts (A B, then B A, ...), so machine drift hits both equally; the
figure per checkout is the median over the rounds. Used by ``simulate_speed.py --whole-process``.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONFIG_ARGS = ["--model", "gpt-oss-120b", "--gpu", "H200", "--tp", "8", "--page-size", "64"]


def run_child(checkout: Path, trace: Path, extra: list[str] | None = None) -> dict:
    """One ``kvplan run`` in a child process: its CPU and wall seconds and the request count."""
    cmd = [sys.executable, "-m", "simulator.cli.main", "run", "--trace", str(trace), *CONFIG_ARGS]
    # a run with failed requests still counts (it exits 3 by default): speed, not a verdict
    cmd += [*(extra or []), "--max-abort-fraction", "1", "--json", "--no-progress"]
    cache = (
        Path(tempfile.gettempdir()) / "kvplan-pycache" / str(checkout.resolve()).strip("/").replace("/", "+")
    )
    env = dict(os.environ, PYTHONPATH=str(checkout), PYTHONPYCACHEPREFIX=str(cache))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=checkout, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} in {checkout} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    summary = json.loads(proc.stdout)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return dict(
        cpu=cpu, wall=wall, requests=int(summary["requests"]), cache_hit_rate=summary["cache_hit_rate"]
    )


def interleaved(checkouts: dict[str, Path], trace: Path, rounds: int, extra: list[str] | None = None) -> dict:
    """``rounds`` runs per checkout, alternating the order each round; the median run of each."""
    runs: dict[str, list[dict]] = {label: [] for label in checkouts}
    labels = list(checkouts)
    for label in labels:  # untimed: fills the bytecode cache and the page cache with the trace
        run_child(checkouts[label], trace, extra)
    for r in range(rounds):
        for label in labels if r % 2 == 0 else labels[::-1]:
            runs[label].append(run_child(checkouts[label], trace, extra))
    out = {}
    for label, rs in runs.items():
        cpu = statistics.median(x["cpu"] for x in rs)
        wall = statistics.median(x["wall"] for x in rs)
        hit = {x["cache_hit_rate"] for x in rs}
        out[label] = dict(cpu=cpu, wall=wall, requests=rs[0]["requests"], cache_hit_rate=sorted(hit))
    return out


def table(traces: list[tuple[str, Path, list[str]]], checkouts: dict[str, Path], rounds: int) -> str:
    """A markdown table: per trace and checkout, median CPU and wall seconds and requests/s."""
    rows = [
        f"| trace | checkout | CPU s (median of {rounds}, interleaved) | wall s | requests/s (CPU) "
        "| requests/s (wall) | cache hit rate |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, path, extra in traces:
        if not path.exists():
            print(f"skip {name}: {path} missing", file=sys.stderr)
            continue
        res = interleaved(checkouts, path, rounds, extra)
        for label, r in res.items():
            n = r["requests"]
            hit = "/".join(f"{h:.4f}" for h in r["cache_hit_rate"])
            rows.append(
                f"| {name} | {label} ({checkouts[label]}) | {r['cpu']:.3f} | {r['wall']:.3f} "
                f"| **{n / r['cpu']:,.0f}** | {n / r['wall']:,.0f} | {hit} |"
            )
            print(rows[-1], flush=True)
        if len(res) == 2:
            this, other = (res[label]["cpu"] for label in checkouts)
            rows.append(f"| {name} | speed-up (CPU) | | | **{other / this:.3f}x** | | |")
            print(rows[-1], flush=True)
    return "\n".join(rows)
