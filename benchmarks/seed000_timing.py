"""Which timing moves seed 000's lossy rounds? The before run (legacy tree, no decode-time SWA
eviction) under small changes of the step prices, in both loops.

Usage: python benchmarks/seed000_timing.py [--loops plain,overlap] [--factors 0.98,1.02] [--profile P]

Before the PR the SWA pool fills mid-run and SWA-LRU deletes whole leaves of finished sessions;
which sessions lose theirs depends on when requests finish and when the sender (random ready
queue, Poisson pacing) sends their next turns. This scales the cost model's prefill prices, its
decode prices, or both, by each factor (the roofline stays the same shape) and prints the overall
hit rate, the rounds that lost cache (hit < 0.9) and the mean request latency, to compare with
what the loop change moves. ``--profile P`` prices the steps with calibration profile P (e.g.
gpu_replay/profiles/transferred-mimo-v2-flash-tp4-2026-11-27.json) instead of the roofline
defaults, as ``--profile`` does on the command line; ``--factors ''`` runs the unscaled runs only.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import simulator.engine.simulate as simulate_mod  # noqa: E402
from simulator.validation.seed_000 import run_seed  # noqa: E402

_build = simulate_mod.build_cost_model


class Scaled:
    """The cost model with prefill and/or decode prices times a factor."""

    def __init__(self, cost, prefill: float, decode: float) -> None:
        self.cost, self.p, self.d = cost, prefill, decode

    def prefill_time(self, extend, prefix):
        return self.p * self.cost.prefill_time(extend, prefix)

    def decode_time(self, bs, full, swa):
        return self.d * self.cost.decode_time(bs, full, swa)

    def decode_terms(self, bs):
        return tuple(self.d * x for x in self.cost.decode_terms(bs))


def run(
    loop: str, prefill: float, decode: float, profile: str | None = None
) -> tuple[float, list[int], float]:
    def build(cfg, model, gpu):
        cfg = dataclasses.replace(cfg, profile=profile) if profile else cfg
        return Scaled(_build(cfg, model, gpu), prefill, decode)

    simulate_mod.build_cost_model = build
    try:
        s = run_seed("none", "legacy", overlap=loop == "overlap").summary
    finally:
        simulate_mod.build_cost_model = _build
    lossy = [r["round"] for r in s["per_round"] if r["round"] > 0 and r["cache_hit_rate"] < 0.9]
    return s["cache_hit_rate"], lossy, s["latency"]["mean"]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--loops", default="plain,overlap")
    p.add_argument("--factors", default="0.98,0.99,1.01,1.02")
    p.add_argument("--profile", default=None, help="calibration profile JSON (default: roofline)")
    a = p.parse_args()
    factors = [float(x) for x in a.factors.split(",") if x]
    for loop in a.loops.split(","):
        hit, lossy, lat = run(loop, 1.0, 1.0, a.profile)
        print(
            f"{loop:8} unscaled            hit {hit:.3f}  lossy rounds {lossy}  mean latency {lat:.2f} s",
            flush=True,
        )
        for what in ("prefill", "decode", "both"):
            for f in factors:
                pf = f if what in ("prefill", "both") else 1.0
                df = f if what in ("decode", "both") else 1.0
                hit, lossy, lat = run(loop, pf, df, a.profile)
                print(
                    f"{loop:8} {what:7} x {f:<6g}    hit {hit:.3f}  lossy rounds {lossy}  "
                    f"mean latency {lat:.2f} s",
                    flush=True,
                )


if __name__ == "__main__":
    main()
