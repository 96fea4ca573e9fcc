"""Device and host eviction of the HiCache tree: demotion of backed-up device leaves, deletion of
unbacked ones, write_back's synchronous backup, SWA tombstones, host-leaf and SWA-host eviction.

SGLang 0.5.23: ``unified_radix_cache.py:_evict_components`` / ``evict_host``, and in
``unified_cache/unified_tree_core.py``: ``evict_device_leaf``, ``_demote``, ``_cascade_evict``,
``_delete_unbacked_device_leaf``, ``drop_subtree_no_host``, ``drive_host_eviction``,
``_reclaim_full_host_duplicates``, ``_evict_host_leaf``; ``components/full.py`` and
``components/swa.py``: ``_evict_device_next_node``, ``drive_host_eviction``, ``evict_component``.
"""

from __future__ import annotations

import heapq
from collections import Counter

from simulator.memory_ops import OpKind
from simulator.radix.hicache_node import HNode
from simulator.radix.unified import EvictResult


class HiCacheEvict:
    """Eviction methods of :class:`~simulator.radix.hicache_tree.HiCacheTree` (a mixin)."""

    # ------------------------------------------------------------------ component frees
    def _evict_full(self, node: HNode, device: bool, host: bool, tracker: Counter | None) -> int:
        """``FullComponent.evict_component``; FULL's device flag is cleared by the caller (SGLang
        defers ``value = None`` to ``_cascade_evict``). Returns device tokens freed."""
        freed = 0
        if device and node.full:
            if node.value is not None:  # recording: EVICT, or DEMOTE keeping the host copy
                if host or not node.full_host:
                    self._record(OpKind.EVICT, node.value)
                else:
                    self.host_full.record(OpKind.DEMOTE, node.fh_ids, node.value)
                node.value = None
            self.allocator.free_full_pages(node.length // self.page_size)
            self.full_evictable -= node.length
            freed = node.length
            if tracker is not None:
                tracker["full"] += freed
            if self._tracking_unbacked and not node.full_host:
                self._unbacked_tokens += freed
        if host and node.full_host:
            self.host_full.release(node.length, node.fh_ids)
            node.full_host, node.fh_ids = False, None
            if tracker is not None and not device:
                tracker["full"] += node.length
        return freed

    def _evict_swa(self, node: HNode, device: bool, host: bool, tracker: Counter | None) -> int:
        """``SWAComponent.evict_component`` + LRU detach; returns host tokens freed."""
        if device and node.swa:
            if node.value is not None:  # recording (a node whose FULL went freed its peers too)
                self._record(OpKind.TOMBSTONE, node.value)
            self.allocator.free_swa_pages(node.length // self.page_size)
            self.swa_evictable -= node.length
            node.swa = False
            self.swa_lru.remove(node)
            if tracker is not None:
                tracker["swa"] += node.length
        host_freed = 0
        if host and node.swa_host:
            self.host_swa.release(node.length, node.sh_ids)
            node.swa_host, node.sh_ids = False, None
            host_freed = node.length
            if self.swa_host_lru.in_list(node):
                self.swa_host_lru.remove(node)
            if tracker is not None and not device:
                tracker["swa"] += node.length
        if device and not host and not node.swa and node.swa_host and not self.swa_host_lru.in_list(node):
            self.swa_host_lru.insert_mru(node)
        return host_freed

    def _remove_from_parent(self, node: HNode) -> None:
        del node.parent.children[node.key.item(0)]
        self.full_host_duplicates.pop(node.id, None)
        if self._depth_hooks:
            self.eviction_order.on_deleted(node)

    def _release_all_layers(self, node: HNode, tracker: Counter) -> None:
        """``utc._release_all_component_layers`` (device frees counted)."""
        self._evict_full(node, True, True, tracker)
        node.full = False
        self._evict_swa(node, True, True, tracker)
        self.device_leaves.discard(node)
        self.host_leaves.discard(node)

    def _delete_tombstone_ancestors(self, cur: HNode, tracker: Counter) -> None:
        """``utc._iteratively_delete_tombstone_ancestors``."""
        while cur is not self.root and not cur.children:
            if cur.full_lock or cur.swa_lock or cur.full_host_lock or cur.swa_host_lock:
                break
            if cur.full:
                self._update_leaf(cur)
                break
            if cur.swa:
                self._evict_swa(cur, True, False, tracker)
            if cur.full_host:
                self._update_leaf(cur)
                break
            self._evict_swa(cur, False, True, tracker)
            self.host_leaves.discard(cur)
            self._remove_from_parent(cur)
            parent = cur.parent
            self._update_leaf(parent)
            cur = parent

    def _delete_unbacked_device_leaf(self, node: HNode, tracker: Counter) -> None:
        """``utc._delete_unbacked_device_leaf``."""
        self._release_all_layers(node, tracker)
        parent = node.parent
        self._remove_from_parent(node)
        self._update_leaf(parent)
        self._delete_tombstone_ancestors(parent, tracker)

    def _demote(self, node: HNode, tracker: Counter) -> None:
        """``utc._demote``: free the device KV of a backed-up D-leaf; the node stays host-only."""
        assert node.full and node.full_host
        self._evict_full(node, True, False, tracker)
        if node.swa:  # _cascade_evict: SWA (lower priority) follows FULL
            assert node.swa_lock == 0
            self._evict_swa(node, True, False, tracker)
        node.full = False
        self._update_leaf(node)
        if node.swa_host and not node.swa and not self.swa_host_lru.in_list(node):
            self.swa_host_lru.insert_mru(node)
        self._update_leaf(node.parent)

    def _evict_device_leaf(self, node: HNode, tracker: Counter) -> bool:
        """``utc.evict_device_leaf`` with the oracle's demoted / deleted counts; returns True
        when write_back must back the leaf up first."""
        assert self._is_device_leaf(node), node
        before = (tracker["full"], tracker["swa"])
        self._tracking_unbacked, self._unbacked_tokens = True, 0
        if not node.full_host:
            if self.is_write_back:
                self._tracking_unbacked = False
                self.counts["write_back_deferred"] += 1
                return True
            self._delete_unbacked_device_leaf(node, tracker)
            kind = "deleted"
        else:
            self._demote(node, tracker)
            kind = "demoted"
        self._tracking_unbacked = False
        if self.policy.tracks_unbacked_drops:
            self.counts["dropped_tokens_write_through_unbacked"] += self._unbacked_tokens
        self.counts[f"{kind}_nodes"] += 1
        self.counts[f"{kind}_full_tokens"] += tracker["full"] - before[0]
        self.counts[f"{kind}_swa_tokens"] += tracker["swa"] - before[1]
        return False

    def _write_back_leaf(self, node: HNode, tracker: Counter) -> None:
        """``_evict_components``' deferred demote: back up synchronously, then demote; drop
        the subtree if the host has no room."""
        if self._execute_and_commit_kv_backup([node], write_back=True) > 0:
            self.writing_check(write_back=True)
            before = (tracker["full"], tracker["swa"])
            self._demote(node, tracker)
            self.counts["demoted_nodes"] += 1
            self.counts["demoted_full_tokens"] += tracker["full"] - before[0]
            self.counts["demoted_swa_tokens"] += tracker["swa"] - before[1]
        else:
            self._drop_subtree_no_host(node, tracker)

    def _drop_subtree_no_host(self, node: HNode, tracker: Counter) -> bool:
        """``utc.drop_subtree_no_host``."""

        def locked(x: HNode) -> bool:
            return bool(x.full_lock or x.swa_lock or x.full_host_lock or x.swa_host_lock)

        if node.lb_pending is not None or locked(node):
            return False
        desc: list[HNode] = []
        stack = list(node.children.values())
        while stack:
            cur = stack.pop()
            if cur.wt_pending is not None or cur.lb_pending is not None or locked(cur):
                return False
            desc.append(cur)
            stack.extend(cur.children.values())
        before = tracker["full"]
        for d in reversed(desc):
            self._release_all_layers(d, Counter())
            self._remove_from_parent(d)
        self._delete_unbacked_device_leaf(node, tracker)
        self.counts["dropped_subtrees"] += 1
        self.counts["dropped_full_tokens"] += tracker["full"] - before
        return True

    # ------------------------------------------------------------------ device eviction
    def evict_for_alloc(self, full_shortfall: int, swa_shortfall: int):
        """``UnifiedRadixCache.evict_for_alloc`` -> ``_evict_components`` (FULL, then SWA);
        shortfalls become availability targets."""
        alloc = self.allocator
        tracker: Counter = Counter()
        full_target = alloc.full_available_size() + full_shortfall if full_shortfall > 0 else None
        swa_target = alloc.swa_available_size() + swa_shortfall if swa_shortfall > 0 else None

        def full_reached() -> bool:
            return full_target is not None and alloc.full_available_size() >= full_target

        def swa_reached() -> bool:
            return swa_target is not None and alloc.swa_available_size() >= swa_target

        if full_shortfall > 0 and not full_reached():
            quota = max(full_shortfall, tracker["full"] + self.full_evictable)
            self._evict_full_pass(quota, tracker, full_reached)
        if swa_shortfall > 0 and not swa_reached() and tracker["swa"] < swa_shortfall:
            self._evict_swa_pass(swa_shortfall, tracker, swa_reached)
        if self.is_write_back:
            self.writing_check(write_back=True)
        c = self.counts
        c["evict_calls"] += 1
        c["evict_full_requested"] += full_shortfall
        c["evict_swa_requested"] += swa_shortfall
        c["device_full_evicted"] += tracker["full"]
        c["device_swa_evicted"] += tracker["swa"]
        return EvictResult(tracker["full"], tracker["swa"])

    def _leaf_key(self, node: HNode):
        return (self.eviction_order.priority(node, self), node)

    def _evict_full_pass(self, quota: int, tracker: Counter, reached) -> None:
        """``FullComponent._evict_device_next_node`` over a heap of D-leaves."""
        order = self.eviction_order
        heap = [self._leaf_key(x) for x in self.device_leaves]
        heapq.heapify(heap)
        last: HNode | None = None
        while True:
            if last is not None and last.parent is not None and last.parent in self.device_leaves:
                heapq.heappush(heap, self._leaf_key(last.parent))
            last = None
            victim = None
            while tracker["full"] < quota and heap:
                key, x = heapq.heappop(heap)
                if x in self.device_leaves:
                    victim = x
                    order.on_evicted(key)
                    break
            if victim is None:
                return
            last = victim
            if self._evict_device_leaf(victim, tracker):
                self._write_back_leaf(victim, tracker)
            if reached():
                return

    def _evict_swa_pass(self, quota: int, tracker: Counter, reached) -> None:
        """``SWAComponent._evict_device_next_node``: leaves go through ``evict_device_leaf``,
        internal nodes become SWA tombstones (write_back backs their window up first)."""
        lru = self.swa_lru
        cursor = lru.lru_unlocked()
        while True:
            if cursor is not None and not lru.in_list(cursor):
                cursor = lru.lru_unlocked()
            if tracker["swa"] >= quota or cursor is None:
                return
            x = cursor
            cursor = lru.prev_unlocked(x)
            if x in self.device_leaves:
                if self._evict_device_leaf(x, tracker):
                    self._write_back_leaf(x, tracker)
            elif not self._tombstone_internal(x, tracker):
                cursor = x
            if reached():
                return

    def _tombstone_internal(self, x: HNode, tracker: Counter) -> bool:
        """SWA-evict an internal node (``evict_component`` + ``_cascade_evict``); under
        write_back its unbacked window is backed up first (``finish_swa_state_eviction``).
        Returns False when the node must be re-selected as a leaf."""
        if self.is_write_back and not x.swa_host and not x.full_host and x.full:
            needed = sum(n.length for n in self._unbacked_swa_window(x))
            if needed:
                if self.host_swa.available_size() < needed:
                    self.evict_host(needed, "swa")
                self._backup_node_for_write_back(x)
                if not x.swa or x.swa_lock > 0 or not self.swa_lru.in_list(x):
                    return True
                if x in self.device_leaves:
                    return False
        before = tracker["swa"]
        self._evict_swa(x, True, False, tracker)
        self._update_leaf(x)
        self.counts["swa_tombstone_steps"] += 1
        self.counts["swa_tombstoned_tokens"] += tracker["swa"] - before
        return True

    # ------------------------------------------------------------------ host eviction
    def evict_host(self, num_tokens: int, component: str = "full") -> int:
        """``UnifiedRadixCache.evict_host`` -> ``drive_host_eviction``; host tokens freed."""
        tracker: Counter = Counter()
        if component == "full":
            if self.is_write_back:
                self._reclaim_full_host_duplicates(num_tokens, tracker)
            self._evict_host_leaves(num_tokens, tracker)
            self.counts["host_evict_calls_full"] += 1
        else:
            self._evict_swa_host(num_tokens, tracker)
            self.counts["host_evict_calls_swa"] += 1
        self.counts["host_evicted_full_tokens"] += tracker["full"]
        self.counts["host_evicted_swa_tokens"] += tracker["swa"]
        return tracker[component]

    def _evict_host_leaf(self, node: HNode, tracker: Counter) -> None:
        """``utc._evict_host_leaf``: every component's host value, then the node."""
        assert self._is_host_leaf(node), node
        if node.full_host:
            self.host_full.release(node.length, node.fh_ids)
            node.full_host, node.fh_ids = False, None
            tracker["full"] += node.length
        if node.swa_host:
            self.host_swa.release(node.length, node.sh_ids)
            node.swa_host, node.sh_ids = False, None
            tracker["swa"] += node.length
            if self.swa_host_lru.in_list(node):
                self.swa_host_lru.remove(node)
        self.host_leaves.discard(node)
        self._remove_from_parent(node)
        self._delete_tombstone_ancestors(node.parent, tracker)

    def _evict_host_leaves(self, num_tokens: int, tracker: Counter) -> None:
        """``FullComponent.drive_host_eviction``: H-leaves by the eviction order."""
        heap = [self._leaf_key(x) for x in self.host_leaves]
        heapq.heapify(heap)
        while tracker["full"] < num_tokens and heap:
            _, x = heapq.heappop(heap)
            if x not in self.host_leaves:
                continue
            self._evict_host_leaf(x, tracker)
            if x.parent is not None and x.parent in self.host_leaves:
                heapq.heappush(heap, self._leaf_key(x.parent))

    def _evict_swa_host(self, num_tokens: int, tracker: Counter) -> None:
        """``SWAComponent.drive_host_eviction``: host tombstones, host leaves atomically."""
        lru = self.swa_host_lru
        x = lru.lru_unlocked()
        while tracker["swa"] < num_tokens and x is not None and lru.in_list(x):
            nxt = lru.prev_unlocked(x)
            if x in self.host_leaves:
                self._evict_host_leaf(x, tracker)
            else:
                self._evict_swa(x, False, True, tracker)
                self._update_leaf(x)
            x = nxt

    def _reclaim_full_host_duplicates(self, num_tokens: int, tracker: Counter) -> None:
        """``utc._reclaim_full_host_duplicates`` (write_back): free FULL host copies of
        device-resident nodes; the first pass spares evictable D-leaves."""
        swept: list[int] = []
        for spare in (True, False):
            if tracker["full"] >= num_tokens:
                break
            for node in self.full_host_duplicates.values():
                if tracker["full"] >= num_tokens:
                    break
                if not node.full or not node.full_host:
                    swept.append(node.id)
                    continue
                if spare and node in self.device_leaves:
                    continue
                if node.wt_pending is not None or node.lb_pending is not None or node.full_host_lock:
                    continue
                self.host_full.release(node.length, node.fh_ids)
                node.full_host, node.fh_ids = False, None
                tracker["full"] += node.length
                swept.append(node.id)
        for nid in swept:
            self.full_host_duplicates.pop(nid, None)
