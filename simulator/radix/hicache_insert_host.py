"""Prefetched pages into the HiCache tree: SGLang 0.5.23's ``_handle_prefetch_result``
(``mem_cache/unified_radix_cache.py``), ``UnifiedTreeCore.insert_host``
(``mem_cache/unified_cache/unified_tree_core.py``) and the SWA window commit
``components/swa.py:_commit_prefetch`` (HICACHE.md fact 27: a prefetched span shorter than one
window gets no SWA, so it never gives a host hit).

A mixin of :class:`~simulator.radix.hicache_prefetch_tree.StorageController`.
"""

from __future__ import annotations

from simulator.radix.hicache_node import HNode
from simulator.radix.node import match_pages


class HostInsert:
    """Insertion of prefetched pages as host-only nodes."""

    def _handle_prefetch_result(self, op) -> None:
        """Check the SWA window all-or-nothing (``_check_hybrid_prefetch_result``), insert
        what landed, free the host copies of pages the tree already had, unlock the anchor and
        record the L3-loaded span for the request."""
        tree, p = self.tree, self.page_size
        completed = op.completed_tokens
        if op.swa_keys and not (completed == len(op.hashes) * p and op.swa_hits == op.swa_trailing):
            self._retire(op, completed, release_swa=op.pool_transfers_done)
            return
        pages = op.pages[: completed // p]
        ids = _cut(op.full_ids, 0, completed // p)
        prefix_len, target, dropped = self.insert_host(op.anchor, pages, op.hashes[: completed // p], ids)
        op.full_held -= completed
        if dropped:
            self._release_full(completed, ids)
            if op.swa_host_tokens:
                self._release_swa(op.swa_host_tokens, op.swa_ids)
            op.swa_host_tokens, op.swa_ids = 0, None
            loaded = 0
        else:
            self._commit_prefetch_swa(op, target, completed)
            if prefix_len:  # the host copies the tree already had (always the key's head)
                tree.host_full.release(prefix_len, _cut(ids, 0, prefix_len // p))
            loaded = completed - prefix_len
        tree.host_unlock(op.anchor_lock)
        del self.ongoing_prefetch[op.rid]
        self.prefetch_tokens_occupied -= len(op.pages) * p
        self.loaded_tokens[op.rid] = (loaded, op.storage_start + prefix_len if loaded > 0 else None)

    def insert_host(
        self, anchor: HNode, pages, hashes: list[int], ids=None
    ) -> tuple[int, HNode | None, bool]:
        """``utc.insert_host``: walk from the anchor; matched nodes without a FULL host copy take
        the fetched one (write-through policies), the rest becomes a new host-only leaf unless
        its parent is an unbacked node (dropped, write-through policies only).
        ``ids`` (recording): the fetched pages' host page ids, which the nodes take.
        Returns (host prefix the tree already held, the inserted host node, dropped)."""
        tree, p = self.tree, self.page_size
        node = anchor
        node.last_access_time = tree._tick()  # _touch_node
        n = len(pages)
        if n == 0:
            return 0, None, False
        off = matched = host_prefix = 0
        refilled = None
        while off < n:
            child = node.children.get(pages.item(off))
            if child is None:
                break
            child.last_access_time = tree._tick()
            m = match_pages(child.key, pages, off)
            off += m
            matched += m * p
            if m < len(child.key):
                child = tree._split(child, m)
            node = child
            if not tree.is_write_back:
                if not node.full_host:
                    node.full_host = True
                    node.fh_ids = _cut(ids, off - m, off)
                    if node.hash_value is None:
                        node.hash_value = hashes[off - m : off]
                    tree._update_leaf(node)
                    if node.parent is not None:
                        tree._update_leaf(node.parent)
                    tree._update_dup(node)
                    refilled = node
                else:
                    assert refilled is None, f"backed-up node {node.id} below a refilled one"
                    host_prefix += m * p
        prefix_len = matched if tree.is_write_back else host_prefix
        if off == n:
            keep = node is not tree.root and (refilled is not None or node.full_host)
            return prefix_len, (node if keep else None), False
        if node is not tree.root and not node.full_host and not tree.is_write_back:
            return prefix_len, None, True
        rem = pages[off:]
        leaf = tree._new_node(rem, len(rem) * p, node.priority)
        leaf.parent = node
        leaf.hash_value = hashes[off:]
        leaf.full_host = True
        leaf.fh_ids = _cut(ids, off, None)
        node.children[rem.item(0)] = leaf
        if tree._depth_hooks:  # utc: a host-only insert sets the tlru lens too
            tree.eviction_order.on_node_added(leaf, node)
        tree._update_leaf(leaf)
        tree._update_leaf(node)
        return prefix_len, leaf, False

    def _commit_prefetch_swa(self, op, target: HNode | None, total_len: int) -> None:
        """``swa.py:_commit_prefetch``: the SWA window is attached only when every staged page
        landed and, below the root, it is a whole window; it covers the last staged pages,
        walking leaf -> anchor and filling nodes without an SWA host copy. Unused staging goes
        to the SWA release queue (``FreeComponentHostSlot`` -> ``append_host_mem_release``)."""
        tree, p = self.tree, self.page_size
        staged, ids = op.swa_host_tokens, op.swa_ids
        if op.swa_keys == 0:
            return
        need_pages = staged // p
        op.swa_host_tokens, op.swa_ids = 0, None
        if op.anchor is not tree.root and need_pages < self.full_window_pages:
            self._release_swa(staged, ids)
            return
        if target is None or need_pages == 0 or op.swa_hits < need_pages:
            if staged:
                self._release_swa(staged, ids)
            return
        loaded_start = total_len - staged
        pos, cur = total_len, target
        while cur is not op.anchor and pos > loaded_start:
            node_start = pos - cur.length
            fill_start = max(node_start, loaded_start)
            fill_len = pos - fill_start
            if not cur.swa_host and fill_len > 0:
                if fill_start > node_start:
                    tree._split(cur, (fill_start - node_start) // p)
                cur.swa_host = True
                cur.sh_ids = _cut(ids, (fill_start - loaded_start) // p, (pos - loaded_start) // p)
                if not cur.swa and not tree.swa_host_lru.in_list(cur):
                    tree.swa_host_lru.insert_mru(cur)
                tree._update_leaf(cur)
                if cur.parent is not None:
                    tree._update_leaf(cur.parent)
            elif fill_len > 0:
                self._release_swa(
                    fill_len, _cut(ids, (fill_start - loaded_start) // p, (pos - loaded_start) // p)
                )
            pos = node_start
            cur = cur.parent
        if pos > loaded_start:
            self._release_swa(pos - loaded_start, _cut(ids, 0, (pos - loaded_start) // p))


def _cut(ids, start: int, stop: int | None):
    """``ids[start:stop]`` of optional host page ids (None when not recording)."""
    return None if ids is None else ids[start:stop]
