"""The HiCache controller a served run's scheduler talks to: :class:`ServedHiCache`.

The engine reaches the cache only through its controller (``simulator.radix.protocol``); this
subclass of :class:`~simulator.radix.hicache_replay.HiCacheController` adds the HiCache calls
SGLang's scheduler makes (``scheduler.py``: ``check_hicache_events``,
``ready_to_load_host_cache``, ``flush_pending_backups``; ``schedule_policy.py``:
``_lock_node(..., lock_host=True)`` around ``init_load_back``), each returning plain numbers so
that the engine can time the transfers.
"""

from __future__ import annotations

from policies.hicache_write import HICACHE_WRITE_POLICIES
from simulator.kv_allocator import SWAKVAllocator
from simulator.radix.hicache_replay import HiCacheController
from simulator.request_kv import LockReceipt, ReqKV

__all__ = ["ServedHiCache", "build_served_hicache"]


class ServedHiCache(HiCacheController):
    """``UnifiedRadixCache`` after ``init_hicache``, as a served run's cache controller."""

    # ------------------------------------------------------------------ reports
    def tree_counters(self) -> dict[str, int]:
        """HiCache runs report the tree's figures in their ``hicache`` object instead."""
        return {}

    def check_invariants(self, running) -> None:
        """Tree, device-pool and host-pool invariants (:mod:`simulator.radix.hicache_invariants`)."""
        from simulator.radix.hicache_invariants import check_hicache_invariants

        check_hicache_invariants(self, running)

    @property
    def counts(self):
        """The tree's HiCache counters (the oracle's ``counts`` keys)."""
        return self.tree.counts

    def host_capacity(self) -> tuple[int, int]:
        return self.tree.host_full.capacity, self.tree.host_swa.capacity

    def host_used(self) -> tuple[int, int]:
        """(FULL, SWA) host tokens in use."""
        return self.tree.host_full.used(), self.tree.host_swa.used()

    # ------------------------------------------------------------------ transfers
    def hicache_idle(self) -> bool:
        return self.tree.hicache_idle()

    def pending_writes(self) -> int:
        """Submitted D->H operations not acknowledged yet."""
        return len(self.tree.inflight_ops()[0])

    def check_hicache_events(self, writes: int, loads: int) -> None:
        """``check_hicache_events`` acknowledging the ``writes`` / ``loads`` oldest operations."""
        self.tree.check_hicache_events(write_finish_count=writes, load_finish_count=loads)

    def submit(self, direction: str) -> tuple[int, int] | None:
        """Submit the queued D->H (``flush_pending_backups``) or H->D
        (``ready_to_load_host_cache``) copies as one operation; its (FULL, SWA) tokens, or None
        when nothing was queued."""
        tree, c = self.tree, self.tree.counts
        ops0, full0, swa0 = c[f"{direction}_ops"], c[f"{direction}_full_tokens"], c[f"{direction}_swa_tokens"]
        if direction == "d2h":
            tree.flush_pending_backups()
        else:
            tree.ready_to_load_host_cache()
        if c[f"{direction}_ops"] == ops0:
            return None
        return c[f"{direction}_full_tokens"] - full0, c[f"{direction}_swa_tokens"] - swa0

    # ------------------------------------------------------------------ admission
    def pin(self, req: ReqKV) -> LockReceipt:
        """``PrefillAdder._lock_node(req.last_node)``: the temporary pin of the device prefix."""
        return self.tree.lock(req.last_node)

    def unpin(self, receipt: LockReceipt) -> None:
        self.tree.unlock(receipt)

    def load_back(self, req: ReqKV) -> int:
        """``init_load_back`` under ``_lock_node(best_match_node, lock_host=True)``: tokens made
        device-resident (0 or at least the host hit); moves ``req.last_node``."""
        tree = self.tree
        best, host_hit = req.best_match_node, req.host_hit_length
        host = tree.host_lock(best)
        dev = tree.lock(best)
        try:
            loaded, last = tree.init_load_back(best, req.last_node, host_hit, req.swa_host_hit_length)
        finally:
            tree.unlock(dev)
            tree.host_unlock(host)
        if 0 < loaded < host_hit:
            raise AssertionError(f"{req.rid}: load-back committed {loaded} of {host_hit} host tokens")
        req.host_loaded_length, req.last_node = loaded, last
        return loaded


def build_served_hicache(
    full_tokens: int,
    swa_tokens: int,
    page_size: int,
    window: int,
    eviction_order,
    write_policy: str,
    host: tuple[int, int],
) -> ServedHiCache:
    """The allocator and the HiCache controller over it (``UnifiedRadixCache.init_hicache``)."""
    allocator = SWAKVAllocator(full_tokens, swa_tokens, page_size)
    return ServedHiCache(allocator, window, eviction_order, HICACHE_WRITE_POLICIES.create(write_policy), host)
