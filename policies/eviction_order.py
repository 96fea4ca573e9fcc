"""FULL-eviction order of the radix tree: a sort key per node, smallest evicted first.

SGLang: srt/mem_cache/evict_policy.py (``EvictionStrategy.get_priority``) feeding the D-leaf
min-heap in ``FullComponent._evict_device_start``. Keys are computed from node fields only.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from policies.registry import Registry

EVICTION_ORDERS: Registry = Registry("eviction order")


class EvictionOrder(ABC):
    """Protocol: ``priority(node, tree) -> sortable``; smaller means evicted earlier.

    ``monotone`` declares that a node's key never decreases over time (it only depends on
    ``last_access_time``, ``hit_count``, ``priority`` or ``creation_time``), which lets the
    tree keep one lazily refreshed heap instead of rebuilding it at every eviction.
    """

    name = "base"
    monotone = False
    tracks_depth = False  # True: the tree calls on_node_added / on_split / on_deleted

    @abstractmethod
    def priority(self, node, tree) -> float | tuple:
        """The sort key of a D-leaf; the smallest is evicted first."""

    def on_evicted(self, key) -> None:  # noqa: B027 - an optional hook, a no-op by default
        """Told the key of each FULL victim (stateful orders such as GreedyDual age with it)."""


@EVICTION_ORDERS.register("lru", "least recently used leaf first (SGLang default)")
class LRU(EvictionOrder):
    name = "lru"
    monotone = True

    def priority(self, node, tree):
        return node.last_access_time


@EVICTION_ORDERS.register("lfu", "fewest insert hits first, then LRU (SGLang LFUStrategy)")
class LFU(EvictionOrder):
    name = "lfu"
    monotone = True

    def priority(self, node, tree):
        return (node.hit_count, node.last_access_time)


@EVICTION_ORDERS.register("fifo", "oldest created first (SGLang FIFOStrategy)")
class FIFO(EvictionOrder):
    name = "fifo"
    monotone = True

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
    monotone = True

    def priority(self, node, tree):
        return (node.priority, node.last_access_time)


@EVICTION_ORDERS.register("slru", "segmented LRU: nodes hit >= 2 times are protected (SGLang SLRUStrategy)")
class SLRU(EvictionOrder):
    name = "slru"
    monotone = True

    def __init__(self, protected_threshold: int = 2) -> None:
        self.protected_threshold = protected_threshold

    def priority(self, node, tree):
        return (node.hit_count >= self.protected_threshold, node.last_access_time)


@EVICTION_ORDERS.register("tlru", "tail-optimized LRU: TEL-safe leaves first, then LRU (SGLang TLRUStrategy)")
class TLRU(EvictionOrder):
    """Tail-Optimized LRU (Zhang et al., arXiv:2510.15152), as SGLang 0.5.23 keys it.

    A branch whose deepest insert reached ``L`` tokens (its high-water mark, kept after its tail
    is evicted) needs only ``L + next_prompt_estimate - threshold`` tokens cached to meet the TTFT
    budget; a leaf whose ancestors already cover that is "TEL-safe" and goes first, then LRU.
    SGLang: evict_policy.py ``TLRUStrategy``; the depths follow unified_tree_core.py
    ``_set_tlru_lens_and_raise_history`` (new nodes) and ``_split_node`` (splits). Depths live on
    this instance, keyed by node id, so the tree tells it of every node added, split or deleted.
    """

    name = "tlru"
    tracks_depth = True

    def __init__(self, threshold: int = 0, next_prompt_estimate: int = 0) -> None:
        self.threshold = threshold
        self.next_prompt_estimate = next_prompt_estimate
        self.cached_len: dict[int, int] = {}  # path depth at the node's end (0 for the root)
        self.history_len: dict[int, int] = {}  # deepest insert ever below the node

    def on_node_added(self, node, parent) -> None:
        depth = self.cached_len.get(parent.id, 0) + node.length
        self.cached_len[node.id] = depth
        self.history_len[node.id] = max(self.history_len.get(node.id, 0), depth)
        x = parent
        while x is not None and self.history_len.get(x.id, 0) < depth:
            self.history_len[x.id] = depth
            x = x.parent

    def on_split(self, new, child) -> None:
        # a split adds no depth: the upper part inherits the branch's high-water mark
        self.cached_len[new.id] = self.cached_len.get(new.parent.id, 0) + new.length
        self.history_len[new.id] = self.history_len.get(child.id, 0)

    def on_deleted(self, node) -> None:
        self.cached_len.pop(node.id, None)
        self.history_len.pop(node.id, None)

    def priority(self, node, tree):
        budget = max(self.history_len.get(node.id, 0) + self.next_prompt_estimate - self.threshold, 0)
        tel_safe = self.cached_len.get(node.id, 0) - node.length >= budget
        return (-1 if tel_safe else 0, node.last_access_time)


@EVICTION_ORDERS.register(
    "window-aware",
    "kvplan's own: GreedyDual-Size-Frequency with the SWA recompute cost of losing a leaf",
)
class WindowAware(EvictionOrder):
    """Evict the leaf whose loss costs the fewest recomputed tokens per freed token.

    In a hybrid SWA tree a prefix is only reusable up to a node with at least W live SWA tokens
    since the last tombstone (the SWA match validator). Losing a leaf therefore forces a future
    request on that path to recompute from the deepest *valid* ancestor, not just the leaf: under
    a tombstoned chain that is the whole path. The key is GreedyDual-Size-Frequency
    (Cherkasova 1998): ``L + (hit_count + 1) * recompute_tokens / leaf_tokens``, where ``L`` is
    the key of the last victim, so that entries age. ``L`` lives on this instance.
    """

    name = "window-aware"

    def __init__(self) -> None:
        self.inflation = 0.0

    def priority(self, node, tree):
        chain = []
        x = node.parent
        while x is not tree.root:
            chain.append(x)
            x = x.parent
        run = float("inf")
        depth = 0
        valid_depth = 0
        for a in reversed(chain):
            depth += a.length
            run = run + a.length if a.swa else 0
            if run >= tree.window:
                valid_depth = depth
        recompute = depth + node.length - valid_depth
        return (
            self.inflation + (node.hit_count + 1) * recompute / max(1, node.length),
            node.last_access_time,
        )

    def on_evicted(self, key) -> None:
        self.inflation = max(self.inflation, key[0])
