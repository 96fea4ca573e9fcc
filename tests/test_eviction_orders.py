"""FULL eviction orders on small trees whose victim sequences are computed by hand.

SGLang's own orders are also checked against SGLang's tree through the oracle
(tests/test_differential_oracle.py::test_eviction_order_matches_sglang); orders SGLang lacks are
proved here only, and :func:`test_every_registered_order_is_proved_somewhere` fails for a
registered order that has neither.

The scenario tree (page 1, W = 4, pools far from full), built by three prefill-only requests of
13 tokens each (the tree gets 12 of them), in this order:

* ``A`` = tokens 200..212, SWA live: a 12-token leaf split for the SWA lock into ``U_A`` (200..207,
  8 tokens) and ``A1`` (208..211, 4 tokens).
* ``B`` = tokens 0..12 with its first 8 SWA slots freed by decode (cursor 8): ``T_B`` (0..7, an SWA
  tombstone) and ``B1`` (8..11, live).
* ``C`` = tokens 100..112, like ``A``: ``U_C`` (100..107) and ``C1`` (108..111).

Each leaf has ``hit_count`` 1 (its insert), each upper part 0. Victims are named by their first
token; ``evict_for_alloc(1, 0)`` is called until the tree is empty, one leaf per call.
"""

from __future__ import annotations

import numpy as np
import pytest
from oracle_harness import SGLANG_EVICTION_POLICIES

from policies.eviction_order import EVICTION_ORDERS, LRU, TLRU, WindowAware
from policies.tombstone import TOMBSTONING
from simulator.cache_replay import CacheReplayConfig, replay_requests
from simulator.errors import ConfigError
from simulator.kv_allocator import SWAKVAllocator
from simulator.radix.cache import UnifiedSWACache, make_cache
from simulator.request_kv import ReqKV

W = 4
A1, U_A, B1, T_B, C1, U_C = 208, 200, 8, 0, 108, 100


def _serve(cache: UnifiedSWACache, first: int, swa_freed: int = 0) -> None:
    """One prefill-only request of 13 tokens starting at ``first``; ``swa_freed`` leading SWA
    slots freed as decode would have, so the tree tombstones them on insert."""
    req = ReqKV(
        rid=str(first), pages=np.arange(first, first + 13, dtype=np.int64), prompt_len=12, output_len=1
    )
    cache.match(req)
    cache.lock_prefix(req)
    cache.alloc_for_extend(req)
    if swa_freed:
        req.swa_evicted_seqlen = swa_freed
        cache.allocator.free_swa_pages(swa_freed)
    req.num_outputs = 1
    cache.release(req)


def _scenario(order) -> UnifiedSWACache:
    cache = UnifiedSWACache(SWAKVAllocator(128, 128, 1), W, order)
    _serve(cache, 200)
    _serve(cache, 0, swa_freed=8)
    _serve(cache, 100)
    return cache


def _victims(cache: UnifiedSWACache) -> list[int]:
    tree = cache.tree
    seq = []
    while tree.device_leaves:
        before = {n.key.item(0) for n in tree.iter_nodes() if n is not tree.root}
        res = tree.evict_for_alloc(1, 0)
        gone = before - {n.key.item(0) for n in tree.iter_nodes() if n is not tree.root}
        assert len(gone) == 1 and res.full_evicted in (4, 8)
        seq.append(gone.pop())
    return seq


HAND_SCENARIOS: dict[str, tuple[dict, list[int], str]] = {
    # name: (factory kwargs, victim sequence, why)
    "lru": ({}, [A1, U_A, B1, T_B, C1, U_C], "oldest access first; a parent follows its last child"),
    "mru": ({}, [C1, U_C, B1, T_B, A1, U_A], "newest access first"),
    "fifo": ({}, [A1, U_A, B1, T_B, C1, U_C], "a split's upper part keeps its child's creation time"),
    "filo": ({}, [C1, U_C, B1, T_B, A1, U_A], "newest created first"),
    "lfu": ({}, [A1, U_A, B1, T_B, C1, U_C], "the leaves tie at one hit; the upper parts have none"),
    "slru": ({}, [A1, U_A, B1, T_B, C1, U_C], "nobody reaches two hits: all probationary, LRU"),
    "priority": ({}, [A1, U_A, B1, T_B, C1, U_C], "all priority 0: LRU"),
    "tlru": ({}, [A1, U_A, B1, T_B, C1, U_C], "threshold 0, estimate 0: no leaf is TEL-safe: LRU"),
    # window-aware, key = L + (hits + 1) * recompute / length, ties by access time:
    #   A1, C1: live parents cover W, recompute 4 -> 2 * 4 / 4 = 2; B1: its parent is a
    #   tombstone, so the whole 12-token path is lost -> 2 * 12 / 4 = 6.
    #   A1 (2, oldest) goes, L = 2; U_A: 2 + 1 * 8 / 8 = 3 < C1 2 + 2 = 4 < B1 8 -> U_A, L = 3;
    #   C1 3 + 2 = 5 < B1 9 -> C1, L = 5; U_C 5 + 1 = 6 < B1 11 -> U_C; then B1, T_B.
    "window-aware": ({}, [A1, U_A, C1, U_C, B1, T_B], "cheap-to-recompute branches go first"),
}


def test_every_registered_order_is_proved_somewhere():
    """SGLang's orders run against the oracle; every other registered order needs a scenario."""
    unproved = [
        n for n in EVICTION_ORDERS.names() if n not in SGLANG_EVICTION_POLICIES and n not in HAND_SCENARIOS
    ]
    assert unproved == [], f"eviction orders with neither an oracle check nor a hand scenario: {unproved}"


@pytest.mark.parametrize("name", sorted(HAND_SCENARIOS))
def test_hand_computed_victim_sequence(name):
    kwargs, expected, why = HAND_SCENARIOS[name]
    cache = _scenario(EVICTION_ORDERS.create(name, **kwargs))
    stats = cache.tree.stats()
    assert (stats["nodes"], stats["tombstones"]) == (6, 1)
    assert _victims(cache) == expected, why
    assert cache.tree.counters.full_evicted == 36


def test_tlru_evicts_tel_safe_leaves_first_and_keeps_the_high_water_mark():
    """threshold 4: a branch of depth 12 needs 12 - 4 = 8 tokens cached. Each leaf sits on an
    8-token parent, so every leaf is TEL-safe (-1) and goes first, oldest first; an upper part
    (0 tokens above it, budget 8) is not, and the three follow in LRU order."""
    order = TLRU(threshold=4)
    cache = _scenario(order)
    u_a = next(n for n in cache.tree.iter_nodes() if n.length and n.key.item(0) == U_A)
    assert (order.cached_len[u_a.id], order.history_len[u_a.id]) == (8, 12)
    assert _victims(cache) == [A1, B1, C1, U_A, T_B, U_C]
    # deleted nodes are forgotten; the root keeps the tree's deepest insert
    assert order.cached_len == {} and order.history_len == {cache.tree.root.id: 12}


def test_tlru_high_water_mark_survives_eviction_of_the_tail():
    order = TLRU(threshold=8)
    cache = _scenario(order)
    tree = cache.tree
    u_a = next(n for n in tree.iter_nodes() if n.length and n.key.item(0) == U_A)
    tree.evict_for_alloc(1, 0)  # A1 (TEL-safe, oldest)
    assert u_a.parent is tree.root and not u_a.children
    # L stays 12 (not the 8 now resident): budget 12 - 8 = 4 > 0 cached above U_A -> not safe
    assert order.history_len[u_a.id] == 12
    assert order.priority(u_a, tree)[0] == 0


def test_lazy_heap_reports_each_victim_to_the_order():
    """The lazy heap (monotone orders) must call ``on_evicted`` as the per-call heap does."""

    class Recording(LRU):
        def __init__(self) -> None:
            self.keys: list = []

        def on_evicted(self, key) -> None:
            self.keys.append(key)

    class RecordingPerCallHeap(Recording):
        monotone = False

    lazy, per_call = Recording(), RecordingPerCallHeap()
    lazy_cache, per_call_cache = _scenario(lazy), _scenario(per_call)
    assert lazy_cache.tree._lazy_heap and not per_call_cache.tree._lazy_heap
    assert _victims(lazy_cache) == _victims(per_call_cache) == HAND_SCENARIOS["lru"][1]
    assert len(per_call.keys) == 6
    assert lazy.keys == per_call.keys


def test_window_aware_inflation_ages_with_each_victim():
    order = WindowAware()
    cache = _scenario(order)
    _victims(cache)
    assert order.inflation > 0


@pytest.mark.parametrize("name", [n for n in EVICTION_ORDERS.names() if n != "lru"])
def test_legacy_tree_refuses_orders_it_cannot_honour(name):
    """SGLang 0.5.15's SWARadixCache evicts in LRU order only; asking it for another order used
    to be ignored silently (lru, lfu and mru gave the same results)."""
    legacy = TOMBSTONING.create("legacy")
    with pytest.raises(ConfigError, match=rf"--radix-eviction-policy '{name}'.*--tombstone legacy.*lru"):
        make_cache(legacy, SWAKVAllocator(64, 64, 1), W, EVICTION_ORDERS.create(name))
    cfg = CacheReplayConfig(full_tokens=64, swa_tokens=64, window=W, tombstone="legacy", eviction_policy=name)
    with pytest.raises(ConfigError, match="lru"):
        replay_requests([("a", [1, 2, 3], [4])], cfg)
    make_cache(TOMBSTONING.create("unified"), SWAKVAllocator(64, 64, 1), W, EVICTION_ORDERS.create(name))


def test_legacy_tree_accepts_lru():
    make_cache(TOMBSTONING.create("legacy"), SWAKVAllocator(64, 64, 1), W, EVICTION_ORDERS.create("lru"))
