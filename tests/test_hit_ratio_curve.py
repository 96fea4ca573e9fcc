"""LRU's hit-ratio curve: its stack positions against a list-based LRU stack, and the curve
within 0.01 of one cache-replay run per capacity on bundled traces (docs/optimal-bound.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator.cache_replay import CacheReplayConfig, replay, requests_from_tokens
from simulator.cli.cache_replay_cmd import workload_from_trace
from simulator.planner.bound_model import PoolModel, page_workload, served_mask, touches
from simulator.planner.hit_ratio_curve import lru_curve, stack_positions

DATA = Path(__file__).resolve().parents[1] / "traces" / "data"
FAR = np.iinfo(np.int64).max // 4


def test_stack_positions_match_a_list_lru_stack() -> None:
    rng = np.random.default_rng(5)
    for _ in range(100):
        reqs = [
            (str(i), [int(x) for x in rng.integers(0, 3, size=int(rng.integers(1, 7)))], [1])
            for i in range(int(rng.integers(1, 8)))
        ]
        wl = page_workload(requests_from_tokens(reqs, 1), 1)
        ev = touches(wl, served_mask(wl, PoolModel(1, 100)))
        pos = stack_positions(wl, ev)
        stack: list[int] = []  # most recent first
        for t in range(wl.n):
            path = [int(x) for x in ev.node[ev.start[t] : ev.start[t + 1]]]
            want = [stack.index(x) + 1 if x in stack else FAR for x in path]
            assert list(pos[ev.start[t] : ev.start[t + 1]]) == want
            stack = path + [x for x in stack if x not in path]  # the root ends up on top


CASES = [
    ("ragpulse", 16, None, "unified", "interval"),
    ("ragpulse", 16, None, "legacy", "interval"),
    ("ragpulse", 16, None, "unified", "none"),
    ("dynamo_pi_request_trace.jsonl.gz", 16, None, "unified", "interval"),
    ("mooncake_arxiv_head800.jsonl", 64, 250, "unified", "interval"),
]


@pytest.mark.parametrize(("name", "page", "limit", "tombstone", "swa_eviction"), CASES)
def test_curve_within_001_of_cache_replay(name, page, limit, tombstone, swa_eviction) -> None:
    """Six capacities from the smallest that serves every request to well past the working set;
    the SWA pool is twice the full pool (the curve assumes it is never short)."""
    requests = workload_from_trace(DATA / name, page, limit)
    wl = page_workload(requests, page)
    smallest = int(wl.peak.max() + 2) * page
    caps = np.unique(np.geomspace(smallest, 30 * smallest, 6).astype(np.int64) // page * page)
    curve = lru_curve(requests, caps, page, window=128, tombstone=tombstone, swa_eviction=swa_eviction)
    for cap, rate in zip(caps, curve.hit_rate, strict=True):
        cfg = CacheReplayConfig(
            page, int(cap), int(2 * cap), 128, tombstone=tombstone, swa_eviction=swa_eviction
        )
        real = replay(requests, cfg).summary
        assert real["aborted"] == 0
        assert abs(rate - real["hit_rate"]) <= 0.01, (cap, rate, real["hit_rate"])
