"""Seed 000 (SGLang PR 17220) with both scheduler loops and both tombstone generations.

Usage: python benchmarks/seed000_loops.py [--only plain|overlap] [--json OUT]

Runs the before (``--swa-eviction none``) / after (``window``) pair of docs/validation.md for
each of: the plain loop and the overlap loop (``--enable-overlap-schedule``, SGLang's default and
the PR's server), the legacy tree (``SWARadixCache``, the PR's time) and the unified one (today's
``UnifiedRadixCache`` tombstones). Prints the overall hit rate, the late-round SWA / FULL usage
(``SeedRun.late_usage``) and the per-round hit rates against the seed's, with the ±0.03 verdict.
The overlap loop runs one decode step at a time (it has no fast-forward yet): minutes per run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simulator.validation.seed_000 import SEED, run_seed  # noqa: E402

TOL = 0.03


def one(policy: str, tombstone: str, overlap: bool) -> dict:
    t0 = time.perf_counter()
    run = run_seed(policy, tombstone, overlap)
    late = run.late_usage()
    s = run.summary
    seed = SEED[policy]
    return dict(
        loop="overlap" if overlap else "plain",
        tombstone=tombstone,
        policy=policy,
        hit=s["cache_hit_rate"],
        seed_hit=seed["cache_hit_rate"],
        late_round=late["round"],
        late_swa=late["swa_usage"],
        seed_swa=seed["late_swa_usage"],
        late_full=late["full_usage"],
        last_round_swa=late["last_round_swa_usage"],
        per_round=[r["cache_hit_rate"] for r in s["per_round"]],
        retractions=run.summary.get("retractions", 0),
        ok=abs(s["cache_hit_rate"] - seed["cache_hit_rate"]) <= TOL
        and abs(late["swa_usage"] - seed["late_swa_usage"]) <= TOL,
        seconds=round(time.perf_counter() - t0, 1),
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--only", choices=["plain", "overlap"])
    p.add_argument("--json")
    a = p.parse_args()
    loops = [False, True] if a.only is None else [a.only == "overlap"]
    rows = []
    for overlap in loops:
        for tombstone in ("legacy", "unified"):
            for policy in ("none", "window"):
                r = one(policy, tombstone, overlap)
                rows.append(r)
                print(
                    f"{r['loop']:8} {tombstone:8} {policy:7} hit {r['hit']:.3f} (seed {r['seed_hit']:.3f}) "
                    f"late SWA {r['late_swa']:.3f} @ round {r['late_round']} (seed {r['seed_swa']:.2f}) "
                    f"FULL {r['late_full']:.3f} last-round SWA {r['last_round_swa']:.3f} "
                    f"{'within' if r['ok'] else 'OUTSIDE'} ±{TOL}  [{r['seconds']} s]",
                    flush=True,
                )
                print("   per round: " + " ".join(f"{h:.3f}" for h in r["per_round"]), flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
