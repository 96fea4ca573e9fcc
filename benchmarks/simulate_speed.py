"""Simulated requests per second of ``kvplan run`` (issue 4, item 6).

Usage::

    python benchmarks/simulate_speed.py [--repeat 5] [--out FILE]
    python benchmarks/simulate_speed.py --against DIR [--rounds 3]   # side by side
    python benchmarks/simulate_speed.py --against DIR --median --rounds 5   # median of 5 interleaved
    python benchmarks/simulate_speed.py --loops --rounds 3   # overlap loop against plain loop

Times the whole run after start-up, as ``kvplan run`` does it: reading the trace, SGLang's pool
sizing, the cost model, the server, the clients, the metrics recorder and its summary, for
gpt-oss-120b on H200, TP 8, page 64, on the Mooncake synthetic trace and the Mooncake arXiv head,
on one core (CPU time, best of ``--repeat`` runs). Also runs each trace once with fast-forward
off (one simulated step per Python iteration) for reference.

``--against DIR`` times another checkout of kvplan (e.g. a ``git worktree`` of an older commit)
against this one, alternating child processes round by round, so that both see the same machine:
on a shared VM the speed drifts by 10% or more over minutes, and only side-by-side numbers
compare. ``--median`` makes each child time one run and reports the median over the rounds
instead of the best (issue 8's acceptance: median of 5 interleaved runs each). ``--warmup``
makes each child run once untimed first: a checkout that imports modules on first use (lazy
imports) would otherwise pay its imports inside the timed run.

``--whole-process`` (issue 14) times what a user waits for instead: one ``kvplan run`` child process
per run (start-up, imports, trace reading, the run and the summary), the median of ``--rounds``
interleaved rounds, with ``--against DIR`` side by side (``benchmarks/whole_process.py``)::

    python benchmarks/simulate_speed.py --whole-process --against DIR --rounds 5 \
        --trace "Azure conv=../shared/traces/azure/AzureLLMInferenceTrace_conv.csv"
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "traces" / "mooncake"
TRACES = [
    ("Mooncake synthetic", SHARED / "synthetic_trace.jsonl"),
    ("Mooncake arXiv head (1000)", SHARED / "arxiv_trace_head1000.jsonl"),
]
CONFIG = dict(model="gpt-oss-120b", gpu="H200", tp=8, page_size=64)
# --loops: the scheduler loop a child times (KVPLAN_BENCH_LOOP); unset: the checkout's default
LOOPS = {"plain": dict(disable_overlap_schedule=True), "overlap": dict(disable_overlap_schedule=False)}


def run_once(path: Path, fast_forward: bool = True) -> tuple[float, float, dict]:
    """(CPU seconds, wall seconds, facts) of one run. CPU time (``time.process_time``) is the
    work done on our one core, without the time the VM's CPU was taken away."""
    from simulator.engine.config import SimConfig
    from simulator.engine.metrics import Recorder
    from simulator.engine.simulate import simulate
    from traces import load_trace

    w0, c0 = time.perf_counter(), time.process_time()
    trace = load_trace(path)
    cfg = SimConfig(
        **CONFIG, **LOOPS.get(os.environ.get("KVPLAN_BENCH_LOOP", ""), {}), fast_forward=fast_forward
    )
    rec = Recorder.from_config(cfg)
    server = simulate(trace, cfg, rec)
    summary = rec.summary()
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    steps = getattr(server, "forward_ct", None)
    if steps is None:  # after issue 8 the run's counters carry it
        steps = rec.counters.get("forward_ct", -1)
    facts = dict(requests=len(trace), forward_steps=steps, cache_hit_rate=summary["cache_hit_rate"])
    return cpu, wall, facts


def best_of(path: Path, repeat: int) -> dict:
    runs = [run_once(path) for _ in range(repeat)]
    cpu, wall, facts = min(runs, key=lambda r: r[0])
    return dict(cpu=cpu, wall=wall, **facts)


def child(checkout: str, path: str, repeat: int) -> None:
    """Time ``checkout``'s kvplan (imported from that directory) and print one JSON line."""
    sys.path.insert(0, checkout)
    if os.environ.get("KVPLAN_BENCH_WARMUP") == "1":
        run_once(Path(path))  # untimed: first-use imports and preset loading are start-up
    print(json.dumps(best_of(Path(path), repeat)))


def _pick(runs: list[dict], median: bool) -> dict:
    """The median run by CPU time (upper median for an even count), or the fastest."""
    ordered = sorted(runs, key=lambda r: r["cpu"])
    return ordered[len(ordered) // 2] if median else ordered[0]


def side_by_side(
    other: Path | None, rounds: int, repeat: int, median: bool = False, warmup: bool = False
) -> str:
    """``other`` against this checkout; None: this checkout's overlap loop against its plain loop."""
    how = f"median of {rounds} interleaved runs" if median else f"{rounds} rounds x best of {repeat}"
    if other is None:
        entries = [("this", ROOT, "overlap"), ("against", ROOT, "plain")]
    else:
        entries = [("this", ROOT, ""), ("against", other, "")]
    if warmup:
        how += ", each after one untimed run"
        os.environ["KVPLAN_BENCH_WARMUP"] = "1"
    rows = [
        f"| trace | checkout | CPU s ({how}) | simulated requests/s |",
        "|---|---|---|---|",
    ]
    for name, path in TRACES:
        if not path.exists():
            print(f"skip {name}: {path} missing", file=sys.stderr)
            continue
        runs: dict[str, list[dict]] = {"this": [], "against": []}
        for _ in range(rounds):
            for label, checkout, loop in entries:
                n = 1 if median else repeat
                cmd = [sys.executable, __file__, "--child", str(checkout), str(path), str(n)]
                env = {**os.environ, "KVPLAN_BENCH_LOOP": loop}
                out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
                runs[label].append(json.loads(out.strip().splitlines()[-1]))
        best = {label: _pick(rs, median) for label, rs in runs.items()}
        for label, checkout, loop in entries:
            r = best[label]
            rate = r["requests"] / r["cpu"]
            what = f"{loop} loop" if loop else f"{label} ({checkout})"
            rows.append(f"| {name} | {what} | {r['cpu']:.3f} | {rate:,.0f} |")
            print(rows[-1], flush=True)
        ratio = best["against"]["cpu"] / best["this"]["cpu"]
        rows.append(f"| {name} | {'overlap / plain' if other is None else 'speed-up'} | | **{ratio:.3f}x** |")
        print(rows[-1], flush=True)
    return "\n".join(rows)


def whole_process_table(args: argparse.Namespace) -> str:
    """``--whole-process``: this checkout (and ``--against``) timed as child ``kvplan run`` processes."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from whole_process import table

    traces = [(name, path, []) for name, path in TRACES]
    if args.trace:
        traces = [(t.split("=", 1)[0], Path(t.split("=", 1)[1]), []) for t in args.trace]
    checkouts = {"this": ROOT}
    if args.against:
        checkouts["against"] = args.against.resolve()
    return table(traces, checkouts, args.rounds)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--against", type=Path, default=None, help="another kvplan checkout to compare with")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--loops",
        action="store_true",
        help="this checkout's overlap loop against its plain loop, side by side (overlap speed / plain)",
    )
    ap.add_argument("--median", action="store_true", help="with --against: median of one-run rounds")
    ap.add_argument(
        "--warmup",
        action="store_true",
        help="with --against: each child runs once untimed first, so modules a checkout imports on "
        "first use and preset loading count as start-up, not as the run",
    )
    ap.add_argument(
        "--whole-process",
        action="store_true",
        help="one `kvplan run` child process per run (start-up and trace reading included), "
        "median of --rounds",
    )
    ap.add_argument(
        "--trace",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="with --whole-process: time this trace instead of the defaults (repeatable)",
    )
    ap.add_argument("--child", nargs=3, metavar=("CHECKOUT", "TRACE", "REPEAT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]))
        return
    if args.whole_process:
        text = whole_process_table(args)
    elif args.against or args.loops:
        other = args.against.resolve() if args.against else None
        text = side_by_side(other, args.rounds, args.repeat, args.median, args.warmup)
    else:
        sys.path.insert(0, str(ROOT))
        rows = [
            f"| trace | requests | simulated forward steps | CPU s (best of {args.repeat}) | wall s "
            "| simulated requests/s (CPU) | fast-forward off: CPU s | req/s | cache hit rate |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for name, path in TRACES:
            if not path.exists():
                print(f"skip {name}: {path} missing", file=sys.stderr)
                continue
            r = best_of(path, args.repeat)
            slow, _, _ = run_once(path, fast_forward=False)
            n = r["requests"]
            rows.append(
                f"| {name} | {n} | {r['forward_steps']:,} | {r['cpu']:.3f} | {r['wall']:.3f} | "
                f"**{n / r['cpu']:,.0f}** | {slow:.2f} | {n / slow:,.0f} | {r['cache_hit_rate']:.4f} |"
            )
            print(rows[-1], flush=True)
        text = "\n".join(rows)
    text += (
        f"\n\nMachine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs (one used), "
        f"Python {platform.python_version()}. Command: `python benchmarks/simulate_speed.py "
        f"{' '.join(a for a in sys.argv[1:])}`.\n"
    )
    if args.out:
        tmp = args.out.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(args.out)
    print(text)


if __name__ == "__main__":
    main()
