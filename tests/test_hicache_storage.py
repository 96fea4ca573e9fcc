"""The HiCache L3 tier by hand-computed scenarios: the page-hash chain, the page store (hit
query with SWA's trailing pages, LRU cap), and the ``timeout`` prefetch policy, whose oracle
runs on wall-clock time and is therefore left out of the differential tests."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.radix.hicache_replay import HiCacheReplayConfig, build_hicache
from simulator.radix.hicache_storage import KV, SWA, PageStore, StorageParams, page_hash_chain
from simulator.request_kv import ReqKV


def test_hash_chain_names_the_whole_prefix():
    a = page_hash_chain(np.array([5, 6, 7, 8]), None)
    assert len(set(a)) == 4
    # continuing a chain from a page's hash equals hashing the whole prefix
    assert page_hash_chain(np.array([7, 8]), a[1]) == a[2:]
    # the same page after a different prefix has a different key
    assert page_hash_chain(np.array([9, 6]), None)[1] != a[1]
    assert page_hash_chain(np.array([], np.int64), None) == []


def test_hit_query_cuts_at_the_swa_trailing_window():
    store = PageStore(StorageParams())
    h = page_hash_chain(np.arange(10), None)
    for x in h[:8]:
        store.set(KV, x)
    assert store.hit_pages(h, 0) == 8  # FULL pages 0..7 stored, page 8 missing
    assert store.hit_pages(h, 3) == 0  # no SWA page at all
    for x in h[2:5]:
        store.set(SWA, x)
    # prefixes whose last 3 pages have SWA: q = 5 (pages 2, 3, 4)
    assert store.hit_pages(h, 3) == 5
    store.set(SWA, h[0])
    store.set(SWA, h[1])
    assert store.hit_pages(h, 8) == 5  # q <= 5: pages [0, q) all have SWA; q = 6 lacks page 5
    assert store.read_run(SWA, h[:7]) == 5


def test_file_cap_evicts_least_recently_used_down_to_the_ratio():
    store = PageStore(StorageParams(capacity_bytes=10, eviction_ratio=0.5, kv_page_bytes=2))
    h = page_hash_chain(np.arange(6), None)
    for x in h[:5]:
        assert store.set(KV, x)
    assert store.used_bytes == 10
    assert store.get(KV, h[0])  # touch: h[1] is now the least recently used
    assert store.set(KV, h[5])  # 12 > 10: evict LRU first until <= 0.5 x 10 - 2 = 3 bytes
    assert [store.exists(KV, x) for x in h] == [True, False, False, False, False, True]
    assert store.counts["pages_evicted"] == 4 and store.used_bytes == 4
    assert not PageStore(StorageParams(capacity_bytes=1, kv_page_bytes=2)).set(KV, h[0])


def _timeout_cache(threshold: int = 64):
    cfg = HiCacheReplayConfig(
        page_size=16,
        full_tokens=1024,
        swa_tokens=512,
        window=64,
        storage_backend="file",
        prefetch_policy="timeout",
        prefetch_threshold=threshold,
        prefetch_timeout_base=0.5,
        prefetch_timeout_per_ki_token=0.25,
    )
    cache = build_hicache(cfg)
    pages = np.arange(100, 121, dtype=np.int64)  # 21 pages
    st = cache.tree.storage
    hashes = page_hash_chain(pages[:20], None)
    for x in hashes:
        st.store.set(KV, x)
    for x in hashes[-4:]:  # one window (64 tokens = 4 pages) of SWA
        st.store.set(SWA, x)
    req = ReqKV(rid="r", pages=pages, prompt_len=321, output_len=2)
    return cache, st, req


def test_timeout_policy_cuts_an_unfinished_prefetch_after_base_plus_per_page():
    cache, st, req = _timeout_cache()
    tree = cache.tree
    st.arrive(cache, req)  # match_end 320 -> 20 pages requested from the root
    assert st.counts["prefetch_issued"] == 1 and st.prefetch_tokens_occupied == 320
    tree.check_hicache_events()  # hit query (20 pages) and host slots for it
    assert tree.host_full.used() == 320 and tree.host_swa.used() == 64
    # the first blocked poll starts the clock; deadline = 0.5 + 20 x 16/1024 x 0.25 = 0.578125 s
    st.now_s = 10.0
    assert st.ready("r") is None
    st.now_s = 10.578125
    assert st.ready("r") is None  # expires only strictly after the deadline
    st.now_s = 10.58
    assert st.ready("r") == (0, None)  # terminated before any page landed: nothing loaded
    assert "r" not in st.ongoing_prefetch and st.prefetch_tokens_occupied == 0
    tree.check_hicache_events()  # the I/O thread sees the termination, acks; release queued
    assert tree.host_full.used() == 320
    tree.check_hicache_events()  # the release queue sampled at this step frees the slots
    assert (tree.host_full.used(), tree.host_swa.used()) == (0, 0)
    assert len(list(tree.iter_nodes())) == 0


def test_timeout_policy_never_cuts_a_finished_prefetch():
    cache, st, req = _timeout_cache()
    tree = cache.tree
    st.arrive(cache, req)
    tree.check_hicache_events()
    assert st.ready("r") is None  # clock starts at t = 0
    tree.check_hicache_events()  # pages read and inserted as a host-only node
    st.now_s = 100.0
    assert st.ready("r") == (320, 0)
    assert (tree.host_full.used(), tree.host_swa.used()) == (320, 64)
    # one host-only node, split where the prefetched SWA window (the last 64 tokens) starts
    nodes = sorted(tree.iter_nodes(), key=tree._depth)
    assert [(x.length, x.full, x.full_host, x.swa_host) for x in nodes] == [
        (256, False, True, False),
        (64, False, True, True),
    ]
    cache.match(req)  # the prefetched window makes it a host hit
    assert (req.prefix_len, req.host_hit_length, req.swa_host_hit_length) == (0, 320, 64)


@pytest.mark.parametrize("policy, expect", [("best_effort", (0, None)), ("wait_complete", None)])
def test_best_effort_and_wait_complete_at_the_first_poll(policy, expect):
    cache, st, req = _timeout_cache()
    st.policy = __import__("policies.hicache_prefetch", fromlist=["x"]).make_prefetch_policy(policy)
    st.arrive(cache, req)
    cache.tree.check_hicache_events()
    assert st.ready("r") == expect


def test_a_window_short_of_whole_below_the_root_is_released_through_the_queue():
    """swa.py:_commit_prefetch drops a hit-shrunk SWA window below the root; its staging goes
    to SGLang's SWA release queue (FreeComponentHostSlot), freed by the next step's drain."""
    cache, st, _ = _timeout_cache(threshold=32)
    tree = cache.tree
    pages = np.arange(100, 121, dtype=np.int64)
    first = ReqKV(rid="a", pages=pages, prompt_len=8 * 16 + 1, output_len=2)
    st.store._lru.clear()
    hashes = page_hash_chain(pages[:14], None)
    for x in hashes[:10]:
        st.store.set(KV, x)
    for x in hashes[4:10]:
        st.store.set(SWA, x)
    st.arrive(cache, first)  # 8 pages from the root, window = last 4
    tree.check_hicache_events()
    assert st.ready("a") is None
    tree.check_hicache_events()
    assert st.ready("a") == (128, 0)
    assert (tree.host_full.used(), tree.host_swa.used()) == (128, 64)
    # the next turn asks 6 pages past the 8-page host anchor; only 2 are stored
    second = ReqKV(rid="b", pages=pages, prompt_len=14 * 16 + 1, output_len=2)
    st.arrive(cache, second)
    assert second.host_hit_length == 128 and st.ongoing_prefetch["b"].swa_keys == 4
    tree.check_hicache_events()  # hit 2 pages: 32 FULL slots, 2 pages of SWA staging
    assert (tree.host_full.used(), tree.host_swa.used()) == (160, 96)
    assert st.ready("b") is None
    tree.check_hicache_events()  # read and inserted; the 2-page window is not whole: dropped
    assert st.ready("b") == (32, 128)
    assert (tree.host_full.used(), tree.host_swa.used()) == (160, 96)  # still queued
    assert st.held_tokens() == (0, 32)
    tree.check_hicache_events()
    assert (tree.host_full.used(), tree.host_swa.used()) == (160, 64)
