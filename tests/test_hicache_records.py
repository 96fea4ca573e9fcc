"""HiCache memory-op records: backups, loads, host frees and demotions on host page ids.

Replaying the records of a run on fresh host pools must reproduce the run's host free lists
(``HostKVCache.free_slots`` and its released chunks, in order), and recording must not change
what the cache does."""

from __future__ import annotations

import numpy as np
import pytest
from hicache_workloads import HiPools, hicache_workload

from simulator.cache_replay import requests_from_tokens
from simulator.kv_pages import HostFreeList, HostPageState
from simulator.memory_ops import MemoryOp, MemoryOpExecutor, OpKind
from simulator.radix.hicache_replay import HiCacheReplayConfig, replay_hicache

CASES = [("write_through", 16, 1.0), ("write_back", 1, 2.0), ("write_through_selective", 1, 1.0)]


def _run(policy: str, page: int, ratio: float, seed: int, record: bool) -> dict:
    pools = HiPools(page, 1024, 512, 64)
    reqs = hicache_workload(pools, seed)
    work = requests_from_tokens([(r["rid"], r["input_ids"], r["output_ids"]) for r in reqs], page)
    cfg = HiCacheReplayConfig(
        page_size=page, full_tokens=1024, swa_tokens=512, window=64, write_policy=policy,
        hicache_ratio=ratio, record_ops=record, check_invariants=True,
    )  # fmt: skip
    return replay_hicache(work, cfg)


def _same_snapshot(a: dict, b: dict) -> bool:
    for pool in ("full", "swa"):
        (fa, ra), (fb, rb) = a[pool], b[pool]
        if not np.array_equal(fa, fb) or len(ra) != len(rb):
            return False
        if not all(np.array_equal(x, y) for x, y in zip(ra, rb, strict=True)):
            return False
    return True


@pytest.mark.parametrize(("policy", "page", "ratio"), CASES)
def test_replaying_records_reproduces_host_free_lists(policy: str, page: int, ratio: float) -> None:
    kinds: set[OpKind] = set()
    for seed in range(4):
        res = _run(policy, page, ratio, seed, record=True)
        ex = res["ops"]
        kinds |= {op.kind for op in ex.ops}
        host = ex.host
        replay = MemoryOpExecutor(
            None, keep=False, host=HostPageState(host.pools[0].num_pages, host.pools[1].num_pages)
        )
        for op in ex.ops:
            replay.apply(op)
        assert _same_snapshot(replay.host.snapshot(), host.snapshot())
        # the page ids in use are the tree's host tokens
        assert int(host.pools[0].used.sum()) * page == res["final_sizes"]["host_full_used"]
        assert int(host.pools[1].used.sum()) * page == res["final_sizes"]["host_swa_used"]
    assert {OpKind.BACKUP_D2H, OpKind.HOST_FREE, OpKind.LOAD_H2D, OpKind.DEMOTE} <= kinds


@pytest.mark.parametrize(("policy", "page", "ratio"), CASES)
def test_recording_changes_nothing(policy: str, page: int, ratio: float) -> None:
    a = _run(policy, page, ratio, 7, record=False)
    b = _run(policy, page, ratio, 7, record=True)
    assert a["requests"] == b["requests"] and a["counts"] == b["counts"]


def test_host_free_list_follows_sglang_order() -> None:
    """``alloc`` takes the front; frees wait in released chunks until the front is short."""
    fl = HostFreeList(6)
    a = fl.alloc(2)
    b = fl.alloc(2)
    fl.free(a)
    assert list(fl.alloc(2)) == [4, 5]  # the released chunk is not merged while the front has room
    assert list(fl.alloc(2)) == [0, 1]
    assert fl.alloc(1) is None
    fl.free(b)
    with pytest.raises(AssertionError):
        fl.free(b)


def test_replay_of_a_wrong_record_fails() -> None:
    ex = MemoryOpExecutor(None, host=HostPageState(8, 4))
    ex.apply(MemoryOp(OpKind.BACKUP_D2H, 0, "", count=2, bound=0))
    with pytest.raises(AssertionError):
        ex.apply(MemoryOp(OpKind.BACKUP_D2H, 0, "", full=np.array([0, 1]), count=2, bound=0))
    with pytest.raises(AssertionError):
        ex.apply(MemoryOp(OpKind.LOAD_H2D, 0, "", full=np.array([7]), bound=0))
