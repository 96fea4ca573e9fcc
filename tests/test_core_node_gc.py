"""The compiled tree's nodes are not tracked by the cycle collector (``_core_node.pxd``): a
dropped tree must still free every node, or each run would leak its whole tree.

The tree's links (parent and children, the SWA LRU list and its sentinels) are reference cycles
among untracked objects, which the collector can never free: the tree's and the LRU list's
deallocs cut them. These tests hold a weak reference to every node a workload created, drop the
tree, collect, and require every one of them dead; without that teardown they fail.
"""

from __future__ import annotations

import gc
import os
import weakref

import numpy as np
import pytest

from policies.eviction_order import EVICTION_ORDERS
from simulator.radix.unified import compiled_tree_class

COMPILED = compiled_tree_class()


@pytest.fixture
def tree_cls():
    if COMPILED is None:
        if os.environ.get("KVPLAN_REQUIRE_COMPILED") == "1":
            pytest.fail("KVPLAN_REQUIRE_COMPILED=1 but simulator.radix._core_tree is not built")
        pytest.skip("the compiled tree core is not built")
    return COMPILED


class CountAllocator:
    """The allocator calls the tree makes, as counts (frees raise the available sizes)."""

    def __init__(self, page_size: int) -> None:
        self.page_size = page_size
        self.full = self.swa = 0

    def full_available_size(self) -> int:
        return self.full * self.page_size

    def swa_available_size(self) -> int:
        return self.swa * self.page_size

    def free_full_pages(self, n: int) -> None:
        self.full += n

    def free_swa_pages(self, n: int) -> None:
        self.swa += n


def grow(tree_cls, order: str = "lru", seed: int = 0):
    """A tree after a random mix of inserts, matches, locks, unlocks and evictions; the receipts
    still held and weak references to every node it ever had (deleted ones included)."""
    rng = np.random.default_rng(seed)
    tree = tree_cls(4, 9, CountAllocator(4), EVICTION_ORDERS.create(order))
    refs = [weakref.ref(tree.root), weakref.ref(tree.swa_lru.head), weakref.ref(tree.swa_lru.tail)]
    receipts = []
    bases = [rng.integers(0, 5, size=12) for _ in range(4)]
    for _ in range(300):
        base = bases[int(rng.integers(len(bases)))]
        key = np.concatenate([base[: int(rng.integers(1, 13))], rng.integers(0, 3, size=3)])
        key = key.astype(np.int64)
        roll = rng.random()
        if roll < 0.45:
            tree.insert(key, 0, 0, int(rng.integers(0, len(key) + 1)) * 4)
        elif roll < 0.65:
            receipts.append(tree.lock(tree.match_prefix(key).last_node))
        elif roll < 0.8 and receipts:
            tree.unlock(receipts.pop(int(rng.integers(len(receipts)))))
        else:
            tree.evict_for_alloc(int(rng.integers(0, 40)), int(rng.integers(0, 40)))
        refs += [weakref.ref(x) for x in tree.iter_nodes()]
    return tree, receipts, refs


@pytest.mark.parametrize("order", ["lru", "lfu", "slru"])
def test_a_dropped_tree_frees_every_node(tree_cls, order) -> None:
    tree, receipts, refs = grow(tree_cls, order)
    assert len({id(r) for r in refs}) > 50 and tree.stats()
    assert not gc.is_tracked(tree.root)  # the point of no_gc: the collector skips nodes
    del tree, receipts
    gc.collect()
    alive = [r() for r in refs if r() is not None]
    assert alive == []


def test_a_node_held_past_its_tree_is_cut_loose_and_freed(tree_cls) -> None:
    """A request may keep its last node (and lock receipt) after the tree is gone."""
    tree, receipts, refs = grow(tree_cls, seed=3)
    held = tree.match_prefix(np.arange(8, dtype=np.int64) % 5).last_node
    del tree
    gc.collect()
    assert held.parent is None and held.children == {}
    keep = {id(held)} | {id(rc.node) for rc in receipts}
    assert {id(r()) for r in refs if r() is not None} <= keep
    del held, receipts
    gc.collect()
    assert [r() for r in refs if r() is not None] == []


def test_an_lru_list_alone_is_freed(tree_cls) -> None:
    from simulator.radix._core_node import SwaLRUList

    lru = SwaLRUList()
    refs = [weakref.ref(lru.head), weakref.ref(lru.tail)]
    del lru
    gc.collect()
    assert [r() for r in refs if r() is not None] == []
