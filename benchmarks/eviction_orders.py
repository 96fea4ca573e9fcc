"""Compare FULL-eviction orders (lru vs kvplan's window-aware, and the rest) by cache-replay hit rate.

Usage: python benchmarks/eviction_orders.py [--out docs/eviction-policies-results.md]
Replays real traces at batch size 1 through the 0.5.23 tree (unified + interval) at a few pool
sizes and prints a markdown table of token hit rates per order.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from policies.eviction_order import EVICTION_ORDERS  # noqa: E402
from simulator.cache_replay import CacheReplayConfig, replay  # noqa: E402
from simulator.cli.cache_replay_cmd import workload_from_trace  # noqa: E402

SHARED = ROOT.parent / "shared" / "traces"
TRACES = [
    ("mooncake synthetic", SHARED / "mooncake" / "synthetic_trace.jsonl"),
    ("mooncake arxiv head", ROOT / "traces" / "data" / "mooncake_arxiv_head800.jsonl"),
    ("ragpulse", SHARED / "ragpulse" / "0_trace.jsonl"),
]
# (full pool tokens, SWA pool tokens) pairs, gpt-oss-style window 127 and page 64
POOLS = [(500_000, 250_000), (1_000_000, 500_000), (2_000_000, 1_000_000)]
ORDERS = ["lru", "window-aware", "lfu", "slru", "fifo", "priority"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    assert set(ORDERS) <= set(EVICTION_ORDERS.names())
    lines = [
        "| trace | full / SWA pool (tokens) | " + " | ".join(ORDERS) + " |",
        "|---|---|" + "---|" * len(ORDERS),
    ]
    t0 = time.time()
    for name, path in TRACES:
        if not path.exists():
            print(f"skip {name}: {path} missing", file=sys.stderr)
            continue
        work = workload_from_trace(path, 64, None)
        for full, swa in POOLS:
            cells = []
            for order in ORDERS:
                cfg = CacheReplayConfig(
                    page_size=64, full_tokens=full, swa_tokens=swa, window=127, eviction_policy=order
                )
                summary = replay(work, cfg).summary
                aborted = f" ({summary['aborted']} aborted)" if summary["aborted"] else ""
                cells.append(f"{summary['hit_rate']:.4f}{aborted}")
            lines.append(f"| {name} | {full:,} / {swa:,} | " + " | ".join(cells) + " |")
            print(lines[-1], flush=True)
    table = "\n".join(lines)
    footer = (
        f"\n\n(`python benchmarks/eviction_orders.py`, {time.time() - t0:.0f} s, {os.cpu_count()} CPUs)\n"
    )
    if args.out:
        tmp = args.out.with_suffix(".tmp")
        tmp.write_text(table + footer)
        tmp.replace(args.out)
    print(table + footer)


if __name__ == "__main__":
    main()
