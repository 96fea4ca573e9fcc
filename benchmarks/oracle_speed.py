"""Speed of kvplan's cache replay against SGLang's own cache classes on the same workload.

Usage:
    .venv/bin/python benchmarks/oracle_speed.py [--requests N] [--skip-oracle] [--json OUT]

Replays the Mooncake synthetic trace (../shared/traces/mooncake/synthetic_trace.jsonl, first
``--requests`` lines, all 3,993 by default) at batch size 1 through

* the SGLang 0.5.23 oracle (``UnifiedRadixCache``, Rust tree core by default), in one
  long-lived oracle worker (tests/oracle_worker.py), timing the driver's own ``replay`` phase
  (building the pools and reading the JSONL are excluded);
* kvplan's ``replay_requests`` on the very same token ids (unified + interval, LRU), timed
  from numpy token arrays to the last record (page hashing of the tokens included);
* kvplan's ``replay`` of the trace read natively (hash ids -> page ids, no token ids), timed
  for the replay only, which is what ``kvplan cache-replay TRACE`` does.

The trace has hash ids of prefix-chained 512-token blocks, not tokens.  Token ``j`` of block
``b`` becomes ``b * 512 + j + 1``, so equal block ids give equal tokens and different blocks
never share a token; each request's output tokens are fresh ids above 2**30, unique across the
trace.  Pages are 64 tokens (each 512-token block is 8 pages).  Pools: full 1,000,000 tokens,
SWA 200,000, window 128 (``--full-tokens``, ``--swa-tokens``, ``--window``).

Tree operations are the cache entry points a batch-1 scheduler calls: match, insert, lock,
unlock and evict.  For SGLang they are counted by pass-through wrappers in the worker
(``match_prefix``, ``insert``, ``lock``, ``unlock``, ``evict_for_alloc``), for kvplan by its
tree counters.  The script also compares the two runs request by request (prefix lengths and
the six pool sizes at every checkpoint) and reports the number of differing lines.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from oracle_harness import OracleWorker, compare_records, oracle_missing_reason  # noqa: E402

from simulator.cache_replay import CacheReplayConfig, replay, replay_requests  # noqa: E402
from simulator.cli.cache_replay_cmd import workload_from_trace  # noqa: E402

TRACE = ROOT.parent / "shared" / "traces" / "mooncake" / "synthetic_trace.jsonl"
BLOCK = 512
OUTPUT_BASE = 2**30


def trace_to_tokens(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mooncake rows as oracle JSONL requests (see the module docstring for the mapping)."""
    out, next_output = [], OUTPUT_BASE
    for i, row in enumerate(rows):
        n_in, blocks = row["input_length"], row["hash_ids"]
        tokens = np.concatenate(
            [np.arange(b * BLOCK + 1, b * BLOCK + BLOCK + 1, dtype=np.int64) for b in blocks]
        )
        if len(tokens) < n_in:
            raise ValueError(f"line {i + 1}: {len(blocks)} blocks cannot hold {n_in} tokens")
        n_out = max(1, row["output_length"])
        out.append(
            dict(
                rid=f"r{i}",
                input_ids=tokens[:n_in].tolist(),
                output_ids=list(range(next_output, next_output + n_out)),
            )
        )
        next_output += n_out
    return out


def tree_ops_kvplan(counters: dict[str, int]) -> int:
    """kvplan's tree entry-point calls: match, insert, lock, unlock and evict."""
    return sum(
        counters[k] for k in ("match_calls", "insert_calls", "lock_calls", "unlock_calls", "evict_calls")
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--requests", type=int, default=None, help="first N requests (default: all)")
    ap.add_argument("--page-size", type=int, default=64)
    ap.add_argument("--full-tokens", type=int, default=1_000_000)
    ap.add_argument("--swa-tokens", type=int, default=200_000)
    ap.add_argument("--window", type=int, default=128)
    ap.add_argument("--tree-core", choices=["rust", "python"], default="rust")
    ap.add_argument("--skip-oracle", action="store_true", help="time kvplan only")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args(argv)

    with open(args.trace) as f:
        lines = [line for line in f if line.strip()]
    if args.requests is not None:
        lines = lines[: args.requests]
    rows = [json.loads(line) for line in lines]
    requests = trace_to_tokens(rows)
    n = len(requests)
    max_total = max(len(r["input_ids"]) + len(r["output_ids"]) for r in requests)
    prompt_tokens = sum(len(r["input_ids"]) for r in requests)
    output_tokens = sum(len(r["output_ids"]) for r in requests)
    results: dict[str, Any] = dict(
        trace=str(args.trace.relative_to(ROOT.parent))
        if args.trace.is_relative_to(ROOT.parent)
        else str(args.trace),
        requests=n,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        page_size=args.page_size,
        full_tokens=args.full_tokens,
        swa_tokens=args.swa_tokens,
        window=args.window,
        max_context_len=max_total,
        machine=f"{platform.machine()}, Python {platform.python_version()}",
    )
    cfg = CacheReplayConfig(
        page_size=args.page_size,
        full_tokens=args.full_tokens,
        swa_tokens=args.swa_tokens,
        window=args.window,
        swa_eviction="interval",
        tombstone="unified",
        eviction_policy="lru",
    )

    # kvplan on token ids (same input as the oracle), timed from numpy token arrays -- as the
    # oracle's replay phase starts from parsed token arrays -- to the last record
    token_requests = [(r["rid"], np.asarray(r["input_ids"], np.int64), r["output_ids"]) for r in requests]
    t0 = time.perf_counter()
    mine = replay_requests(token_requests, cfg)
    t_tokens = time.perf_counter() - t0
    ops = tree_ops_kvplan(mine.counters)
    results["kvplan_tokens"] = dict(
        seconds=round(t_tokens, 3),
        requests_per_s=round(n / t_tokens, 1),
        tree_ops=ops,
        tree_ops_per_s=round(ops / t_tokens, 1),
        hit_rate=round(mine.summary["hit_rate"], 4),
        evictions=mine.evictions,
        aborted=mine.summary["aborted"],
    )
    print(f"kvplan (token ids): {n} requests in {t_tokens:.2f} s", file=sys.stderr)

    with tempfile.TemporaryDirectory(prefix="kvplan-oracle-speed-") as tmp:
        # kvplan on the trace read natively (hash ids -> pages); replay timed alone
        head = Path(tmp) / "trace_head.jsonl"
        head.write_text("".join(lines))
        work = workload_from_trace(head, args.page_size, None)
        t0 = time.perf_counter()
        native = replay(work, cfg)
        t_native = time.perf_counter() - t0
        nops = tree_ops_kvplan(native.counters)
        results["kvplan_native"] = dict(
            seconds=round(t_native, 3),
            requests_per_s=round(n / t_native, 1),
            tree_ops=nops,
            tree_ops_per_s=round(nops / t_native, 1),
            hit_rate=round(native.summary["hit_rate"], 4),
        )
        print(f"kvplan (native trace): replay in {t_native:.2f} s", file=sys.stderr)

        reason = oracle_missing_reason("0.5.23")
        if args.skip_oracle or reason:
            results["oracle"] = dict(skipped=reason or "--skip-oracle")
        else:
            path = Path(tmp) / "workload.jsonl"
            with open(path, "w") as f:
                for r in requests:
                    f.write(json.dumps(r) + "\n")
            worker = OracleWorker(
                "0.5.23",
                args.page_size,
                args.full_tokens,
                args.swa_tokens,
                args.window,
                max_context_len=max_total,
                tree_core=args.tree_core,
            )
            worker.process.request_timeout_s = 24 * 3600  # type: ignore[union-attr]
            with worker:
                t0 = time.perf_counter()
                oracle = worker.run_file(path)
                t_wall = time.perf_counter() - t0
            t_replay = oracle["timing_s"]["replay"]
            calls = oracle["oracle_calls"] or {}
            oops = sum(calls.values())
            diffs = compare_records(oracle["requests"], mine.records, max_diffs=10)
            results["oracle"] = dict(
                sglang=oracle["sglang_version"],
                tree_core=oracle["tree_core_class"],
                replay_seconds=round(t_replay, 3),
                wall_seconds_incl_reading=round(t_wall, 3),
                requests_per_s=round(n / t_replay, 2),
                tree_ops=oops,
                tree_calls=calls,
                tree_ops_per_s=round(oops / t_replay, 1),
                hit_rate=oracle["hit_rate"],
                evictions=oracle["evictions"],
                triton_launch_attempts=oracle["triton_launch_attempts"],
                differences_vs_kvplan=diffs,
            )
            results["speedup_requests_per_s"] = dict(
                kvplan_tokens=round(t_replay / t_tokens, 1),
                kvplan_native=round(t_replay / t_native, 1),
            )
            print(
                f"oracle: replay {t_replay:.2f} s (wall {t_wall:.2f} s); {len(diffs)} difference lines",
                file=sys.stderr,
            )

    text = json.dumps(results, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
