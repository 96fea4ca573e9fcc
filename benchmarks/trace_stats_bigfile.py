"""Peak memory and wall time of ``kvplan trace stats`` on a generated 1,000,000-request Mooncake file.

Usage: ``.venv/bin/python benchmarks/trace_stats_bigfile.py [--requests N] [--seed S] [--keep DIR]``

The file is written to a temporary directory (deterministic for a given seed) with Mooncake-like
structure: 40 shared system prompts with Zipf popularity, new documents, and multi-turn
conversations (about a third of requests continue an open conversation by appending blocks to its
complete blocks), lognormal lengths capped at 128k tokens, Poisson arrivals at ~280 req/s (ms ticks).
The CLI runs as a child process; its peak RSS comes from ``getrusage(RUSAGE_CHILDREN)``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

BLOCK = 512
MAX_BLOCKS = 256  # 128k tokens


def generate(
    path: Path, n: int, seed: int, max_blocks: int = MAX_BLOCKS, rate: float = 280.0
) -> dict[str, float]:
    """Write ``n`` Mooncake-format requests to ``path``; returns a few facts about the file.

    ``max_blocks`` caps every prompt at that many hash blocks (``max_blocks * 512`` tokens);
    ``rate`` is the Poisson arrival rate in requests/s (``n / 3600`` spreads them over an hour).
    """
    rng = np.random.default_rng(seed)
    next_id = 0
    sys_prompts = []
    for size in rng.integers(1, 9, size=40):
        sys_prompts.append(list(range(next_id, next_id + int(size))))
        next_id += int(size)
    zipf = 1.0 / np.arange(1, 41) ** 1.1
    zipf /= zipf.sum()
    open_convs: list[list[int]] = []
    t_ms = np.cumsum(rng.exponential(1000.0 / rate, size=n)).astype(np.int64)
    cont = rng.random(n) < 0.35
    doc_blocks = np.clip(rng.lognormal(2.6, 0.9, size=n), 1, max_blocks).astype(np.int64)
    add_blocks = rng.geometric(0.45, size=n)
    partial = rng.integers(1, BLOCK + 1, size=n)
    out_len = np.clip(rng.lognormal(5.3, 0.9, size=n), 1, 4096).astype(np.int64)
    sys_pick = rng.choice(40, size=n, p=zipf)
    conv_pick = rng.random(n)
    total_blocks = 0
    with open(path, "w") as fh:
        for i in range(n):
            if cont[i] and open_convs:
                k = int(conv_pick[i] * len(open_convs))
                base = open_convs[k]
                new = int(add_blocks[i])
                blocks = base + list(range(next_id, next_id + new))
                next_id += new
                if len(blocks) >= max_blocks:
                    blocks = blocks[:max_blocks]
                    open_convs[k] = open_convs[-1]
                    open_convs.pop()
                else:
                    open_convs[k] = blocks[:-1]  # the partial last block is rewritten next turn
            else:
                new = int(doc_blocks[i])
                blocks = sys_prompts[sys_pick[i]] + list(range(next_id, next_id + new))
                next_id += new
                blocks = blocks[:max_blocks]
                if len(open_convs) < 50_000:
                    open_convs.append(blocks[:-1])
            in_len = (len(blocks) - 1) * BLOCK + int(partial[i])
            total_blocks += len(blocks)
            fh.write(
                f'{{"timestamp": {t_ms[i]}, "input_length": {in_len}, "output_length": {out_len[i]}, '
                f'"hash_ids": [{", ".join(map(str, blocks))}]}}\n'
            )
    return {"requests": n, "blocks": total_blocks, "bytes": path.stat().st_size}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", type=Path, default=None, help="write the trace here instead of a temp dir")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = (args.keep or Path(tmp)) / "mooncake_big.jsonl"
        t0 = time.perf_counter()
        facts = generate(path, args.requests, args.seed)
        gen_s = time.perf_counter() - t0
        kvplan = Path(sys.executable).with_name("kvplan")
        cmd = [str(kvplan), "trace", "stats", str(path), "--json"]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            sys.exit(f"kvplan failed ({proc.returncode}): {proc.stderr.strip()}")
        peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        stats = json.loads(proc.stdout)
        print(
            json.dumps(
                {
                    "file": facts,
                    "generate_s": round(gen_s, 1),
                    "command": " ".join(["kvplan", *cmd[1:]]),
                    "peak_rss_mib": round(peak_kib / 1024, 1),
                    "wall_s": round(wall, 1),
                    "requests": stats["requests"],
                    "infinite_cache_hit_rate": round(stats["infinite_cache_hit_rate"], 4),
                    "requests_with_parent": stats["requests_with_parent"],
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
