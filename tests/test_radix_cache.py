"""Hand-computable scenarios for the SWA radix cache (both generations) and its policies."""

from __future__ import annotations

import numpy as np
import pytest

from policies.eviction_order import EVICTION_ORDERS
from policies.registry import Registry
from policies.swa_eviction import SWA_EVICTION, DecodeContext
from policies.tombstone import TOMBSTONING
from simulator.cache_replay import CacheReplayConfig, replay_requests
from simulator.errors import ConfigError
from simulator.invariants import InvariantViolation, check_invariants
from simulator.kv_allocator import SWAKVAllocator
from simulator.radix.cache import LegacySWACache, UnifiedSWACache
from simulator.request_kv import ReqKV

W = 4


def _req(rid: str, tokens: list[int], out: int) -> ReqKV:
    return ReqKV(rid=rid, pages=np.asarray(tokens, np.int64), prompt_len=len(tokens) - out, output_len=out)


def _serve_prefill_only(cache, req: ReqKV) -> None:
    """Match, lock, allocate, then release at prefill (one output token)."""
    cache.match(req)
    cache.lock_prefix(req)
    cache.alloc_for_extend(req)
    req.num_outputs = 1
    cache.release(req)


def test_allocator_counts_pages_and_reserves_nothing_extra():
    a = SWAKVAllocator(full_tokens=100, swa_tokens=50, page_size=16)
    assert (a.full_capacity, a.swa_capacity) == (96, 48)
    a.alloc_pages(2)
    assert (a.full_available_size(), a.swa_available_size()) == (64, 16)
    assert not a.can_alloc_pages(2)
    a.free_group_begin()
    a.free_swa_pages(1)
    assert a.swa_available_size() == 16  # held back until the group ends
    a.free_group_end()
    assert a.swa_available_size() == 32


def test_unified_insert_tombstones_below_cursor_and_match_needs_a_window():
    a = SWAKVAllocator(64, 32, 1)
    cache = UnifiedSWACache(a, W, EVICTION_ORDERS.create("lru"))
    tree = cache.tree
    # a finished request whose SWA cursor is at 6: positions [0, 6) become a tombstone
    req = _req("a", list(range(10)), 1)
    cache.match(req)
    cache.lock_prefix(req)
    cache.alloc_for_extend(req)
    req.swa_evicted_seqlen = 6
    a.free_swa_pages(6)
    cache.release(req)
    check_invariants(cache)
    stats = tree.stats()
    assert stats["tombstones"] == 1 and stats["tombstone_tokens"] == 6
    assert tree.full_evictable == 9 and tree.swa_evictable == 3  # 9 tokens inserted (10 - 1)
    # matching the same prefix: 3 live tokens after the tombstone < W -> no valid boundary
    r2 = _req("b", list(range(9)) + [99, 100], 1)
    cache.match(r2)
    assert r2.prefix_len == 0
    assert r2.swa_branching_seqlen == 9  # FULL KV is there; SWA must be recomputed


def test_unified_heal_restores_swa_on_a_tombstone():
    a = SWAKVAllocator(64, 32, 1)
    cache = UnifiedSWACache(a, W, EVICTION_ORDERS.create("lru"))
    tree = cache.tree
    req = _req("a", list(range(10)), 1)
    cache.match(req)
    cache.lock_prefix(req)
    cache.alloc_for_extend(req)
    req.swa_evicted_seqlen = 6
    a.free_swa_pages(6)
    cache.release(req)
    # a request recomputing the same tokens with live SWA heals the tombstone
    r2 = _req("b", list(range(12)), 1)
    _serve_prefill_only(cache, r2)
    check_invariants(cache)
    assert tree.counters.tombstones_healed == 1
    assert tree.stats()["tombstones"] == 0
    # the first insert after a branching match stops at the branching point (9 tokens):
    # SWAComponent.prepare_for_caching_req truncates it, and the rest of the row is freed
    assert tree.swa_evictable == tree.full_evictable == 9


def test_swa_pressure_tombstones_internal_nodes_and_deletes_leaves():
    a = SWAKVAllocator(64, 16, 1)
    cache = UnifiedSWACache(a, W, EVICTION_ORDERS.create("lru"))
    base = list(range(8))
    for i, tail in enumerate(([50, 51, 52], [60, 61, 62])):
        _serve_prefill_only(cache, _req(f"r{i}", base + tail, 1))
    check_invariants(cache)
    tree = cache.tree
    assert tree.swa_evictable == 12  # shared 8 + two 2-token leaves
    # a 10-token prompt needs 10 SWA slots: only 4 are free
    r = _req("big", list(range(100, 110)) + [0], 1)
    cache.match(r)
    cache.lock_prefix(r)
    cache.alloc_for_extend(r)
    assert cache.evictions.swa_evicted >= 6
    assert tree.counters.tombstones_created + tree.counters.leaves_deleted >= 1
    check_invariants(cache, [r])


def test_legacy_deletes_tombstone_parent_with_its_leaf():
    a = SWAKVAllocator(64, 32, 1)
    cache = LegacySWACache(a, W)
    req = _req("a", list(range(10)), 1)
    cache.match(req)
    cache.lock_prefix(req)
    cache.alloc_for_extend(req)
    req.swa_evicted_seqlen = 4
    a.free_swa_pages(4)
    cache.release(req)
    check_invariants(cache)
    assert cache.tree.stats()["tombstones"] == 1
    res = cache.tree.evict(full_num_tokens=1, swa_num_tokens=0)
    # the live leaf goes, and its now-childless tombstone parent goes with its FULL KV
    assert res.full_evicted == 9
    assert cache.tree.stats()["nodes"] == 0
    check_invariants(cache)


def test_invariant_checker_catches_a_leak():
    a = SWAKVAllocator(64, 32, 1)
    cache = UnifiedSWACache(a, W, EVICTION_ORDERS.create("lru"))
    _serve_prefill_only(cache, _req("a", list(range(10)), 1))
    a.full_free -= 1  # a page nobody owns
    with pytest.raises(InvariantViolation, match="FULL conservation"):
        check_invariants(cache)


@pytest.mark.parametrize(
    "name,decode_idx,seqlen,evicted,forward_iter,expect",
    [
        ("none", 5, 1000, 0, 0, 0),
        ("interval", 0, 1000, 0, 0, 0),  # never on the first decode step
        ("interval", 3, 4 + W + 128, 0, 0, 0),  # seqlen-1-W = 131 < 0 + 128? no: 131 >= 128 -> frees
        ("iteration", 3, 500, 0, 127, 0),  # not a multiple of the interval
        ("iteration", 3, 500, 0, 256, 499 - W),
        ("window", W + 1, 500, 0, 0, 499 - W),
    ],
)
def test_swa_eviction_policies(name, decode_idx, seqlen, evicted, forward_iter, expect):
    a = SWAKVAllocator(4096, 4096, 1)
    a.alloc_pages(seqlen)
    req = ReqKV(rid="r", pages=np.zeros(0, np.int64), prompt_len=seqlen - 1, output_len=10**6)
    req.num_outputs = 1
    req.kv_allocated_len = seqlen - 1
    req.decode_batch_idx = decode_idx
    req.swa_evicted_seqlen = evicted
    freed = SWA_EVICTION.create(name).on_decode(req, DecodeContext(W, 1, a, forward_iter))
    if name == "interval" and decode_idx >= 1 and seqlen - 1 - W >= 128:
        expect = seqlen - 1 - W
    assert freed == expect
    assert req.swa_evicted_seqlen == evicted + freed


def test_registries_are_strict_and_instances_independent():
    assert {"lru", "lfu", "fifo", "priority", "slru", "window-aware"} <= set(EVICTION_ORDERS.names())
    assert set(SWA_EVICTION.names()) == {"none", "window", "iteration", "interval"}
    assert set(TOMBSTONING.names()) == {"legacy", "unified"}
    with pytest.raises(ConfigError, match="choose one of"):
        SWA_EVICTION.create("bogus")
    r = Registry("x")
    r.register("a")(lambda: 1)
    with pytest.raises(ValueError):
        r.register("a")(lambda: 2)
    with pytest.raises(ValueError):
        r.register("")(lambda: 3)
    assert SWA_EVICTION.create("interval") is not SWA_EVICTION.create("interval")


def test_two_caches_in_one_process_do_not_interfere():
    reqs = [("a", list(range(300)), list(range(1000, 1200))), ("b", list(range(250)), [7] * 3)]
    cfg = CacheReplayConfig(page_size=16, full_tokens=2048, swa_tokens=512, window=64, check_invariants=True)
    first = replay_requests(reqs, cfg).records
    replay_requests(reqs[::-1], cfg)
    again = replay_requests(reqs, cfg).records
    assert first == again


def test_config_rejects_swa_pool_smaller_than_window_plus_page():
    with pytest.raises(ConfigError, match="cannot hold sliding window"):
        CacheReplayConfig(page_size=64, swa_tokens=192, window=128)


def _honoured(tombstone: str, order: str) -> bool:
    supported = TOMBSTONING.create(tombstone).eviction_orders
    return supported is None or order in supported


@pytest.mark.parametrize(
    "order,tombstone,swa",
    [
        (order, tombstone, swa)
        for order in EVICTION_ORDERS.names()
        for tombstone in TOMBSTONING.names()
        for swa in SWA_EVICTION.names()
        if _honoured(tombstone, order)
    ],
)
def test_every_policy_combination_keeps_invariants(order, tombstone, swa):
    """Every registered order on every tree generation that honours it, with every SWA-eviction
    policy, on pools where both FULL and SWA eviction bind."""
    rng = np.random.default_rng(7)
    system = list(rng.integers(0, 50, 200))
    reqs, convs = [], [system + list(rng.integers(0, 50, 20)) for _ in range(3)]
    for t in range(3):
        for c in range(3):
            out = list(rng.integers(0, 50, int(rng.integers(1, 300))))
            reqs.append((f"c{c}t{t}", convs[c], out))
            convs[c] = convs[c] + out + list(rng.integers(0, 50, 10))
    cfg = CacheReplayConfig(
        page_size=4,
        full_tokens=1200,
        swa_tokens=1200 if swa == "none" else 700,  # without decode eviction SWA grows like FULL
        window=32,
        tombstone=tombstone,
        swa_eviction=swa,
        eviction_policy=order,
        check_invariants=True,
    )
    res = replay_requests(reqs, cfg)
    assert res.evictions["full_requested"] > 0 and res.evictions["full_evicted"] > 0  # the FULL pass ran
    assert res.evictions["swa_evicted"] > 0
    assert len(res.records) == 9


def test_unified_full_eviction_pass_frees_lru_leaves_then_their_parents():
    """FULL pressure on the unified tree: ``FullComponent`` evicts D-leaves in LRU order, a leaf
    freeing both pools (it holds SWA) and a parent joining the heap once childless.

    Tree (page 1, W = 4, FULL pool 32): ``r0`` inserts 0..8 (9 tokens: an upper 5 + a 4-token
    leaf, split for the SWA lock) and ``r1`` inserts 20..28 the same way; 32 - 18 = 14 FULL slots
    stay free. A 20-token prompt is 6 short. The LRU leaf is r0's tail (4 tokens, 5..8); then
    r0's upper part (5 tokens) is a leaf, older than anything of r1: 4 + 5 = 9 >= 6 frees enough.
    r1 stays whole; big's prompt enters the tree only at its release."""
    a = SWAKVAllocator(32, 64, 1)
    cache = UnifiedSWACache(a, W, EVICTION_ORDERS.create("lru"))
    tree = cache.tree
    _serve_prefill_only(cache, _req("r0", list(range(10)), 1))
    _serve_prefill_only(cache, _req("r1", list(range(20, 30)), 1))
    assert (tree.full_evictable, a.full_available_size()) == (18, 14)
    big = _req("big", list(range(100, 120)) + [0], 1)
    cache.match(big)
    cache.lock_prefix(big)
    cache.alloc_for_extend(big)
    assert tree.counters.full_evicted == 9 and tree.counters.leaves_deleted == 2
    assert tree.counters.swa_evicted == 9  # both r0 nodes held live SWA
    left = sorted(int(n.key[0]) for n in tree.iter_nodes() if n is not tree.root)
    assert left == [20, 25]  # r1's two nodes
    check_invariants(cache, [big])


@pytest.mark.parametrize("page_size", [1, 16, 64])
@pytest.mark.parametrize("tombstone", TOMBSTONING.names())
@pytest.mark.parametrize("swa", SWA_EVICTION.names())
def test_decode_fast_forward_changes_nothing(page_size, tombstone, swa):
    """Every registered SWA-eviction policy on every tree: jumping decode steps is exact."""
    rng = np.random.default_rng(page_size)
    reqs, convs = [], [list(rng.integers(0, 40, 100)) for _ in range(3)]
    for t in range(4):
        for c in range(3):
            out = list(rng.integers(0, 40, int(rng.integers(1, 700))))
            reqs.append((f"c{c}t{t}", convs[c], out))
            convs[c] = convs[c] + out + list(rng.integers(0, 40, 30))
    base = dict(
        page_size=page_size,
        full_tokens=6400,
        swa_tokens=2560 if swa == "none" else 1280,  # without decode eviction SWA grows faster
        window=64,
        tombstone=tombstone,
        swa_eviction=swa,
    )
    slow = replay_requests(reqs, CacheReplayConfig(**base, fast_forward=False, check_invariants=True))
    fast = replay_requests(reqs, CacheReplayConfig(**base, fast_forward=True, check_invariants=True))
    assert slow.evictions["calls"] > 0
    assert fast.records == slow.records
    assert fast.tree_stats == slow.tree_stats


@pytest.mark.parametrize("interval", [1, 7, 128])
@pytest.mark.parametrize("page", [1, 16, 64])
def test_interval_policy_closed_form_equals_generic_loop(interval, page):
    from policies.swa_eviction import IntervalEviction, SWAEvictionPolicy

    class Recording:
        def free_swa_pages(self, n):
            pass

    rng = np.random.default_rng(interval * page)
    for _ in range(50):
        prompt = int(rng.integers(1, 3000))
        cursor = int(rng.integers(0, prompt)) // page * page
        reqs = []
        outs = int(rng.integers(1, 50))
        for _ in range(2):
            r = ReqKV(rid="r", pages=np.zeros(0, np.int64), prompt_len=prompt, output_len=10**6)
            r.num_outputs = outs
            r.decode_batch_idx = outs - 1
            r.cache_protected_len = min(cursor, prompt // page * page)
            r.swa_evicted_seqlen = cursor
            reqs.append(r)
        pol = IntervalEviction(interval)
        ctx = DecodeContext(W, page, Recording(), 0)
        fast = pol.run_steps(reqs[0], ctx, 700)
        slow = SWAEvictionPolicy.run_steps(pol, reqs[1], ctx, 700)
        assert fast == slow
        assert reqs[0].swa_evicted_seqlen == reqs[1].swa_evicted_seqlen


@pytest.mark.parametrize("name", SWA_EVICTION.names())
def test_run_batch_equals_run_steps_per_request(name):
    """A policy's batch form (the interval policy skips requests with no trigger in range) gives
    each request's run_steps events, in batch order, and the same cursors."""
    from policies.swa_eviction import SWA_EVICTION

    class Recording:
        def free_swa_pages(self, n):
            pass

    rng = np.random.default_rng(11)
    pol = SWA_EVICTION.create(name)
    for page in (1, 16, 64):
        ctx = DecodeContext(W, page, Recording(), int(rng.integers(0, 500)))
        twins = []
        for _ in range(2):
            rng_i = np.random.default_rng(page)
            batch = []
            for _ in range(12):
                prompt = int(rng_i.integers(1, 3000))
                outs = int(rng_i.integers(0, 400))
                r = ReqKV(rid="r", pages=np.zeros(0, np.int64), prompt_len=prompt, output_len=10**6)
                r.num_outputs = outs
                r.decode_batch_idx = max(0, outs - 1)
                r.cache_protected_len = int(rng_i.integers(0, prompt)) // page * page
                r.swa_evicted_seqlen = r.cache_protected_len + int(rng_i.integers(0, 2)) * page
                batch.append(r)
            steps = [int(x) for x in rng_i.integers(0, 300, len(batch))]
            twins.append((batch, steps))
        (b0, s0), (b1, s1) = twins
        together = pol.run_batch(b0, ctx, s0)
        one_by_one = [ev for r, n in zip(b1, s1, strict=True) if n for ev in pol.run_steps(r, ctx, n)]
        assert together == one_by_one
        assert [r.swa_evicted_seqlen for r in b0] == [r.swa_evicted_seqlen for r in b1]
        if name in ("interval", "iteration"):
            assert together  # the draw reaches triggers
