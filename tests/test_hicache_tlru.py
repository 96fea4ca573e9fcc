"""``--radix-eviction-policy tlru`` with HiCache, which SGLang 0.5.23 serves (the HiCache tree is
``UnifiedTreeCore``, whose ``_add_new_node``, host-only inserts and ``_split_node`` keep the
``_tlru_*`` lens that ``TLRUStrategy`` reads, mem_cache/unified_cache/unified_tree_core.py).

kvplan's HiCache tree tells the order of every node added (device or host-only insert), split or
deleted. Checked against the oracle (SGLang's own HiCache; the oracle takes no policy config, so
TLRU runs with SGLang's default budget there) and, with a tail budget that makes leaves TEL-safe,
by the depth bookkeeping itself after every request.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hicache_workloads import hicache_workload
from test_hicache_oracle import POOLS, L2Config, hicache_oracle, run_config  # noqa: F401

from policies.eviction_order import EVICTION_ORDERS, TLRU
from simulator.cache_replay import requests_from_tokens
from simulator.radix.hicache_replay import HiCacheReplayConfig, replay_hicache
from simulator.radix.hicache_replay import _check as replay_check

TLRU_CONFIGS = [
    L2Config("write_through", 2, 16, eviction="tlru"),
    L2Config("write_back", 2, 1, eviction="tlru"),
]


@pytest.mark.oracle
@pytest.mark.parametrize("cfg", TLRU_CONFIGS, ids=[c.id for c in TLRU_CONFIGS])
def test_hicache_tlru_matches_sglang(hicache_oracle, cfg: L2Config) -> None:  # noqa: F811
    total = run_config(hicache_oracle, cfg, range(8), invariants_every=3)
    assert total["demoted_nodes"] > 0 and total["load_back_ok"] > 0, total


TLRU_BUDGET = {"threshold": 140, "next_prompt_estimate": 40}  # test_differential_oracle's


def _replay_tlru(
    monkeypatch, seed: int, policy: str, budget: dict[str, int] | None, storage: str | None = None
) -> tuple[dict, Any]:
    """Replay one workload under ``tlru`` with ``budget`` (None: LRU), checking after every
    step that the order's depths describe the tree: each live node's path depth, a branch
    high-water mark at least as deep as its deepest live descendant, no entry of a deleted node."""
    import simulator.radix.hicache_replay as replay

    made: list[Any] = []

    class Configured:
        def create(self, name: str, **kwargs: Any) -> Any:
            order = EVICTION_ORDERS.create(name, **(budget if name == "tlru" else {}), **kwargs)
            made.append(order)
            return order

    checked = Counter()

    def check_depths(cache, cfg, running) -> None:
        replay_check(cache, cfg, running)
        if isinstance(made[0], TLRU):
            _assert_depths(cache.tree, made[0])
            checked["steps"] += 1

    monkeypatch.setattr(replay, "EVICTION_ORDERS", Configured())
    monkeypatch.setattr(replay, "_check", check_depths)
    pools = POOLS[16]
    reqs = hicache_workload(pools, seed, 8)
    workload = requests_from_tokens([(r["rid"], r["input_ids"], r["output_ids"]) for r in reqs], 16)
    cfg = HiCacheReplayConfig(
        page_size=16,
        full_tokens=pools.full_tokens,
        swa_tokens=pools.swa_tokens,
        window=pools.window,
        eviction_policy="tlru" if budget is not None else "lru",
        write_policy=policy,
        hicache_ratio=1 if storage else 2,
        check_invariants=True,
        storage_backend=storage,
        prefetch_policy="wait_complete",
        prefetch_threshold=64,
    )
    out = replay_hicache(workload, cfg)
    assert budget is None or checked["steps"] > 0
    return out, made[0]


def _assert_depths(tree, order: TLRU) -> None:
    live = {}
    deepest: dict[int, int] = {}
    for x in tree.iter_nodes():
        depth = tree.path_length(x)
        live[x.id] = x
        assert order.cached_len[x.id] == depth, x
        y = x
        while y is not None:
            deepest[y.id] = max(deepest.get(y.id, 0), depth)
            y = y.parent
    assert set(order.cached_len) == set(live)
    assert set(order.history_len) <= set(live) | {tree.root.id}
    for node_id in live:
        assert order.history_len[node_id] >= deepest[node_id]


@pytest.mark.parametrize(
    "policy,storage", [("write_through", None), ("write_back", None), ("write_through", "file")]
)
def test_tlru_depths_follow_the_hicache_tree_and_the_budget_changes_victims(monkeypatch, policy, storage):
    """With a tail budget, the depths stay exact through inserts, host-only inserts (L3
    prefetches), splits, demotions and deletions, and the budget changes what HiCache does on
    some workloads (so the TEL-safe order is live in the HiCache tree's device and host
    eviction)."""
    differs = 0
    prefetched = 0
    for seed in range(6):
        tlru, _ = _replay_tlru(monkeypatch, seed, policy, TLRU_BUDGET, storage)
        lru, _ = _replay_tlru(monkeypatch, seed, policy, None, storage)
        differs += tlru["requests"] != lru["requests"] or tlru["counts"] != lru["counts"]
        prefetched += tlru["counts"].get("prefetch_tokens", 0)
    assert differs > 0
    assert prefetched > 0 or storage is None


@pytest.mark.parametrize("overlap", [False, True])
def test_served_runs_take_tlru_with_hicache(overlap):
    """``kvplan run --radix-eviction-policy tlru --enable-hierarchical-cache`` serves (both
    loops); SGLang's default budget orders the leaves as LRU does, so the run equals LRU's
    (with the waiting-prefix refresh off: SGLang runs it under LRU only)."""
    from dataclasses import replace

    from test_hicache_engine import TRACE

    from simulator.engine.config import SimConfig
    from simulator.hicache_args import HiCacheArgs
    from simulator.run import run_config
    from traces import load_trace

    cfg = SimConfig(
        tp=2,
        page_size=64,
        max_total_tokens=150_000,
        disable_overlap_schedule=not overlap,
        radix_eviction_policy="tlru",
        waiting_prefix_refresh="off",
        hicache=HiCacheArgs(enable_hierarchical_cache=True, hicache_ratio=1.0),
    )
    trace = load_trace(TRACE, limit=120)
    tlru = run_config(trace, cfg)
    lru = run_config(trace, replace(cfg, radix_eviction_policy="lru"))
    h = tlru.summary["hicache"]
    assert tlru.summary["failed"] == 0 and h["load_backs"] > 0 and h["demoted_full_tokens"] > 0
    assert h == lru.summary["hicache"]
