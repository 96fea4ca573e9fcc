"""The compiled unified tree (``simulator/radix/_core_tree.pyx``) equals the pure-Python one, bit
for bit.

Three levels, each run through both classes and compared exactly: a seeded random walk of tree
calls (match, insert with and without a locked prefix, lock, unlock, eviction) that compares every
node's fields, the SWA LRU order, the D-leaf set, the counters, the ledgers and every allocator
call after each step, for every registered eviction order, counting pages and recording page
ids; the cache replay of the oracle tests' generated workloads (records, counters, memory-op
log); and a short simulation (frames, summary, counters).

Where the extension is not built the compiled half is skipped, unless
``KVPLAN_REQUIRE_COMPILED=1`` (CI after installing a compiler), which makes that a failure.
"""

from __future__ import annotations

import heapq
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from workload_gen import Workload, workloads_for_page

import simulator.radix.cache as cache_mod
from policies.eviction_order import EVICTION_ORDERS
from simulator.cache_replay import CacheReplayConfig, replay_requests
from simulator.radix.unified import PureUnifiedSWARadixTree, compiled_tree_class

COMPILED = compiled_tree_class()
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def compiled():
    if COMPILED is None:
        if os.environ.get("KVPLAN_REQUIRE_COMPILED") == "1":
            pytest.fail("KVPLAN_REQUIRE_COMPILED=1 but simulator.radix._core_tree is not built")
        pytest.skip("the compiled tree core is not built (no Cython or C compiler at install)")
    return COMPILED


def test_default_class_follows_the_environment() -> None:
    """``UnifiedSWARadixTree`` is the compiled class where built, unless KVPLAN_PURE_PYTHON=1."""
    import simulator.radix.unified as unified

    if os.environ.get("KVPLAN_PURE_PYTHON") == "1" or COMPILED is None:
        assert unified.UnifiedSWARadixTree is PureUnifiedSWARadixTree
    else:
        assert unified.UnifiedSWARadixTree is COMPILED
    assert cache_mod.UnifiedSWARadixTree is unified.UnifiedSWARadixTree


def test_falls_back_to_pure_python_without_the_extension() -> None:
    """An unbuilt (or unloadable) extension leaves the pure-Python class in place."""
    code = (
        "import sys; sys.modules['simulator.radix._core_tree'] = None\n"
        "import simulator.radix.unified as u, simulator.radix.cache as c\n"
        "assert u.compiled_tree_class() is None\n"
        "assert c.UnifiedSWARadixTree is u.UnifiedSWARadixTree is u.PureUnifiedSWARadixTree\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "KVPLAN_PURE_PYTHON"}
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env=env)


# ---------------------------------------------------------------- a random walk of tree calls
class LogAllocator:
    """Stands in for SWAKVAllocator: logs every call; frees raise the available sizes."""

    def __init__(self, page_size: int) -> None:
        self.page_size = page_size
        self.log: list = []
        self.full = self.swa = 0

    def full_available_size(self) -> int:
        return self.full * self.page_size

    def swa_available_size(self) -> int:
        return self.swa * self.page_size

    def free_full_pages(self, n: int) -> None:
        self.log.append(("free_full", n))
        self.full += n

    def free_swa_pages(self, n: int) -> None:
        self.log.append(("free_swa", n))
        self.swa += n

    def apply_op(self, kind, reason, full=None, **fields) -> None:
        src = fields.get("src")
        self.log.append((str(kind), reason, full.tolist(), None if src is None else src.tolist()))
        self.full += len(full)
        self.swa += len(full)


def snapshot(tree, alloc: LogAllocator) -> tuple:
    """Everything observable about the tree (nodes by id, in walk order) and the allocator."""
    nodes = [
        (
            x.id,
            x.parent.id,
            x.key.tolist(),
            x.length,
            x.swa,
            x.full_lock,
            x.swa_lock,
            x.swa_uuid,
            x.last_access_time,
            x.creation_time,
            x.hit_count,
            x.priority,
            None if x.value is None else x.value.tolist(),
            list(x.children),
        )
        for x in tree.iter_nodes()
    ]
    ledgers = (tree.full_evictable, tree.full_protected, tree.swa_evictable, tree.swa_protected)
    return (
        nodes,
        [x.id for x in tree.swa_lru.iter_mru()],
        tree.swa_lru.size,
        sorted(x.id for x in tree.device_leaves),
        vars(tree.counters),
        ledgers,
        tree._time,
        tree.stats(),
        list(alloc.log),
    )


#: how often the walk matches, inserts, inserts under a lock, locks a match, unlocks and evicts
MIX = (0.2, 0.3, 0.2, 0.05, 0.1, 0.15)


def walk(tree_cls, order_name: str, page_size: int, record: bool, seed: int, steps: int = 400, mix=MIX):
    """Yield the snapshot after each of ``steps`` random tree calls (and what each returned)."""
    rng = np.random.default_rng(seed)
    alloc = LogAllocator(page_size)
    window = int(rng.choice([page_size, 3 * page_size, 8 * page_size + 1]))
    tree = tree_cls(page_size, window, alloc, EVICTION_ORDERS.create(order_name))
    bases = [rng.integers(0, 6, size=int(rng.integers(1, 12))) for _ in range(6)]
    receipts: list = []
    next_page = [1000]

    def make_key() -> np.ndarray:
        base = bases[int(rng.integers(len(bases)))]
        cut = int(rng.integers(0, len(base) + 1))
        return np.concatenate([base[:cut], rng.integers(0, 4, size=int(rng.integers(0, 6)))]).astype(np.int64)

    def values_for(key: np.ndarray):
        if not record:
            return None
        v = np.arange(next_page[0], next_page[0] + len(key), dtype=np.int64)
        next_page[0] += len(key)
        return v

    for _ in range(steps):
        op = rng.choice(["match", "insert", "insert_locked", "lock", "unlock", "evict"], p=mix)
        out = None
        if op == "match":
            m = tree.match_prefix(make_key())
            out = (m.device_prefix_len, m.last_node.id, m.full_kv_hit_length, m.swa_branching_seqlen)
        elif op == "insert":
            key = make_key()
            cursor = int(rng.integers(0, len(key) + 1)) * page_size
            total, node = tree.insert(key, 0, 0, cursor, values=values_for(key), reason="r")
            out = (total, node.id)
        elif op == "insert_locked":
            key = make_key()
            m = tree.match_prefix(key)
            receipt = tree.lock(m.last_node)
            fp = tree.lock_footprint(m.last_node)
            longer = np.concatenate([key, rng.integers(0, 4, size=int(rng.integers(0, 4)))]).astype(np.int64)
            cursor = int(rng.integers(0, len(longer) + 1)) * page_size
            total, node = tree.insert(
                longer,
                m.device_prefix_len,
                m.device_prefix_len,
                cursor,
                protected_node=m.last_node,
                values=values_for(longer),
                reason="q",
            )
            receipts.append(receipt)
            if rng.random() < 0.5:  # re-lock on the insert's end, as a chunked prefill does
                tree.unlock(receipts.pop())
                receipts.append(tree.lock(node))
            out = (total, node.id, fp, receipt.swa_uuid, tree.path_length(node))
        elif op == "lock":  # a matched prefix, or a D-leaf (lock churn on leaves)
            leaves = sorted(tree.device_leaves, key=lambda x: x.id)
            if leaves and rng.random() < 0.5:
                node = leaves[int(rng.integers(len(leaves)))]
            else:
                node = tree.match_prefix(make_key()).last_node
            receipts.append(tree.lock(node))
            out = (node.id, receipts[-1].swa_uuid)
        elif op == "unlock" and receipts:
            tree.unlock(receipts.pop(int(rng.integers(len(receipts)))))
        elif op == "evict":
            full, swa = (int(x) * page_size for x in rng.integers(0, 10, size=2))
            res = tree.evict_for_alloc(full, swa)
            out = (res.full_evicted, res.swa_evicted)
        yield op, out, snapshot(tree, alloc)


@pytest.mark.parametrize("record", [False, True], ids=["count", "record"])
@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("order", EVICTION_ORDERS.names())
def test_random_walk_is_bit_for_bit_equal(compiled, order: str, page_size: int, record: bool) -> None:
    for seed in range(3):
        pure = walk(PureUnifiedSWARadixTree, order, page_size, record, seed)
        fast = walk(compiled, order, page_size, record, seed)
        for i, (a, b) in enumerate(zip(pure, fast, strict=True)):
            assert a == b, f"seed {seed}, step {i}: {a[0]} differs"


@pytest.mark.parametrize("order", ["lru", "lfu"])
def test_lock_churn_walk_rebuilds_the_lazy_heap_equally(compiled, monkeypatch, order: str) -> None:
    """Many lock/unlock cycles and few evictions: stale heap entries pile up until the lazy
    heap is rebuilt from the D-leaf set (at least once here, counted on the pure class)."""
    import simulator.radix.unified as unified

    rebuilds = []
    heapify = heapq.heapify
    monkeypatch.setattr(unified.heapq, "heapify", lambda h: rebuilds.append(heapify(h)))
    churn = (0.03, 0.03, 0.02, 0.45, 0.45, 0.02)
    pure = walk(PureUnifiedSWARadixTree, order, 1, False, seed=8, steps=1500, mix=churn)
    fast = walk(compiled, order, 1, False, seed=8, steps=1500, mix=churn)
    for i, (a, b) in enumerate(zip(pure, fast, strict=True)):
        assert a == b, f"step {i}: {a[0]} differs"
    assert rebuilds


def test_random_walk_evicts_and_heals(compiled) -> None:
    """The walk reaches the paths it is meant to compare (guards against a vacuous test)."""
    *_, (_, _, snap) = walk(compiled, "lru", 1, False, seed=0)
    counters = snap[4]
    assert counters["leaves_deleted"] > 10 and counters["tombstones_created"] > 10
    assert counters["tombstones_healed"] > 0 and counters["splits"] > 10


# ---------------------------------------------------------------- the oracle tests' workloads
def _replay(monkeypatch, tree_cls, wl: Workload, order: str, record: bool):
    monkeypatch.setattr(cache_mod, "UnifiedSWARadixTree", tree_cls)
    s = wl.setting
    cfg = CacheReplayConfig(
        page_size=s.page_size,
        full_tokens=s.full_tokens,
        swa_tokens=s.swa_tokens,
        window=s.window,
        eviction_policy=order,
        check_invariants=True,
        record_ops=record,
    )
    result = replay_requests(wl.replay_requests(), cfg)
    ops = None if result.ops is None else repr(result.ops.ops)
    return result.records, result.summary, ops


@pytest.mark.parametrize("page_size", [1, 16])
def test_generated_workloads_replay_equal(compiled, monkeypatch, page_size: int) -> None:
    @settings(
        max_examples=25,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(wl=workloads_for_page(page_size))
    def check(wl: Workload) -> None:
        for order, record in (("lru", True), ("lfu", False), ("mru", False), ("window-aware", False)):
            pure = _replay(monkeypatch, PureUnifiedSWARadixTree, wl, order, record)
            fast = _replay(monkeypatch, compiled, wl, order, record)
            assert pure == fast, (order, wl.summary())

    check()


# ---------------------------------------------------------------- a simulation
def test_simulation_equal(compiled, monkeypatch) -> None:
    """A short run with a small pool (evictions, tombstones, retractions): frames, summary and
    counters are equal."""
    from simulator.engine.config import SimConfig
    from simulator.engine.metrics import Recorder
    from simulator.engine.simulate import simulate
    from traces import generate_bench_multiturn
    from traces.generators.bench_multiturn import BenchMultiturnArgs

    workload = BenchMultiturnArgs(
        num_clients=16, max_parallel=16, request_length=400, output_length=300, num_rounds=3, seed=5
    )
    cfg = SimConfig(model="gpt-oss-120b", gpu="H200", tp=8, page_size=16, max_total_tokens=30_000, seed=5)
    runs = []
    for cls in (PureUnifiedSWARadixTree, compiled):
        monkeypatch.setattr(cache_mod, "UnifiedSWARadixTree", cls)
        rec = Recorder.from_config(cfg)
        server = simulate(generate_bench_multiturn(workload), cfg, rec)
        assert type(server.cache.tree) is cls
        frames = {k: v.to_dict("list") for k, v in rec.frames().items()}
        runs.append((rec.summary(), frames, rec.counters))
    assert runs[0][2]["tree_leaves_deleted"] > 0 and runs[0][2]["tree_tombstones_created"] > 0
    assert repr(runs[0]) == repr(runs[1])
