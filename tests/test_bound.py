"""The optimal bound on hand-computed cases, its page trie, its relation to the unbounded hit rate
and the working set, and against cache-replay's policies on a bundled trace."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator.cache_replay import CacheReplayConfig, replay, requests_from_tokens
from simulator.cli.cache_replay_cmd import workload_from_trace
from simulator.planner import prefix_trie
from simulator.planner.bound import bound_for, optimal_bound
from simulator.planner.bound_brute import brute_force_hits
from simulator.planner.bound_model import PoolModel, page_workload
from simulator.planner.prefix_trie import build_trie, build_trie_by_levels

DATA = Path(__file__).resolve().parents[1] / "traces" / "data"


def _check_trie(paths, trie) -> None:
    """Against a dict of tuples: equal prefixes <=> equal node ids; parents and depths."""
    ids: dict[tuple, int] = {}
    for i, path in enumerate(paths):
        for j in range(len(path)):
            node = int(trie.nodes[trie.offsets[i] + j])
            key = tuple(int(x) for x in path[: j + 1])
            assert ids.setdefault(key, node) == node
            assert trie.depth[node] == j
            assert trie.parent[node] == (-1 if j == 0 else ids[key[:-1]])
    assert trie.n_nodes == len(ids) == len(set(ids.values()))


@pytest.mark.parametrize("build", [build_trie, build_trie_by_levels])
def test_trie_nodes_are_distinct_prefixes(build) -> None:
    rng = np.random.default_rng(3)
    for _ in range(200):
        paths = [rng.integers(0, 3, size=int(rng.integers(0, 9))) for _ in range(int(rng.integers(1, 7)))]
        _check_trie(paths, build(paths))


def test_trie_hash_collision_falls_back_to_exact_build(monkeypatch) -> None:
    """Every prefix hashing alike must not merge nodes: the tree check catches it."""
    monkeypatch.setattr(prefix_trie, "_prefix_hash", lambda pages, *a: np.zeros(len(pages), np.int64))
    paths = [np.array([1, 2, 3]), np.array([1, 2, 4]), np.array([2, 2])]
    _check_trie(paths, build_trie(paths))


def _repeat_workload():
    """a, b, a, b with 3-token prompts and one output token (page size 1): each request may hit
    2 pages (the match stops one token short) and holds 3 pages at its peak."""
    reqs = [("0", [1, 2, 3], [9]), ("1", [4, 5, 6], [9]), ("2", [1, 2, 3], [9]), ("3", [4, 5, 6], [9])]
    # output tokens equal to the prompt's next token would extend the path; 9 never recurs here
    return requests_from_tokens(reqs, 1)


@pytest.mark.parametrize(("full", "hits"), [(5, 4), (4, 2), (3, 0), (100, 4)])
def test_hand_computed_bound(full: int, hits: int) -> None:
    """Pool 5: two pages of `a` fit beside `b`'s 3 (and vice versa): both repeats hit 2.
    Pool 4: one page each. Pool 3: nothing fits beside the running request."""
    res = optimal_bound(_repeat_workload(), PoolModel(1, full))
    assert res.hit_tokens == hits
    assert res.prompt_tokens == 12
    assert res.infinite_capacity_hit_rate == pytest.approx(4 / 12)
    assert res.exact
    assert brute_force_hits(page_workload(_repeat_workload(), 1), PoolModel(1, full)) == hits


def test_prompt_larger_than_the_pool_is_aborted_by_every_policy() -> None:
    res = optimal_bound(_repeat_workload(), PoolModel(1, 2))
    assert res.served == 0 and res.aborted == 4 and res.hit_rate_bound == 0.0


@pytest.fixture(scope="module")
def ragpulse():
    return workload_from_trace(DATA / "ragpulse", 16, 120)


def test_below_the_working_set_the_bound_drops_below_the_unbounded_rate(ragpulse) -> None:
    wl = page_workload(ragpulse, 16)
    top = bound_for(wl, PoolModel(16, 10**8))
    ws = top.working_set_tokens
    assert top.hit_rate_bound == top.infinite_capacity_hit_rate > 0
    smallest = int(wl.peak.max()) * 16
    for cap in np.linspace(smallest, ws - 16, 6).astype(int) // 16 * 16:
        res = bound_for(wl, PoolModel(16, int(cap)))
        assert res.working_set_tokens == ws and res.aborted == 0
        assert res.hit_rate_bound < res.infinite_capacity_hit_rate
    at_ws = bound_for(wl, PoolModel(16, ws))
    assert at_ws.hit_rate_bound == at_ws.infinite_capacity_hit_rate


@pytest.mark.parametrize(
    ("tombstone", "orders"), [("unified", ("lru", "lfu", "fifo", "slru")), ("legacy", ("lru",))]
)
def test_bound_is_at_least_each_policy_on_a_bundled_trace(ragpulse, tombstone: str, orders) -> None:
    wl = page_workload(ragpulse, 16)
    smallest = int(wl.peak.max() + 2) * 16
    for cap in (smallest, 2 * smallest, 6 * smallest):
        pools = PoolModel(16, cap, cap, 128)
        res = bound_for(wl, pools)
        for order in orders:
            cfg = CacheReplayConfig(16, cap, cap, 128, tombstone=tombstone, eviction_policy=order)
            real = replay(ragpulse, cfg).summary
            assert real["aborted"] == 0
            assert real["total_prefix_hit_tokens"] <= res.hit_tokens, (cap, order)
            assert real["hit_rate"] <= res.hit_rate_bound


def test_counterexample_the_relaxation_is_above_the_optimum() -> None:
    """docs/optimal-bound.md: request 1 touches page `c` outside its match range, so the
    relaxation keeps `d` (hit by request 2) without its parent `c`; the tree cannot, and with
    one page of room beside request 1 the optimum loses that hit. The bound says so."""
    reqs = [("0", [1, 2, 3, 4], [9]), ("1", [1, 2, 3], [8, 8, 8]), ("2", [1, 2, 3, 4, 5], [7])]
    w = requests_from_tokens(reqs, 1)
    res = optimal_bound(w, PoolModel(1, 6))
    assert res.hit_tokens == 6 and not res.prefix_closed and not res.exact
    assert brute_force_hits(page_workload(w, 1), PoolModel(1, 6)) == 5
    roomy = optimal_bound(w, PoolModel(1, 7))
    assert roomy.hit_tokens == 6 == brute_force_hits(page_workload(w, 1), PoolModel(1, 7))


@pytest.mark.parametrize(
    ("source", "page", "limit"), [("ragpulse", 16, 120), ("mooncake_arxiv_head800.jsonl", 16, 60)]
)
def test_device_plus_host_bound_is_at_least_cache_replay_with_hicache(
    source: str, page: int, limit: int
) -> None:
    """Deliver 3's second bound: with HiCache a host hit counts, so the bound's budget is device
    + host pages; it is >= cache-replay with HiCache (every write policy, several host sizes)."""
    from simulator.radix.hicache_replay import HiCacheReplayConfig, replay_hicache

    requests = workload_from_trace(DATA / source, page, limit)
    wl = page_workload(requests, page)
    smallest = int(wl.peak.max() + 2) * page
    for cap in (smallest, 3 * smallest):
        device = bound_for(wl, PoolModel(page, cap, cap, 128))
        for ratio in (1.0, 3.0):
            for policy in ("write_through", "write_back", "write_through_selective"):
                cfg = HiCacheReplayConfig(
                    page_size=page,
                    full_tokens=cap,
                    swa_tokens=cap,
                    window=128,
                    hicache_ratio=ratio,
                    write_policy=policy,
                )
                got = replay_hicache(requests, cfg)
                host = got["hicache"]["host_full_capacity"]
                both = bound_for(wl, PoolModel(page, cap, cap, 128, host_full_tokens=host))
                hits = sum(r["prefix_len"] for r in got["requests"])
                assert hits <= both.hit_tokens, (cap, ratio, policy)
                assert both.hit_tokens >= device.hit_tokens and not both.exact
                assert both.served == device.served  # a request still needs the device
                assert both.hit_rate_bound <= both.infinite_capacity_hit_rate
