"""HiCache memory-op records: backups, loads, host frees and demotions on device and host page ids.

Replaying the records of a run on fresh device and host pools must reproduce the run's device
free lists (FULL, SWA, the full-to-SWA mapping) and host free lists (``HostKVCache.free_slots``
and its released chunks, in order), and recording must not change what the cache does."""

from __future__ import annotations

import numpy as np
import pytest
from hicache_workloads import HiPools, hicache_workload

from simulator.cache_replay import requests_from_tokens
from simulator.kv_pages import HostFreeList, HostPageState, SWAPageState
from simulator.memory_ops import MemoryOp, MemoryOpExecutor, OpKind
from simulator.radix.hicache_replay import HiCacheReplayConfig, replay_hicache

CASES = [
    (policy, page, ratio)
    for policy in ("write_through", "write_through_selective", "write_back")
    for page, ratio in ((1, 2.0), (16, 1.0))
]


L3_CASES = [  # the oracle's L3 CI configurations (page 16, prefetch threshold 64)
    ("write_through", 1.0, "wait_complete", 8),
    ("write_through_selective", 1.0, "best_effort", 20),
    ("write_back", 2.0, "wait_complete", 20),
]


def _run(policy: str, page: int, ratio: float, seed: int, record: bool, max_conv: int = 8, **l3) -> dict:
    pools = HiPools(page, 1024, 512, 64)
    reqs = hicache_workload(pools, seed, max_conv)
    work = requests_from_tokens([(r["rid"], r["input_ids"], r["output_ids"]) for r in reqs], page)
    cfg = HiCacheReplayConfig(
        page_size=page, full_tokens=1024, swa_tokens=512, window=64, write_policy=policy,
        hicache_ratio=ratio, record_ops=record, check_invariants=True, **l3,
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


def _fresh(ex: MemoryOpExecutor) -> MemoryOpExecutor:
    s, host = ex.pages, ex.host
    return MemoryOpExecutor(
        SWAPageState(s.full.num_pages, s.swa.num_pages, s.page_size),
        keep=False,
        host=HostPageState(host.pools[0].num_pages, host.pools[1].num_pages),
    )


def _replays_to(ex: MemoryOpExecutor, ops: list[MemoryOp]) -> bool:
    """Apply ``ops`` on fresh device and host pools; True iff they end in ``ex``'s state."""
    replay = _fresh(ex)
    for op in ops:
        replay.apply(op)
    dev_a, dev_b = replay.pages.snapshot(), ex.pages.snapshot()
    same_dev = all(np.array_equal(dev_a[k], dev_b[k]) for k in dev_a)
    return same_dev and _same_snapshot(replay.host.snapshot(), ex.host.snapshot())


@pytest.mark.parametrize(("policy", "page", "ratio"), CASES)
def test_replaying_records_reproduces_device_and_host_free_lists(
    policy: str, page: int, ratio: float
) -> None:
    kinds: set[OpKind] = set()
    for seed in range(4):
        res = _run(policy, page, ratio, seed, record=True)
        ex = res["ops"]
        kinds |= {op.kind for op in ex.ops}
        assert _replays_to(ex, ex.ops)
        sizes = res["final_sizes"]
        # the page ids in use are the tree's and the allocator's tokens
        assert int(ex.host.pools[0].used.sum()) * page == sizes["host_full_used"]
        assert int(ex.host.pools[1].used.sum()) * page == sizes["host_swa_used"]
        full_free, swa_free = ex.pages.free_counts()
        assert full_free * page == sizes["full_available"] and swa_free * page == sizes["swa_available"]
    hicache = {OpKind.BACKUP_D2H, OpKind.HOST_FREE, OpKind.LOAD_H2D, OpKind.DEMOTE}
    assert hicache | {OpKind.ALLOC, OpKind.FREE} <= kinds


@pytest.mark.parametrize(("policy", "page", "ratio"), CASES)
def test_recording_changes_nothing(policy: str, page: int, ratio: float) -> None:
    a = _run(policy, page, ratio, 7, record=False)
    b = _run(policy, page, ratio, 7, record=True)
    assert a["requests"] == b["requests"] and a["counts"] == b["counts"]
    assert a["final_sizes"] == b["final_sizes"] and a["tree"] == b["tree"]


@pytest.mark.parametrize(("policy", "ratio", "prefetch", "max_conv"), L3_CASES)
def test_l3_prefetch_records_replay_and_change_nothing(
    policy: str, ratio: float, prefetch: str, max_conv: int
) -> None:
    """With the L3 tier, prefetched host slots are STORAGE_PREFETCH records and the nodes they
    become carry their host page ids through splits, tails and SWA staging."""
    l3 = dict(storage_backend="sim", prefetch_policy=prefetch, prefetch_threshold=64)
    kinds: set[OpKind] = set()
    for seed in range(3):
        res = _run(policy, 16, ratio, seed, True, max_conv, **l3)
        ex = res["ops"]
        kinds |= {op.kind for op in ex.ops}
        assert _replays_to(ex, ex.ops)
        assert int(ex.host.pools[0].used.sum()) * 16 == res["final_sizes"]["host_full_used"]
        assert int(ex.host.pools[1].used.sum()) * 16 == res["final_sizes"]["host_swa_used"]
        plain = _run(policy, 16, ratio, seed, False, max_conv, **l3)
        assert plain["requests"] == res["requests"] and plain["counts"] == res["counts"]
    assert {OpKind.STORAGE_PREFETCH, OpKind.LOAD_H2D, OpKind.HOST_FREE} <= kinds


@pytest.mark.parametrize("policy", ["write_through", "write_back"])
def test_dropping_any_record_kind_breaks_the_replay(policy: str) -> None:
    """Every kind the run emits carries page ids the replay needs: without it the replay fails
    or ends in another state (the loads' device pages, the backups' host pages, ...)."""
    res = _run(policy, 1, 2.0, 1, record=True)
    ex = res["ops"]
    for kind in sorted({op.kind for op in ex.ops} - {OpKind.GROUP_BEGIN, OpKind.GROUP_END}):
        kept = [op for op in ex.ops if op.kind != kind]
        try:
            same = _replays_to(ex, kept)
        except (AssertionError, IndexError):
            same = False
        assert not same, f"the replay does not need the {kind.name} records"
    # a load whose device pages are dropped from its SWA half cannot map them
    loads = [i for i, op in enumerate(ex.ops) if op.kind == OpKind.LOAD_H2D and op.bound == 1]
    assert loads
    i = loads[0]
    broken = [*ex.ops[:i], MemoryOp(OpKind.LOAD_H2D, 0, "", host=ex.ops[i].host, bound=1), *ex.ops[i + 1 :]]
    with pytest.raises(AssertionError):
        _replays_to(ex, broken)


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
        ex.apply(MemoryOp(OpKind.BACKUP_D2H, 0, "", host=np.array([0, 1]), count=2, bound=0))
    with pytest.raises(AssertionError):
        ex.apply(MemoryOp(OpKind.LOAD_H2D, 0, "", host=np.array([7]), bound=0))


def test_op_log_round_trip_keeps_host_ids_and_reads_version_1(tmp_path) -> None:
    """Version 2 stores the host page ids (a replay from the file checks every one); a
    version-1 log, without ``host_*`` arrays, still reads."""
    import json

    from simulator.oplog import read_op_log, write_recording

    ex = _run("write_back", 16, 2.0, 2, record=True)["ops"]
    path = write_recording(tmp_path / "hc.npz", ex, window=64)
    log = read_op_log(path)
    assert log.header["version"] == 2 and log.header["hicache"]["host_pages"] == [
        p.num_pages for p in ex.host.pools
    ]
    assert [len(op.host) for op in log.ops] == [len(op.host) for op in ex.ops]
    assert _replays_to(ex, log.ops)
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files if not k.startswith("host_")}
    header = json.loads(str(arrays["header"]))
    header["version"] = 1
    arrays["header"] = np.array(json.dumps(header))
    old = tmp_path / "v1.npz"
    np.savez_compressed(old, **arrays)
    assert all(len(op.host) == 0 for op in read_op_log(old).ops)
