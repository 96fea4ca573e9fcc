"""FULL-eviction order of the radix tree: a sort key per node, smallest evicted first.

SGLang: srt/mem_cache/evict_policy.py (``EvictionStrategy.get_priority``) feeding the D-leaf
min-heap in ``FullComponent._evict_device_start``. Keys are computed from node fields only.
"""

from __future__ import annotations

from policies.registry import Registry

EVICTION_ORDERS: Registry = Registry("eviction order")


class EvictionOrder:
    """Protocol: ``priority(node, tree) -> sortable``; smaller means evicted earlier."""

    name = "base"

    def priority(self, node, tree) -> float | tuple:  # pragma: no cover - interface
        raise NotImplementedError


@EVICTION_ORDERS.register("lru", "least recently used leaf first (SGLang default)")
class LRU(EvictionOrder):
    name = "lru"

    def priority(self, node, tree):
        return node.last_access_time


@EVICTION_ORDERS.register("lfu", "fewest insert hits first, then LRU (SGLang LFUStrategy)")
class LFU(EvictionOrder):
    name = "lfu"

    def priority(self, node, tree):
        return (node.hit_count, node.last_access_time)


@EVICTION_ORDERS.register("fifo", "oldest created first (SGLang FIFOStrategy)")
class FIFO(EvictionOrder):
    name = "fifo"

    def priority(self, node, tree):
        return node.creation_time


@EVICTION_ORDERS.register("mru", "most recently used first (SGLang MRUStrategy)")
class MRU(EvictionOrder):
    name = "mru"

    def priority(self, node, tree):
        return -node.last_access_time


@EVICTION_ORDERS.register("filo", "newest created first (SGLang FILOStrategy)")
class FILO(EvictionOrder):
    name = "filo"

    def priority(self, node, tree):
        return -node.creation_time


@EVICTION_ORDERS.register("priority", "lowest request priority first, then LRU (SGLang PriorityStrategy)")
class Priority(EvictionOrder):
    name = "priority"

    def priority(self, node, tree):
        return (node.priority, node.last_access_time)


@EVICTION_ORDERS.register("slru", "segmented LRU: nodes hit >= 2 times are protected (SGLang SLRUStrategy)")
class SLRU(EvictionOrder):
    name = "slru"

    def __init__(self, protected_threshold: int = 2) -> None:
        self.protected_threshold = protected_threshold

    def priority(self, node, tree):
        return (node.hit_count >= self.protected_threshold, node.last_access_time)


@EVICTION_ORDERS.register(
    "window-aware",
    "kvplan's own: evict SWA-tombstoned leaves before SWA-live ones, then LRU",
)
class WindowAware(EvictionOrder):
    """A leaf whose SWA is already tombstoned can only be reused by a request that recomputes
    the window anyway (the SWA validator rejects it), so its FULL KV is worth less than a live
    leaf's. Prefer it as a victim; among equals, fall back to LRU.
    """

    name = "window-aware"

    def priority(self, node, tree):
        return (1 if node.swa else 0, node.last_access_time)
