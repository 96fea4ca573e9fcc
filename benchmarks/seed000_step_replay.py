"""Seed 000's workload on the step clock: kvplan's scheduler against SGLang 0.5.23's own event
loop (the scheduler oracle, ../shared/oracle/SCHEDULER.md), step by step, both loops.

Usage: python benchmarks/seed000_step_replay.py [--rounds N] [--loop plain|overlap|both]

The bench_multiturn trace of docs/validation.md (10 clients x 10 rounds, 300-token questions,
3000-token answers) as the oracle's token workload: block content becomes token ids (equal chain
id and offset, equal token), round 0 sent 4 steps apart, each client a session whose next turn
arrives one step after its previous turn finished (no round barrier, no heartbeats: the step
clock has no seconds), at the
seed's pools (FULL 893,952, SWA 178,752 tokens, page 64, window 128, chunk 8192). SGLang 0.5.23
has only the unified tree, so this checks the scheduler and the unified cache, in both loops: every
step key and request key (``tests/sched_oracle_harness.first_differences``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulator.validation.seed_000 import WORKLOAD  # noqa: E402
from tests.sched_oracle_harness import SchedOracle, first_differences, knob_flags, kvplan_lines  # noqa: E402
from traces import generate_bench_multiturn  # noqa: E402

KNOBS = dict(
    page_size=64,
    full_tokens=893_952,
    swa_tokens=178_752,
    window=128,
    chunked_prefill_size=8192,
    max_running_requests=16,
    context_length=65_536,
)


def seed_rows(rounds: int) -> list[dict]:
    """The seed's requests as token rows (heartbeats left out)."""
    trace = generate_bench_multiturn(WORKLOAD)
    c = trace.content
    req = trace.requests
    rows = []
    for i in range(len(req)):
        if req["session_id"].isna().iloc[i] or int(req["turn"].iloc[i]) >= rounds:
            continue
        a, b = int(c.offsets[i]), int(c.offsets[i + 1])
        chains = np.repeat(c.chain_ids[a:b], c.block_lens[a:b])
        starts = np.cumsum(c.block_lens[a:b]) - c.block_lens[a:b]
        offs = np.arange(len(chains)) - np.repeat(starts, c.block_lens[a:b])
        tokens = ((chains * 1_000_003 + offs) % (2**31 - 2)).tolist()
        p = int(req["prompt_len"].iloc[i])
        rows.append(
            dict(
                rid=str(req["rid"].iloc[i]),
                input_ids=tokens[:p],
                output_ids=tokens[p:],
                session=str(req["session_id"].iloc[i]),
                # round 0 paced as the sender's 16 requests/s against ~15 ms decode steps
                arrival_step=4 * len(rows) if int(req["turn"].iloc[i]) == 0 else 0,
            )
        )
    return rows


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--loop", choices=["plain", "overlap", "both"], default="both")
    p.add_argument("--swa-tokens", type=int, default=KNOBS["swa_tokens"], help="a tighter SWA pool evicts")
    a = p.parse_args()
    rows = seed_rows(a.rounds)
    oracle = SchedOracle("on")
    loops = ["plain", "overlap"] if a.loop == "both" else [a.loop]
    try:
        for loop in loops:
            knobs = dict(KNOBS, swa_tokens=a.swa_tokens, disable_overlap_schedule=loop == "plain")
            knobs["waiting_prefix_refresh"] = True
            flags, _ = knob_flags(knobs)
            t0 = time.perf_counter()
            ans = oracle.run(rows, flags)
            t1 = time.perf_counter()
            if not ans["ok"]:
                print(loop, "oracle error:", ans["error"])
                continue
            ours = kvplan_lines(rows, knobs)
            t2 = time.perf_counter()
            diffs = first_differences(ans["lines"], ours)
            run = ans["lines"][-1]
            c = run["counts"]
            hit = c["cached_tokens"] / c["prompt_tokens"]
            print(
                f"{loop}: {len(rows)} requests, {c['steps']} steps ({c['prefill_steps']} prefill, "
                f"{c['decode_steps']} decode), retractions {c['retractions']}, evictions "
                f"{c['evict_calls']}, cached/prompt {c['cached_tokens']}/{c['prompt_tokens']} = {hit:.4f}; "
                f"differences: {len(diffs)} {diffs[:2]}; oracle {t1 - t0:.0f} s, kvplan {t2 - t1:.0f} s",
                flush=True,
            )
    finally:
        oracle.close()


if __name__ == "__main__":
    main()
