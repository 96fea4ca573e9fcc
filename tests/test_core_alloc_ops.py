"""The compiled tree calls the compiled allocator in C (``_core_alloc.pyx``) and Python otherwise.

The C path is taken only for an allocator of exactly the compiled ``SWAKVAllocator`` class; a
subclass (which may override a free) and a tree whose allocator loads as source (pure mode, or
a build older than ``kv_allocator.py``) go through Python. Both paths move the same counters.
The last test loads the compiled tree in a process where ``simulator.kv_allocator`` is source:
a tree that cimported the allocator class itself would fail to import there (its C layout check).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from policies.eviction_order import LRU
from simulator.kv_allocator import SWAKVAllocator
from simulator.radix.unified import compiled_tree_class

COMPILED = compiled_tree_class()
ROOT = Path(__file__).resolve().parents[1]
PAGE = 4


@pytest.fixture
def compiled():
    if COMPILED is None:
        if os.environ.get("KVPLAN_REQUIRE_COMPILED") == "1":
            pytest.fail("KVPLAN_REQUIRE_COMPILED=1 but simulator.radix._core_tree is not built")
        pytest.skip("the compiled tree core is not built")
    return COMPILED


class CountingAllocator(SWAKVAllocator):
    """A subclass: the tree must call its (overridden) frees through Python."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.calls: list[tuple[str, int]] = []

    def free_full_pages(self, n: int) -> None:
        self.calls.append(("full", n))
        super().free_full_pages(n)

    def free_swa_pages(self, n: int) -> None:
        self.calls.append(("swa", n))
        super().free_swa_pages(n)


def fill_and_evict(tree_class, alloc) -> tuple:
    """Insert three requests' rows (the tree then owns their pages), evict them all."""
    tree = tree_class(PAGE, 8, alloc, LRU())
    for first in (0, 100, 200):
        pages = np.arange(first, first + 6, dtype=np.int64)
        alloc.alloc_pages(len(pages))
        tree.insert(pages, 0, 0, 0)
    before = (alloc.full_free, alloc.swa_free)
    result = tree.evict_for_alloc(18 * PAGE, 18 * PAGE)
    s = alloc.stats
    return (
        before,
        (alloc.full_free, alloc.swa_free),
        (result.full_evicted, result.swa_evicted),
        (s.full_pages_freed, s.swa_pages_freed),
    )


def test_c_and_python_allocator_paths_agree(compiled) -> None:
    plain = SWAKVAllocator(64 * PAGE, 64 * PAGE, PAGE)
    sub = CountingAllocator(64 * PAGE, 64 * PAGE, PAGE)
    got = fill_and_evict(compiled, plain)
    assert got == fill_and_evict(compiled, sub)
    assert got[1] == (64, 64) and got[2] == (18 * PAGE, 18 * PAGE)  # everything came back
    assert sub.calls  # the subclass's overrides ran (the Python path)


def test_the_c_path_is_the_compiled_allocator_class(compiled) -> None:
    import simulator.kv_allocator as ka

    if not ka.__file__.endswith(".py"):  # the allocator is compiled: the C path must load
        from simulator.radix._core_alloc import ALLOCATOR

        assert ALLOCATOR is ka.SWAKVAllocator


def test_compiled_tree_loads_where_the_allocator_is_source(compiled) -> None:
    code = (
        "import simulator.kv_allocator as ka\n"
        "assert ka.__file__.endswith('.py'), ka.__file__\n"
        "from simulator.radix._core_tree import UnifiedSWARadixTree\n"
        "import test_core_alloc_ops as t\n"
        "a = ka.SWAKVAllocator(64 * t.PAGE, 64 * t.PAGE, t.PAGE)\n"
        "got = t.fill_and_evict(UnifiedSWARadixTree, a)\n"
        "assert got[1] == (64, 64) and got[2] == (18 * t.PAGE, 18 * t.PAGE), got\n"
    )
    env = dict(os.environ, KVPLAN_PURE_PYTHON="1", PYTHONPATH=str(ROOT / "tests"))
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env=env)
