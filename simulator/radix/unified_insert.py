"""Insertion into SGLang 0.5.23's hybrid SWA radix tree (``UnifiedTreeCore.begin_insert`` ..
``_insert_tail_step`` with the FULL and SWA components), split from :mod:`simulator.radix.unified`.

While memory ops are recorded the insert also moves page ids: a new leaf adopts the request's
pages, a healed tombstone takes the request's SWA pages, duplicates are freed by id.
"""

from __future__ import annotations

import numpy as np

from simulator.memory_ops import OpKind
from simulator.radix.node import TreeNode, match_pages

_EMPTY = np.empty(0, dtype=np.int64)


class UnifiedInsert:
    """Insert methods of :class:`~simulator.radix.unified.UnifiedSWARadixTree` (a mixin: it
    uses the tree's nodes, ticks, splits, SWA LRU and allocator)."""

    def insert(
        self,
        key: np.ndarray,
        prev_prefix_len: int,
        inserted_len: int,
        swa_evicted_seqlen: int,
        priority: int = 0,
        protected_node: TreeNode | None = None,
        values: np.ndarray | None = None,
        reason: str = "",
    ) -> tuple[int, TreeNode]:
        """``UnifiedTreeCore.begin_insert`` .. ``_insert_tail_step`` for a page-aligned key.

        The request's row positions ``[prev_prefix_len, len)`` are its private slots: each is
        adopted by a new leaf, adopted to heal an SWA tombstone, or freed as a duplicate.
        Returns (length already in the tree before this insert, node the key ends on).

        ``protected_node`` (optional) is the node the request holds locked, whose path is exactly
        its first ``prev_prefix_len`` tokens of ``key``: those nodes are then touched without
        comparing keys (nothing else happens to them in SGLang's walk), which only saves time.
        ``values`` (only while recording) are the request's FULL page ids for ``key``;
        ``reason`` tags the records (the request id).
        """
        self.counters.insert_calls += 1
        p = self.page_size
        self.root.last_access_time = self._tick()  # _touch_node(root)
        self.root.priority = max(self.root.priority, priority)
        n = len(key)
        if n == 0:
            return 0, self.root
        node = self.root
        total = 0
        if protected_node is not None and protected_node is not self.root and prev_prefix_len <= n * p:
            total = self._walk_protected(protected_node, priority, inserted_len)
            assert total == prev_prefix_len, (total, prev_prefix_len)
            node = protected_node
        off = total // p
        while off < n:
            child = node.children.get(key.item(off))
            if child is None:
                break
            child.last_access_time = self._tick()  # _touch_node (SWA WALKDOWN: no refresh)
            m = match_pages(child.key, key, off)
            if m < len(child.key):
                child = self._split(child, m)
            child.priority = max(child.priority, priority)
            node_end = total + m * p
            consumed_from = m * p
            # SWAComponent.update_component_on_insert_overlap: heal a tombstone in-window
            if prev_prefix_len < node_end and not child.swa:
                live_start = max(total, swa_evicted_seqlen)
                if live_start < node_end:
                    self._heal(child, total, live_start, node_end, values, reason)
                    consumed_from = live_start - total
            # _insert_overlap_step: free the request's duplicates of tree-held KV
            dup_start = max(0, prev_prefix_len - total)
            if dup_start < consumed_from:
                self._free_duplicates(
                    total + dup_start, total + consumed_from, swa_evicted_seqlen, values, reason
                )
            if node_end > inserted_len:  # _finish_insert_walk_node
                child.hit_count += 1
            node = child
            total = node_end
            off += m
        if off < n:  # _insert_commit_step
            target = self._commit_leaf(node, key[off:], total, swa_evicted_seqlen, inserted_len, priority)
            if values is not None:
                self._adopt_values(target, values)
        else:
            target = node
        if target is not self.root:  # _insert_tail_step: SWA INSERT_END refresh
            self._refresh_swa_window(target)
        return total, target

    def _walk_protected(self, protected_node: TreeNode, priority: int, inserted_len: int) -> int:
        """The insert walk over the request's locked prefix: touch, priority, hits (one tick per
        node); returns its length."""
        path = []
        x = protected_node
        while x is not self.root:
            path.append(x)
            x = x.parent
        t = self._time
        total = 0
        for x in reversed(path):
            x.last_access_time = t
            t += 1.0
            if x.priority < priority:
                x.priority = priority
            total += x.length
            if total > inserted_len:
                x.hit_count += 1
        self._time = t
        return total

    def _heal(self, child: TreeNode, total: int, live_start: int, node_end: int, values, reason: str) -> None:
        """``_recover_from_incoming``: the request's live SWA pages move to a tombstone.

        Either the node's old FULL slots or (if its FULL is locked, RecoverSWAWithLockedFull)
        the request's incoming FULL slots are freed full-only.
        """
        p = self.page_size
        if live_start > total:
            self._split(child, (live_start - total) // p)
        healed = node_end - live_start
        if values is None:
            self.allocator.free_full_pages(healed // p)
        else:
            incoming = values[live_start // p : node_end // p]
            alloc = self.allocator
            if child.full_lock > 0:  # keep the node's FULL, point it at the incoming SWA
                alloc.apply_op(OpKind.REMAP_SWA, reason, child.value, src=incoming)
                alloc.apply_op(OpKind.FREE_FULL, reason, incoming)
            else:  # the node adopts the request's FULL (and its SWA peers)
                alloc.apply_op(OpKind.FREE_FULL, reason, child.value)
                child.value = incoming
        self._set_swa(child)
        self.counters.tombstones_healed += 1
        self.counters.tombstone_tokens_healed += healed

    def _free_duplicates(self, start: int, end: int, cursor: int, values, reason: str) -> None:
        """Free the request's row ``[start, end)`` that duplicates tree KV: FULL, and SWA above
        the request's window cursor (``_insert_overlap_step``)."""
        p = self.page_size
        dup = end - start
        swa_dead = min(max(cursor - start, 0), dup)
        alloc = self.allocator
        if values is None:
            alloc.free_full_pages(dup // p)
            alloc.free_swa_pages((dup - swa_dead) // p)
            return
        mid = (start + swa_dead) // p
        if swa_dead:
            alloc.apply_op(OpKind.FREE_FULL, reason, values[start // p : mid])
        if dup > swa_dead:
            alloc.apply_op(OpKind.FREE, reason, values[mid : end // p])

    def _commit_leaf(
        self, node: TreeNode, rem: np.ndarray, total: int, cursor: int, inserted_len: int, priority: int
    ) -> TreeNode:
        """``_insert_commit_step`` + ``SWAComponent.commit_insert_component_data``: a new leaf
        for the key's rest, SWA-live from the cursor on (capped at the window's pages)."""
        p = self.page_size
        length = len(rem) * p
        leaf = self._new_node(rem, length, priority)
        leaf.parent = node
        node.children[rem.item(0)] = leaf
        if self._depth_hooks:
            self.eviction_order.on_node_added(leaf, node)
        self.full_evictable += length
        self._update_leaf(leaf)
        self._update_leaf(node)
        end = total + length
        live_start = max(total, cursor)
        if live_start < end:  # _populate_range
            if live_start > total:
                self._split(leaf, (live_start - total) // p)
                self.counters.tombstones_created += 1
            upper = self._split_leaf_for_swa_lock(leaf)
            if upper is not None:
                self._set_swa(upper)
            self._set_swa(leaf)
        else:
            self.counters.tombstones_created += 1
        if total + leaf.length > inserted_len:  # _should_backup_after_insert
            leaf.hit_count += 1
        return leaf

    def _adopt_values(self, leaf: TreeNode, values: np.ndarray) -> None:
        """Give the new leaf (and the nodes split off above it) the request's page ids."""
        x = leaf
        end = len(values)
        while x is not self.root and x.value is None:
            start = end - len(x.key)
            x.value = values[start:end]
            end = start
            x = x.parent

    def path_values(self, node: TreeNode) -> np.ndarray:
        """FULL page ids along the path to ``node`` (recording only): a matched prefix's row."""
        parts = []
        while node is not self.root:
            parts.append(node.value)
            node = node.parent
        return np.concatenate(parts[::-1]) if parts else _EMPTY

    def _split_leaf_for_swa_lock(self, leaf: TreeNode) -> TreeNode | None:
        """``SWAComponent._maybe_split_leaf_for_swa_lock``: cap a fresh leaf at ceil_page(W)."""
        if leaf is self.root or leaf.swa_lock > 0:
            return None
        p = self.page_size
        tail = -(-self.window // p) * p
        if leaf.length <= tail:
            return None
        return self._split(leaf, (leaf.length - tail) // p)
