"""Seed 000: SGLang PR 17220 ("Evict swa kv cache during decoding"), MiMo-V2-Flash, bench_multiturn.

The PR's benchmark ran MiMo-V2-Flash at TP 4, ``--mem-fraction-static 0.7 --page-size 64
--swa-full-tokens-ratio 0.2`` with bench_multiturn (10 clients x 10 rounds, request length 300,
output length 3000, rate 16, max-parallel 10, random ready queue, round barrier, synthetic
prompts) before and after the PR. The server of that time used the legacy ``SWARadixCache``;
"before" kept a request's SWA until it finished, "after" freed it every W decode steps.
The logs imply a full pool of ~894k tokens (330,688 / 0.37), so the pool is pinned there.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from simulator.engine.config import SimConfig
from simulator.engine.metrics import Recorder
from simulator.engine.simulate import simulate
from traces.generators.bench_multiturn import BenchMultiturnArgs, generate_bench_multiturn

# The seed's numbers (../shared/seeds/000_*.txt)
SEED = {
    "none": dict(
        cache_hit_rate=0.874651,
        late_swa_usage=0.27,
        late_full_usage=0.37,
        per_round=[
            0.0,
            0.827510,
            0.922246,
            0.914384,
            0.954352,
            0.963636,
            0.856698,
            0.874354,
            0.987110,
            0.691597,
        ],
    ),
    "window": dict(
        cache_hit_rate=0.965354,
        late_swa_usage=0.03,
        late_full_usage=0.37,
        per_round=[
            0.0,
            0.818212,
            0.861090,
            0.966613,
            0.974975,
            0.979822,
            0.967138,
            0.971974,
            0.976123,
            0.988668,
        ],
    ),
}
# The seed's decode log lines are the last ~5 of the run (every 40 decode steps): ~200 steps.
LATE_STEPS = 200
LATE_FROM_ROUND = 5

WORKLOAD = BenchMultiturnArgs(
    num_clients=10,
    num_rounds=10,
    request_length=300,
    output_length=3000,
    request_rate=16,
    max_parallel=10,
    ready_queue_policy="random",
    enable_round_barrier=True,
    disable_random_sample=True,
    seed=1,
)


def seed_config(swa_eviction: str, tombstone: str = "legacy", overlap: bool = False) -> SimConfig:
    """The PR's server: ``tombstone`` "legacy" is the tree of that time (``SWARadixCache``),
    "unified" today's; ``overlap`` runs SGLang's default overlap loop (the PR's server did)."""
    return SimConfig(
        model="MiMo-V2-Flash",
        gpu="H200",
        tp=4,
        mem_fraction_static=0.7,
        page_size=64,
        swa_full_tokens_ratio=0.2,
        max_total_tokens=894_000,
        tombstone=tombstone,
        swa_eviction=swa_eviction,
        seed=1,
        disable_overlap_schedule=not overlap,
    )


@dataclass
class SeedRun:
    policy: str
    summary: dict
    decode_steps: pd.DataFrame

    def round_end_usage(self) -> pd.DataFrame:
        """SWA and FULL token usage over the last ``LATE_STEPS`` decode steps of each round."""
        d = self.decode_steps[self.decode_steps["round"] >= 0]
        rows = []
        for rnd, g in d.groupby("round"):
            tail = g.tail(LATE_STEPS)
            rows.append(
                dict(
                    round=int(rnd),
                    swa_usage=float(tail["swa_token_usage"].mean()),
                    full_usage=float(tail["full_token_usage"].mean()),
                )
            )
        out = pd.DataFrame(rows)
        hits = {r["round"]: r["cache_hit_rate"] for r in self.summary["per_round"]}
        out["cache_hit_rate"] = out["round"].map(hits)
        return out

    def late_usage(self) -> dict:
        """Usage at the end of the late round that lost the most cache, as the seed's log shows.

        The seed's log lines come from the end of its last round, which had the run's lowest hit
        rate (0.69). Late in a round the SWA in use is the decode tokens plus each request's
        window lock, and a legacy window lock covers the whole last inserted node, i.e. what
        the round re-prefilled, so SWA usage there tracks that round's cache loss. We compare at
        the late round (>= 5) with the lowest hit rate; ``last_round`` is reported beside it.
        """
        t = self.round_end_usage()
        late = t[t["round"] >= LATE_FROM_ROUND]
        worst = late.sort_values(["cache_hit_rate", "round"], ascending=[True, False]).iloc[0]
        last = t.iloc[-1]
        return dict(
            round=int(worst["round"]),
            round_hit_rate=float(worst["cache_hit_rate"]),
            swa_usage=float(worst["swa_usage"]),
            full_usage=float(last["full_usage"]),
            last_round_swa_usage=float(last["swa_usage"]),
        )


def run_seed(swa_eviction: str, tombstone: str = "legacy", overlap: bool = False) -> SeedRun:
    trace = generate_bench_multiturn(WORKLOAD)
    cfg = seed_config(swa_eviction, tombstone, overlap)
    rec = Recorder.from_config(cfg)
    simulate(trace, cfg, rec)
    return SeedRun(swa_eviction, rec.summary(), rec.frames()["decode_steps"])
