"""SGLang 0.5.23's hybrid SWA radix tree with HiCache (``UnifiedRadixCache.init_hicache``):
match with host hits, locks on both tiers, leaf sets, splits and insertion.

Paths are relative to ``python/sglang/srt/mem_cache/``; ``utc`` = ``unified_cache/
unified_tree_core.py``, ``full.py`` / ``swa.py`` = ``unified_cache/components/``. Eviction is in
:mod:`simulator.radix.hicache_evict`, backups, load-back and acks in
:mod:`simulator.radix.hicache_transfer`. The non-HiCache tree (:mod:`simulator.radix.unified`) is
separate and untouched.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from simulator.kv_allocator import SWAKVAllocator
from simulator.memory_ops import EVICTION, MemoryOp, OpKind
from simulator.radix.hicache_evict import HiCacheEvict
from simulator.radix.hicache_insert import HiCacheInsert
from simulator.radix.hicache_node import HLRU, HNode, HostLockReceipt, HostPool
from simulator.radix.hicache_transfer import HiCacheTransfer
from simulator.radix.node import match_pages
from simulator.request_kv import LockReceipt

_EMPTY = np.empty(0, dtype=np.int64)


@dataclass
class HostMatch:
    """``MatchResult`` with HiCache fields (base_prefix_cache.py)."""

    device_prefix_len: int
    last_device_node: HNode
    best_match_node: HNode
    host_hit_length: int
    swa_host_hit_length: int
    full_kv_hit_length: int
    swa_branching_seqlen: int | None


class HiCacheTree(HiCacheInsert, HiCacheEvict, HiCacheTransfer):
    """The FULL + SWA tree on device and host, with its host pools and write policy."""

    generation = "unified"

    def __init__(
        self,
        page_size: int,
        window: int,
        allocator: SWAKVAllocator,
        eviction_order,
        policy,
        host_full_tokens: int,
        host_swa_tokens: int,
        load_back_threshold: int = 10,
    ) -> None:
        # tlru keys on branch depths: told of every node added, split or deleted, as
        # unified_tree_core.py keeps ``_tlru_*`` lens on the nodes HiCache shares
        self._depth_hooks = bool(getattr(eviction_order, "tracks_depth", False))
        self.page_size = page_size
        self.window = window
        self.allocator = allocator
        self.eviction_order = eviction_order
        self.policy = policy
        self.is_write_back = policy.is_write_back
        self.write_through_threshold = policy.write_through_threshold
        self.load_back_threshold = load_back_threshold  # unified_radix_cache.py:576
        self.host_full = HostPool(host_full_tokens, page_size, 0)
        self.host_swa = HostPool(host_swa_tokens, page_size, 1)
        self.counts: Counter = Counter()
        self._time = 0.0
        self._next_id = 0
        self._next_uuid = 0
        self.swa_lru = HLRU("d")
        self.swa_host_lru = HLRU("h")
        self.device_leaves: set[HNode] = set()
        self.host_leaves: set[HNode] = set()
        self.full_host_duplicates: dict[int, HNode] = {}
        self.full_evictable = self.full_protected = 0
        self.swa_evictable = self.swa_protected = 0
        self._init_transfer_state()
        self.storage = None  # the L3 tier (hicache_prefetch_tree.StorageController), if any
        self.root = self._new_node(_EMPTY, 0)
        self.root.full = self.root.swa = True
        self.root.full_lock = self.root.swa_lock = 1

    # ------------------------------------------------------------------ helpers
    def _tick(self) -> float:
        t = self._time
        self._time += 1.0
        return t

    def _new_node(self, key: np.ndarray, length: int, priority: int = 0) -> HNode:
        node = HNode(self._next_id, key, length, priority)
        self._next_id += 1
        node.last_access_time = self._time
        node.creation_time = self._time + 1.0
        self._time += 2.0
        return node

    def _new_uuid(self) -> int:
        self._next_uuid += 1
        return self._next_uuid

    def _is_device_leaf(self, node: HNode) -> bool:
        """``utc._is_device_leaf``."""
        if node is self.root or not node.full or node.full_lock > 0 or node.swa_lock > 0:
            return False
        return not any(c.full for c in node.children.values())

    def _is_host_leaf(self, node: HNode) -> bool:
        """``utc._is_host_leaf``."""
        if node is self.root or node.full or not node.full_host or node.children:
            return False
        return not (node.full_host_lock or node.swa_host_lock or node.full_lock or node.swa_lock)

    def _update_leaf(self, node: HNode) -> None:
        """``utc._update_evictable_leaf_sets``."""
        if self._is_device_leaf(node):
            self.device_leaves.add(node)
        else:
            self.device_leaves.discard(node)
        if self._is_host_leaf(node):
            self.host_leaves.add(node)
        else:
            self.host_leaves.discard(node)

    def _update_dup(self, node: HNode) -> None:
        """``utc._update_duplicate_tracking``."""
        if (
            node is not self.root
            and node.full
            and node.full_host
            and node.wt_pending is None
            and node.lb_pending is None
        ):
            self.full_host_duplicates.setdefault(node.id, node)
        else:
            self.full_host_duplicates.pop(node.id, None)

    def _set_swa(self, node: HNode) -> None:
        """``utc.set_component_device_value`` for SWA (the SWARebuild action)."""
        assert not node.swa
        node.swa = True
        if self.swa_host_lru.in_list(node):
            self.swa_host_lru.remove(node)
        self.swa_lru.insert_mru(node)
        if node.swa_lock > 0:
            self.swa_protected += node.length
        else:
            self.swa_evictable += node.length

    def _refresh_swa_window(self, node: HNode) -> None:
        """``UnifiedLRUList.reset_node_and_window_ancestors_mru(node, root, W + page)``."""
        limit = self.window + self.page_size
        prev = self.swa_lru.head
        acc = 0
        while node is not self.root and acc < limit:
            if node.swa:
                self.swa_lru.move_after(prev, node)
                prev = node
            acc += node.length
            node = node.parent

    def _split(self, child: HNode, pages: int) -> HNode:
        """``utc._split_node`` with FULL / SWA ``redistribute_on_node_split``."""
        new = self._new_node(child.key[:pages], pages * self.page_size, child.priority)
        new.hit_count = child.hit_count
        new.creation_time = child.creation_time
        new.lb_pending = child.lb_pending
        new.parent = child.parent
        new.children = {child.key.item(pages): child}
        child.parent = new
        child.key = child.key[pages:]
        child.length -= new.length
        new.full, new.full_host, new.swa, new.swa_host = (
            child.full,
            child.full_host,
            child.swa,
            child.swa_host,
        )
        new.full_lock, new.swa_lock = child.full_lock, child.swa_lock
        new.full_host_lock, new.swa_host_lock = child.full_host_lock, child.swa_host_lock
        new.full_host_uuid, child.full_host_uuid = child.full_host_uuid, None
        if child.value is not None:
            new.value, child.value = child.value[:pages], child.value[pages:]
        if child.fh_ids is not None:
            new.fh_ids, child.fh_ids = child.fh_ids[:pages], child.fh_ids[pages:]
        if child.sh_ids is not None:
            new.sh_ids, child.sh_ids = child.sh_ids[:pages], child.sh_ids[pages:]
        if child.hash_value is not None:  # split_node_hash_value
            new.hash_value, child.hash_value = child.hash_value[:pages], child.hash_value[pages:]
        if child.swa_host:
            lru = self.swa_host_lru
            if not new.swa and new.swa_host_lock == 0:
                if lru.in_list(child):
                    lru.insert_after(child, new)
                else:
                    lru.insert_mru(new)
            if not child.swa and child.swa_host_lock == 0 and not lru.in_list(child):
                lru.insert_mru(child)
        new.swa_uuid, child.swa_uuid = child.swa_uuid, None
        new.swa_host_uuid, child.swa_host_uuid = child.swa_host_uuid, None
        new.parent.children[new.key.item(0)] = new
        if self._depth_hooks:  # utc._split_node: the tlru lens of the upper part
            self.eviction_order.on_split(new, child)
        if child.wt_pending is not None:
            new.wt_pending = child.wt_pending
            self._replace_pending_write_through_node(child.wt_pending, child, (new, child))
        if new.swa:
            self.swa_lru.insert_after(child, new)
        child.last_access_time = self._tick()
        self._update_leaf(new)
        self._update_leaf(child)
        self._update_dup(new)
        return new

    # ------------------------------------------------------------------ match
    def match_prefix(self, key: np.ndarray) -> HostMatch:
        """``utc._match_prefix_helper`` + ``_match_post_processor`` with a device-only and a
        host-inclusive boundary (validators: ``full.py`` / ``swa.py:create_match_validator``)."""
        p, w = self.page_size, self.window
        node = self.root
        off = 0
        values: list[int] = []
        best = best_dev = self.root
        best_dev_vlen = 0
        full_hit = 0
        h_run = d_run = float("inf")
        n = len(key)
        while off < n:
            child = node.children.get(key.item(off))
            if child is None or (not child.full and not child.full_host):
                break
            m = match_pages(child.key, key, off)
            full_hit += m * p
            partial = m < len(child.key)
            if partial:
                child = self._split(child, m)
            if child.full:
                values.append(child.length)
            node = child
            if child.swa or child.swa_host:
                h_run += child.length
            else:
                h_run = 0
            if child.swa:
                d_run += child.length
            else:
                d_run = 0
            if (child.full or child.full_host) and h_run >= w:
                best = child
            if child.full and d_run >= w:
                best_dev_vlen = len(values)
                best_dev = child
            if partial:
                break
            off += m
        self._refresh_swa_window(best)
        t = self._tick()
        x = best
        while x is not None:
            x.last_access_time = t
            t -= 0.00001
            x = x.parent
        device_len = sum(values[:best_dev_vlen])
        host_hit = 0  # full.py:finalize_match_result_in_tree_core
        x = best
        while x is not best_dev and x is not self.root:
            if x.full_host:
                host_hit += x.length
            x = x.parent
        aligned = full_hit // p * p  # swa.py:finalize_match_result_in_tree_core
        branching = aligned if aligned > device_len + host_hit else None
        n_swa = swa_host_hit = 0
        x = best
        while x is not self.root and n_swa < w:
            if x.swa:
                n_swa += x.length
            elif x.swa_host:
                swa_host_hit += x.length
                n_swa += x.length
            else:
                break
            x = x.parent
        return HostMatch(device_len, best_dev, best, host_hit, swa_host_hit, full_hit, branching)

    # ------------------------------------------------------------------ device locks
    def lock(self, node: HNode) -> LockReceipt:
        """``utc.inc_lock_ref``: ``full.py`` / ``swa.py:acquire_component_lock``."""
        cur = node
        while cur is not self.root and not cur.full:  # the device-evicted bottom segment
            cur.full_lock += 1
            cur = cur.parent
        while cur is not self.root:
            if cur.full_lock == 0:
                self.full_evictable -= cur.length
                self.full_protected += cur.length
            cur.full_lock += 1
            self.device_leaves.discard(cur)
            cur = cur.parent
        covered = 0
        uuid = None
        cur = node
        while cur is not self.root and covered < self.window:
            if cur.swa_lock == 0 and cur.swa:
                self.swa_evictable -= cur.length
                self.swa_protected += cur.length
            cur.swa_lock += 1
            covered += cur.length
            if covered >= self.window:
                if cur.swa_uuid is None:
                    cur.swa_uuid = self._new_uuid()
                uuid = cur.swa_uuid
            cur = cur.parent
        self._update_leaf(node)
        return LockReceipt(node, uuid)

    def unlock(self, receipt: LockReceipt | None) -> None:
        """``utc.dec_lock_ref``: SWA segment first, then the FULL path."""
        if receipt is None:
            return
        node = receipt.node
        cur = node
        while cur is not self.root:
            assert cur.swa_lock > 0, f"SWA release hit lock_ref=0 on node {cur.id}"
            ref = cur.swa_lock
            if ref == 1 and cur.swa:
                self.swa_evictable += cur.length
                self.swa_protected -= cur.length
            cur.swa_lock = ref - 1
            if ref == 1:
                self._update_leaf(cur)
            if receipt.swa_uuid is not None and cur.swa_uuid == receipt.swa_uuid:
                break
            cur = cur.parent
        cur = node
        while cur is not self.root:
            assert cur.full_lock > 0, f"FULL release hit lock_ref=0 on node {cur.id}"
            if cur.full_lock == 1 and cur.full:
                self.full_evictable += cur.length
                self.full_protected -= cur.length
            cur.full_lock -= 1
            if cur.full_lock == 0:
                self._update_leaf(cur)
            cur = cur.parent
        self._update_leaf(node)

    def lock_footprint(self, node: HNode) -> tuple[int, int]:
        """(FULL, SWA) evictable tokens ``lock(node)`` would protect."""
        full = 0
        cur = node
        while cur is not self.root:
            if cur.full_lock == 0 and cur.full:
                full += cur.length
            cur = cur.parent
        swa = covered = 0
        cur = node
        while cur is not self.root and covered < self.window:
            if cur.swa_lock == 0 and cur.swa:
                swa += cur.length
            covered += cur.length
            cur = cur.parent
        return full, swa

    # ------------------------------------------------------------------ host locks
    def host_lock(self, node: HNode) -> HostLockReceipt:
        """``utc.inc_host_lock_ref``: the FULL host lock of the node itself and the SWA host
        window (``acquire_component_lock(lock_host=True)``)."""
        full_uuid = None
        if node.full_host or self.is_write_back:
            if node.full_host_uuid is None:
                node.full_host_uuid = self._new_uuid()
            full_uuid = node.full_host_uuid
            node.full_host_lock += 1
            self._update_leaf(node)
        covered = 0
        swa_uuid = None
        cur = node
        while cur is not self.root and covered < self.window:
            if cur.swa_host_lock == 0 and cur.swa_host and self.swa_host_lru.in_list(cur):
                self.swa_host_lru.remove(cur)
            cur.swa_host_lock += 1
            covered += cur.length
            if covered >= self.window:
                if cur.swa_host_uuid is None:
                    cur.swa_host_uuid = self._new_uuid()
                swa_uuid = cur.swa_host_uuid
            cur = cur.parent
        self._update_leaf(node)
        return HostLockReceipt(node, full_uuid, swa_uuid)

    def host_unlock(self, receipt: HostLockReceipt) -> None:
        """``utc.dec_host_lock_ref``: SWA host segment, then the FULL host segment."""
        node = receipt.node
        cur = node
        while cur is not self.root:
            ref = cur.swa_host_lock
            assert ref > 0, f"SWA host release hit host_lock_ref=0 on node {cur.id}"
            if ref == 1 and cur.swa_host and not cur.swa and not self.swa_host_lru.in_list(cur):
                self.swa_host_lru.insert_mru(cur)
            cur.swa_host_lock = ref - 1
            if ref == 1:
                self._update_leaf(cur)
            if receipt.swa_uuid is not None and cur.swa_host_uuid == receipt.swa_uuid:
                break
            cur = cur.parent
        if receipt.full_uuid is not None:
            cur = node
            while True:
                if not cur.full_host and not self.is_write_back:
                    break
                assert cur.full_host_lock > 0, f"FULL host release hit 0 on node {cur.id}"
                cur.full_host_lock -= 1
                self._update_leaf(cur)
                if cur.full_host_uuid == receipt.full_uuid:
                    break
                cur = cur.parent
        self._update_leaf(node)

    # ------------------------------------------------------------------ recording
    def start_recording(self, executor=None):
        """Record every memory op with device and host page ids from now on (empty pools
        only): the allocator's executor (started here unless given) also keeps the host pools'
        page ids; returns it."""
        from simulator.kv_pages import HostPageState

        assert self.host_full.used() == 0 and self.host_swa.used() == 0, "host pools must be empty"
        ex = executor if executor is not None else self.allocator.start_recording()
        p = self.page_size
        ex.host = HostPageState(self.host_full.capacity // p, self.host_swa.capacity // p)
        self.host_full.recorder = self.host_swa.recorder = ex
        return ex

    @property
    def recording(self) -> bool:
        return self.allocator.recorder is not None

    def _record(self, kind: OpKind, full: np.ndarray, reason: str = EVICTION, **fields) -> MemoryOp:
        """Apply one device record through the allocator's executor (counters move apart)."""
        rec = self.allocator.recorder
        return rec.apply(MemoryOp(kind, rec.step, reason, full, **fields))

    def path_values(self, node: HNode) -> np.ndarray:
        """Device FULL page ids along the path to ``node`` (recording only)."""
        parts = []
        while node is not self.root:
            parts.append(node.value)
            node = node.parent
        return np.concatenate(parts[::-1]) if parts else _EMPTY

    # ------------------------------------------------------------------ views
    def path_length(self, node: HNode) -> int:
        n = 0
        while node is not self.root:
            n += node.length
            node = node.parent
        return n

    def iter_nodes(self):
        stack = list(self.root.children.values())
        while stack:
            x = stack.pop()
            yield x
            stack.extend(x.children.values())

    def stats(self) -> dict:
        """Node counts as the oracle's ``tree`` object reports them."""
        out = Counter()
        for x in self.iter_nodes():
            out["nodes"] += 1
            out["backed_up_nodes"] += x.full_host
            out["host_only_nodes"] += not x.full and x.full_host
            out["device_full_nodes"] += x.full
            out["swa_device_tombstones"] += x.full and not x.swa
            out["swa_host_only_nodes"] += not x.swa and x.swa_host
        return dict(out)
