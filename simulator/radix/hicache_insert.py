"""Insertion into the HiCache tree (``UnifiedTreeCore.begin_insert`` .. ``_insert_tail_step``),
with un-eviction of host-only nodes and the write-through backup triggers.

Duplicates and healed FULL slots go back to the allocator as page counts; while memory ops are
recorded (``values``: the request's FULL page ids) they are records on page ids and the nodes
that take the request's slots take its page ids, as ``unified_insert`` does.
"""

from __future__ import annotations

import numpy as np

from simulator.memory_ops import OpKind
from simulator.radix.hicache_node import HNode
from simulator.radix.node import match_pages


class HiCacheInsert:
    """Insert methods of :class:`~simulator.radix.hicache_tree.HiCacheTree` (a mixin)."""

    def insert(
        self,
        key: np.ndarray,
        prev_prefix_len: int,
        inserted_len: int,
        swa_evicted_seqlen: int,
        priority: int = 0,
        protected_node=None,
        values=None,
        reason: str = "",
    ) -> tuple[int, HNode]:
        """Insert a page-aligned key; returns (length already in the tree, the target node).

        Backups the insert triggers run where SGLang applies them: at the barrier after the
        walked node (``_finish_insert_walk_node``) and after the tail refresh."""
        p = self.page_size
        self.root.last_access_time = self._tick()
        self.root.priority = max(self.root.priority, priority)
        n = len(key)
        if n == 0:
            return 0, self.root
        node = self.root
        total = off = 0
        while off < n:
            child = node.children.get(key.item(off))
            if child is None:
                break
            child.last_access_time = self._tick()  # _touch_node
            m = match_pages(child.key, key, off)
            if m < len(child.key):
                child = self._split(child, m)
            child.priority = max(child.priority, priority)
            node_end = total + m * p
            if not child.full:
                if values is not None:
                    assert prev_prefix_len <= total, "a host-only node inside the request's prefix"
                    child.value = values[total // p : node_end // p]
                child = self._unevict(child, total, node_end, swa_evicted_seqlen)
            else:
                self._overlap(child, total, node_end, prev_prefix_len, swa_evicted_seqlen, values, reason)
            # _finish_insert_walk_node
            if node_end > inserted_len and self._inc_hit_count_and_check(child):
                self._execute_and_commit_kv_backup(self._backup_chain(child))
            node = child
            total = node_end
            off += m
        new_leaf = off < n
        if new_leaf:
            target = self._commit_leaf(node, key[off:], total, swa_evicted_seqlen, priority, values)
        else:
            target = node
        if target is not self.root:  # _insert_tail_step
            self._refresh_swa_window(target)
        if self._should_backup_after_insert(target, new_leaf, total, inserted_len):
            self._execute_and_commit_kv_backup(self._backup_chain(target))
        return total, target

    def _inc_hit_count_and_check(self, node: HNode) -> bool:
        """``utc._inc_hit_count_and_check``."""
        if not node.full or self.is_write_back:
            return False
        node.hit_count += 1
        return not node.full_host and node.hit_count >= self.write_through_threshold

    def _should_backup_after_insert(
        self, target: HNode, new_leaf: bool, total: int, inserted_len: int
    ) -> bool:
        """``utc._should_backup_after_insert``: a new leaf by hit count, an existing backed-up
        target when its SWA window has device-only nodes (incremental SWA backup)."""
        if self.is_write_back or target is self.root:
            return False
        if new_leaf:
            return total + target.length > inserted_len and self._inc_hit_count_and_check(target)
        return target.full_host and target.wt_pending is None and bool(self._unbacked_swa_window(target))

    def _unevict(self, child: HNode, total: int, node_end: int, cursor: int) -> HNode:
        """``utc._unevict_node_on_insert`` + ``swa.py:recover_after_unevict``: the node adopts
        the request's FULL slots; its in-window part gets the request's SWA."""
        child.full = True
        if child.full_lock > 0:
            self.full_protected += child.length
        else:
            self.full_evictable += child.length
        self._update_leaf(child)
        self._update_dup(child)
        self._update_leaf(child.parent)
        if not child.swa:  # _clip_to_window
            live_start = max(total, cursor)
            if live_start < node_end:
                if live_start > total:
                    self._split(child, (live_start - total) // self.page_size)
                self._set_swa(child)
        return child

    def _overlap(
        self, child: HNode, total: int, node_end: int, prev_prefix_len: int, cursor: int, values, reason: str
    ) -> None:
        """``_insert_overlap_step``: heal an in-window SWA tombstone from the request's slots,
        then free the request's duplicates of tree-held KV."""
        p = self.page_size
        consumed_from = node_end - total
        if prev_prefix_len < node_end and not child.swa:
            live_start = max(total, cursor)
            if live_start < node_end:
                if live_start > total:
                    self._split(child, (live_start - total) // p)
                # _recover_from_incoming: one FULL copy is freed either way
                self.allocator.free_full_pages((node_end - live_start) // p)
                if values is not None:
                    self._heal_ids(child, values[live_start // p : node_end // p], reason)
                self._set_swa(child)
                consumed_from = live_start - total
        dup_start = max(0, prev_prefix_len - total)
        if dup_start < consumed_from:
            start, end = total + dup_start, total + consumed_from
            dup = end - start
            swa_dead = min(max(cursor - start, 0), dup)
            self.allocator.free_full_pages(dup // p)
            self.allocator.free_swa_pages((dup - swa_dead) // p)
            if values is not None:  # FULL only below the request's window cursor
                mid = (start + swa_dead) // p
                if swa_dead:
                    self._record(OpKind.FREE_FULL, values[start // p : mid], reason)
                if dup > swa_dead:
                    self._record(OpKind.FREE, values[mid : end // p], reason)

    def _heal_ids(self, child: HNode, incoming: np.ndarray, reason: str) -> None:
        """``swa.py:_recover_from_incoming`` on page ids: a locked node keeps its FULL pages and
        takes the incoming pages' SWA peers (``RecoverSWAWithLockedFull``), else it adopts the
        incoming pages and frees its old FULL (``FreeDeviceKVFullOnly``)."""
        if child.full_lock > 0:
            self._record(OpKind.REMAP_SWA, child.value, reason, src=incoming)
            self._record(OpKind.FREE_FULL, incoming, reason)
        else:
            self._record(OpKind.FREE_FULL, child.value, reason)
            child.value = incoming

    def _commit_leaf(
        self, node: HNode, rem: np.ndarray, total: int, cursor: int, priority: int, values=None
    ) -> HNode:
        """``_insert_commit_step`` + ``swa.py:commit_insert_component_data``; the new leaf
        adopts the request's page ids (recording)."""
        p = self.page_size
        length = len(rem) * p
        leaf = self._new_node(rem, length, priority)
        if values is not None:
            leaf.value = values[total // p : total // p + len(rem)]
        leaf.parent = node
        node.children[rem.item(0)] = leaf
        if self._depth_hooks:  # utc._add_new_node: _set_tlru_lens_and_raise_history
            self.eviction_order.on_node_added(leaf, node)
        if self.storage is not None:  # utc: compute_node_hash_values when storage is on
            self.storage.hash_new_node(leaf)
        leaf.full = True
        self.full_evictable += length
        self._update_leaf(leaf)
        self._update_leaf(node)
        end = total + length
        live_start = max(total, cursor)
        if live_start < end:
            if live_start > total:
                self._split(leaf, (live_start - total) // p)
            upper = self._split_leaf_for_swa_lock(leaf)
            if upper is not None:
                self._set_swa(upper)
            self._set_swa(leaf)
        return leaf

    def _split_leaf_for_swa_lock(self, leaf: HNode) -> HNode | None:
        """``swa.py:_maybe_split_leaf_for_swa_lock``: cap a fresh leaf at ceil_page(W)."""
        if leaf.swa_lock > 0:
            return None
        p = self.page_size
        tail = -(-self.window // p) * p
        if leaf.length <= tail:
            return None
        return self._split(leaf, (leaf.length - tail) // p)
