"""Scenario tests of the HiCache tree (no oracle): the facts of HICACHE.md that a simulator
gets wrong most easily."""

from __future__ import annotations

import numpy as np
import pytest

from policies.hicache_write import HICACHE_WRITE_POLICIES
from simulator.cache_replay import WorkloadRequest
from simulator.errors import ConfigError
from simulator.radix.hicache_replay import HiCacheReplayConfig, build_hicache, replay_hicache
from simulator.request_kv import ReqKV


def _req(rid: str, tokens: list[int], out: int = 4) -> WorkloadRequest:
    return WorkloadRequest(rid, np.asarray(tokens, dtype=np.int64), len(tokens) - out, out)


def test_host_capacity_includes_the_allocatable_padding_page() -> None:
    """Fact 22: floor(device x ratio / page) x page + page."""
    assert HiCacheReplayConfig(full_tokens=2048, swa_tokens=1024, hicache_ratio=3).host_capacities() == (
        6145,
        3073,
    )
    cfg = HiCacheReplayConfig(page_size=16, full_tokens=3072, swa_tokens=1024, hicache_ratio=2)
    assert cfg.host_capacities()[0] == 6160


def test_hicache_size_splits_by_device_buffer_bytes() -> None:
    """Fact 2: 0.0002 GB on 2048/1024 tokens at 32/96 B per token -> 2500/1251."""
    cfg = HiCacheReplayConfig(full_tokens=2048, swa_tokens=1024, hicache_size=0.0002)
    assert cfg.host_capacities() == (2500, 1251)


def test_write_policies_are_registered() -> None:
    assert set(HICACHE_WRITE_POLICIES.names()) == {"write_through", "write_through_selective", "write_back"}
    assert HICACHE_WRITE_POLICIES.create("write_through_selective").write_through_threshold == 2
    with pytest.raises(ConfigError):
        HICACHE_WRITE_POLICIES.create("write_around")


def test_write_through_locks_the_path_until_the_ack() -> None:
    """Fact 18: the backup is queued, flushed at the step's end and acknowledged at the next
    step's event check; until then the request's whole path is protected."""
    cache = build_hicache(HiCacheReplayConfig(full_tokens=1024, swa_tokens=512, window=32))
    tree = cache.tree
    req = ReqKV(rid="a", pages=np.arange(100, 200, dtype=np.int64), prompt_len=99, output_len=1)
    cache.match(req)
    cache.admit(req)
    cache.alloc_for_extend(req)
    req.num_outputs = 1
    cache.release(req)
    assert tree.full_protected == 99 and tree.host_full.used() == 99  # backed up, not acked
    tree.flush_pending_backups()
    acked = tree.check_hicache_events()
    # the leaf was split at one window (SWA lock cap): a chain of two node backups
    assert (acked.d2h_full, acked.writes) == (99, 2)
    assert tree.full_protected == 0 and tree.full_evictable == 99
    assert tree.counts["write_acks"] == 2


def test_load_back_restores_an_evicted_prefix() -> None:
    """A conversation's prefix demoted to the host comes back as host hit and load-back."""
    base = list(range(1000, 1300))
    work = [_req("a", base + [1, 2, 3, 4])]
    work += [
        _req(f"x{i}", list(range(5000 + 400 * i, 5000 + 400 * i + 300)) + [9, 9, 9, 9]) for i in range(3)
    ]
    work += [_req("a2", base + [1, 2, 3, 4] + list(range(7000, 7020)))]
    res = replay_hicache(
        work, HiCacheReplayConfig(full_tokens=700, swa_tokens=400, window=32, check_invariants=True)
    )
    last = res["requests"][-1]
    assert last["device_prefix_len"] == 0 and last["host_hit_len"] > 0
    assert last["host_loaded_len"] == last["host_hit_len"] and last["prefix_len"] == last["host_loaded_len"]
    assert last["cached_tokens_host"] == last["host_loaded_len"]
    assert res["counts"]["demoted_nodes"] > 0 and res["counts"]["load_back_ok"] == 1


def test_selective_deletes_unbacked_leaves() -> None:
    """write_through_selective backs up only re-inserted nodes; others are deleted."""
    work = [_req(f"x{i}", list(range(5000 + 400 * i, 5000 + 400 * i + 300)) + [9, 9, 9, 9]) for i in range(4)]
    res = replay_hicache(
        work,
        HiCacheReplayConfig(
            full_tokens=700, swa_tokens=400, window=32, write_policy="write_through_selective"
        ),
    )
    assert res["counts"]["deleted_nodes"] > 0 and res["counts"].get("backup_nodes", 0) == 0


def test_acks_can_wait_for_the_engine() -> None:
    """An engine that times transfers acknowledges only finished operations: the path stays
    locked until then."""
    cache = build_hicache(HiCacheReplayConfig(full_tokens=1024, swa_tokens=512, window=32))
    tree = cache.tree
    req = ReqKV(rid="a", pages=np.arange(100, 140, dtype=np.int64), prompt_len=39, output_len=1)
    cache.match(req)
    cache.admit(req)
    cache.alloc_for_extend(req)
    req.num_outputs = 1
    cache.release(req)
    tree.flush_pending_backups()
    assert tree.inflight_ops() == ([(39, 39)], [])
    assert tree.check_hicache_events(write_finish_count=0).writes == 0
    assert tree.full_protected == 39
    assert tree.check_hicache_events().d2h_full == 39
    assert tree.full_protected == 0 and tree.inflight_ops() == ([], [])
