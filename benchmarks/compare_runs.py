"""Do two checkouts of kvplan simulate the same runs, bit for bit?

Usage: python benchmarks/compare_runs.py OTHER_CHECKOUT [THIS_CHECKOUT]

For work on the hot path, and refactors, that must not change a single result. Runs twelve
configurations in each checkout, in child processes: both Mooncake traces at the benchmark's
settings, a small pool that evicts inside decode jumps, page 16 with ``window`` decode eviction,
page 1 with ``iteration`` eviction on the legacy tree, seed 000's bench_multiturn closed loop,
the overlap scheduler loop (a small pool, and both Mooncake traces at the benchmark's settings),
LPM scheduling under a queue, a small chunked-prefill size, and a bench_multiturn closed loop
with heavy retraction (25 retractions). Compares every frame column, the summary and the
counters exactly (NaN equals NaN); exits 1 and lists the first differences if any.

When a refactor moves an entry point, the child imports it with a fallback, so that a checkout
from before the refactor and one from after it can still be compared.
"""

from __future__ import annotations

import math
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MOONCAKE = ROOT.parent / "shared" / "traces" / "mooncake"
BASE = dict(model="gpt-oss-120b", gpu="H200", tp=8)
CASES = [
    ("synthetic", "synthetic_trace.jsonl", dict(BASE, page_size=64)),
    ("arxiv", "arxiv_trace_head1000.jsonl", dict(BASE, page_size=64)),
    ("synthetic, small pool", "synthetic_trace.jsonl", dict(BASE, page_size=64, max_total_tokens=300_000)),
    (
        "synthetic, window eviction",
        "synthetic_trace.jsonl",
        dict(BASE, page_size=16, swa_eviction="window", max_total_tokens=600_000),
    ),
    (
        "arxiv, legacy tree",
        "arxiv_trace_head1000.jsonl",
        dict(BASE, page_size=1, swa_eviction="iteration", tombstone="legacy", max_total_tokens=400_000),
    ),
    # the bench_multiturn closed loop of seed 000 (PR 17220), after the PR: legacy tree, window eviction
    ("seed 000 closed loop", "seed_000", dict(swa_eviction="window")),
    (
        "arxiv, overlap loop",
        "arxiv_trace_head1000.jsonl",
        dict(BASE, page_size=64, disable_overlap_schedule=False, max_total_tokens=400_000),
    ),
    # the overlap loop at the benchmark's settings (benchmarks/simulate_speed.py --loops)
    (
        "synthetic, overlap loop",
        "synthetic_trace.jsonl",
        dict(BASE, page_size=64, disable_overlap_schedule=False),
    ),
    (
        "arxiv, overlap loop, big pool",
        "arxiv_trace_head1000.jsonl",
        dict(BASE, page_size=64, disable_overlap_schedule=False),
    ),
    (
        "arxiv, LPM under a queue",
        "arxiv_trace_head1000.jsonl",
        dict(BASE, page_size=64, schedule_policy="lpm", max_total_tokens=500_000, time_scale=0.3),
    ),
    (
        "arxiv, chunk 1024",
        "arxiv_trace_head1000.jsonl",
        dict(BASE, page_size=16, chunked_prefill_size=1024, max_total_tokens=500_000),
    ),
    # 32 clients x 3 rounds of 500 + 2000 tokens on a 40k-token pool, stopping at EOS: admission
    # reserves by new_token_ratio, so decode outgrows the pool and retracts (25 retractions)
    (
        "closed loop, heavy retraction",
        "bench:"
        + repr(
            dict(
                num_clients=32,
                max_parallel=32,
                request_length=500,
                output_length=2000,
                num_rounds=3,
                request_rate=100,
                seed=3,
            )
        ),
        dict(BASE, page_size=16, max_total_tokens=40_000, seed=3, ignore_eos=False),
    ),
]

CHILD = """
import pickle, sys
checkout, out = sys.argv[1], sys.argv[2]
sys.path.insert(0, checkout)
from simulator.engine.config import SimConfig
from simulator.engine.metrics import Recorder
from simulator.engine.simulate import simulate
from traces import generate_bench_multiturn, load_trace
from traces.generators.bench_multiturn import BenchMultiturnArgs
results = {}
for name, path, kwargs in pickle.loads(bytes.fromhex(sys.argv[3])):
    if path == "seed_000":
        from simulator.validation.seed_000 import WORKLOAD, seed_config
        trace, cfg = generate_bench_multiturn(WORKLOAD), seed_config(kwargs["swa_eviction"])
    elif path.startswith("bench:"):
        workload = BenchMultiturnArgs(**eval(path[len("bench:"):]))
        trace, cfg = generate_bench_multiturn(workload), SimConfig(**kwargs)
    else:
        trace, cfg = load_trace(path), SimConfig(**kwargs)
    rec = Recorder.from_config(cfg)
    simulate(trace, cfg, rec)
    frames = {k: v.to_dict("list") for k, v in rec.frames().items()}
    results[name] = dict(summary=rec.summary(), frames=frames, counters=rec.counters)
with open(out, "wb") as fh:
    pickle.dump(results, fh)
"""


def run(checkout: Path) -> dict:
    cases = [
        (name, file if file == "seed_000" or file.startswith("bench:") else str(MOONCAKE / file), kwargs)
        for name, file, kwargs in CASES
    ]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "results.pkl"
        cmd = [sys.executable, "-c", CHILD, str(checkout), str(out), pickle.dumps(cases).hex()]
        subprocess.run(cmd, check=True)
        return pickle.loads(out.read_bytes())


def differences(a, b, where: str = "") -> list[str]:
    """Where ``a`` and ``b`` differ (floats exactly, NaN equal to NaN)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [f"{where}: keys {sorted(set(a) ^ set(b))}"]
        return [d for k in a for d in differences(a[k], b[k], f"{where}/{k}")]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return [f"{where}: length {len(a)} vs {len(b)}"]
        pairs = enumerate(zip(a, b, strict=True))
        return [d for i, (x, y) in pairs for d in differences(x, y, f"{where}[{i}]")]
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return []
    return [] if a == b else [f"{where}: {a!r} vs {b!r}"]


def main() -> None:
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    other = Path(sys.argv[1]).resolve()
    this = Path(sys.argv[2]).resolve() if len(sys.argv) == 3 else ROOT
    a, b = run(other), run(this)
    diffs = differences(a, b)
    for name in a:
        n = len(differences(a[name], b[name]))
        print(f"{name}: {'identical' if n == 0 else f'{n} differences'}")
    if diffs:
        print("\n".join(diffs[:20]))
        sys.exit(1)


if __name__ == "__main__":
    main()
