"""The cache controller is the engine's only door to the tree and the allocator."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import simpy
from controller_proxy import strict_controller  # noqa: F401
from test_engine_server import POOLS, LinearCost

from policies.eviction_order import EVICTION_ORDERS
from policies.tombstone import TOMBSTONING
from simulator.engine.config import SimConfig
from simulator.engine.server import ServerModel
from simulator.radix.cache import LegacySWACache, SWACacheController, UnifiedSWACache, build_controller
from simulator.radix.protocol import CONTROLLER_API, ControllerOutsideProtocol, StrictController

ENGINE = Path(__file__).resolve().parents[1] / "simulator" / "engine"


def _controller(tombstone: str) -> SWACacheController:
    return build_controller(TOMBSTONING.create(tombstone), 1024, 512, 16, 64, EVICTION_ORDERS.create("lru"))


@pytest.mark.parametrize("tombstone,cls", [("unified", UnifiedSWACache), ("legacy", LegacySWACache)])
def test_both_generations_implement_the_whole_protocol(tombstone, cls):
    cache = _controller(tombstone)
    assert isinstance(cache, cls)
    missing = [name for name in sorted(CONTROLLER_API) if not hasattr(cache, name)]
    assert not missing, missing


def test_the_proxy_refuses_the_tree_the_allocator_and_writes():
    strict = StrictController(_controller("unified"))
    assert strict.page_size == 16 and strict.capacity() == (1024, 512)
    for name in ("tree", "allocator", "evictions", "_evict", "sizes"):
        with pytest.raises(ControllerOutsideProtocol, match=name):
            getattr(strict, name)
    with pytest.raises(ControllerOutsideProtocol):
        strict.window = 3


def test_room_is_available_plus_evictable_and_used_is_its_complement():
    """One definition of evictable: room, used and the quiet-step bound all derive from it."""
    cache = _controller("unified")
    full_cap, swa_cap = cache.capacity()
    for room, avail, ev, used, cap in zip(
        cache.room_tokens(),
        cache.available_tokens(),
        cache.evictable_tokens(),
        cache.used_tokens(),
        (full_cap, swa_cap),
        strict=True,
    ):
        assert room == avail + ev and used == cap - room


def test_engine_servers_in_these_tests_run_behind_the_proxy():
    srv = ServerModel(simpy.Environment(), SimConfig(), POOLS[0], LinearCost())
    assert isinstance(srv.cache, StrictController)


def test_no_engine_module_reaches_past_the_controller():
    offenders = []
    for path in sorted(ENGINE.glob("*.py")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\.tree\b|\.allocator\b|SWAKVAllocator", line):
                offenders.append(f"{path.name}:{n}: {line.strip()}")
    assert not offenders, offenders
