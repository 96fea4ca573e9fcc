"""Backups (D->H), load-back (H->D) and their acknowledgements in the HiCache tree.

SGLang 0.5.23, ``mem_cache/unified_radix_cache.py``: ``_execute_and_commit_kv_backup``,
``_execute_kv_backup``, ``_track_write_through_node``, ``_finish_write_through_ack``,
``writing_check``, ``loading_check``, ``load_back`` / ``_load_back_transfers``,
``init_load_back``, ``check_hicache_events``, ``flush_pending_backups``,
``ready_to_load_host_cache``; ``hybrid_cache/hybrid_cache_controller.py``: ``write`` /
``allocate_host_transfers`` (FULL host slots, then SWA host slots with one reclaim of the whole
size, ``pool_host/group.py:alloc``) and ``load`` / ``_resolve_device_transfers``.

Transfers complete within the step that submits them (the oracle's ack rule): a write queued by
an insert is submitted by ``flush_pending_backups`` at the step's end and acknowledged by the
next ``check_hicache_events``; a load is submitted by ``ready_to_load_host_cache`` and
acknowledged likewise. Until its ack a write locks the node's whole root path on device, a
load its anchor's path on device and its host window.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from simulator.memory_ops import OpKind
from simulator.radix.hicache_node import HNode, HostLockReceipt
from simulator.request_kv import LockReceipt


@dataclass
class _Write:
    node: HNode
    lock: LockReceipt | None
    publish: list[HNode]


@dataclass
class _Load:
    node: HNode
    lock: LockReceipt
    host_lock: HostLockReceipt


@dataclass
class AckedTransfers:
    """What one ``check_hicache_events`` acknowledged (tokens per direction and pool), for an
    engine that times transfers."""

    d2h_full: int = 0
    d2h_swa: int = 0
    h2d_full: int = 0
    h2d_swa: int = 0
    writes: int = 0
    loads: int = 0
    ops: list = field(default_factory=list)


_NO_IDS = np.empty(0, dtype=np.int64)


def _concat(parts: list) -> np.ndarray:
    """Page-id arrays joined (empty when there are none)."""
    return np.concatenate(parts) if parts else _NO_IDS


class HiCacheTransfer:
    """Transfer methods of :class:`~simulator.radix.hicache_tree.HiCacheTree` (a mixin)."""

    def _init_transfer_state(self) -> None:
        self.ongoing_write_through: dict[int, _Write] = {}
        self.ongoing_load_back: dict[int, _Load] = {}
        self._write_queue: list[tuple[int, int, int]] = []  # (ack id, FULL, SWA tokens)
        self._ack_write_queue: list[list[tuple[int, int, int]]] = []
        self._load_queue: list[tuple[int, int, int]] = []
        self._ack_load_queue: list[list[tuple[int, int, int]]] = []
        self._tracking_unbacked = False
        self._unbacked_tokens = 0

    # ------------------------------------------------------------------ backups
    def _unbacked_swa_window(self, node: HNode) -> list[HNode]:
        """``swa.py:_collect_unbacked_swa_nodes_in_window``: device-only SWA nodes within one
        window above ``node`` (deepest first); stops at SWA-less or write-pending nodes."""
        covered = 0
        out: list[HNode] = []
        cur = node
        while cur is not self.root and covered < self.window:
            if cur.wt_pending is not None or not (cur.swa or cur.swa_host):
                break
            covered += cur.length
            if cur.swa and not cur.swa_host:
                out.append(cur)
            cur = cur.parent
        return out

    def _backup_chain(self, node: HNode) -> list[HNode]:
        """``utc._build_backup_kv_action``: the node and its unbacked ancestors, top first."""
        chain = [node]
        x = node.parent
        while x is not None and x is not self.root and not x.full_host:
            chain.append(x)
            x = x.parent
        chain.reverse()
        return chain

    def _alloc_host(self, full_tokens: int, swa_tokens: int, full_dev=_NO_IDS, swa_dev=_NO_IDS):
        """``HybridCacheController.allocate_host_transfers``: FULL slots, then SWA slots with
        one reclaim of the whole SWA size (fact 23); an SWA failure frees the FULL slots.
        Returns the (FULL, SWA) host page ids (empty unless recording) or None. While
        recording each allocation is a BACKUP_D2H record of the device pages ``*_dev``
        (``HybridCacheController.write``: the copy is queued with the allocation)."""
        full_ids = self.host_full.alloc(full_tokens, full_dev)
        if full_ids is None:
            return None
        swa_ids = self.host_swa.alloc(swa_tokens, swa_dev)
        if swa_ids is None:
            self.evict_host(swa_tokens, "swa")
            swa_ids = self.host_swa.alloc(swa_tokens, swa_dev)
            if swa_ids is None:
                self.host_full.release(full_tokens, full_ids)
                return None
        return full_ids, swa_ids

    def _execute_and_commit_kv_backup(self, chain: list[HNode], write_back: bool = False) -> int:
        """Back up ``chain`` top-down, stopping at the first failure; FULL tokens of the last
        backup (0 = failed or nothing to do)."""
        written = 0
        for node in chain:
            assert node.full, node
            full_tokens = 0 if node.full_host else node.length
            swa_nodes: list[HNode] = []
            if not node.swa_host or self._unbacked_swa_window(node):
                swa_nodes = self._unbacked_swa_window(node)
            if full_tokens == 0 and not swa_nodes:
                continue
            swa_tokens = sum(n.length for n in swa_nodes)
            avail = self.host_full.available_size()
            if avail < full_tokens:
                needed = full_tokens - avail
                if self.evict_host(needed, "full") < needed:
                    return 0
            if self.recording:  # device pages the backup reads (SWA window top first)
                full_dev = node.value if full_tokens else _NO_IDS
                swa_dev = _concat([n.value for n in reversed(swa_nodes)])
                ids = self._alloc_host(full_tokens, swa_tokens, full_dev, swa_dev)
            else:
                ids = self._alloc_host(full_tokens, swa_tokens)
            if ids is None:
                return 0
            self._write_queue.append((node.id, full_tokens, swa_tokens))
            self._commit_backup(node, full_tokens, swa_nodes, *ids)
            c = self.counts
            c["backup_nodes"] += 1
            c["backup_full_tokens"] += full_tokens
            c["backup_swa_tokens"] += swa_tokens
            lock = None if write_back else self.lock(node)
            publish = list(dict.fromkeys([*swa_nodes, node]))
            for n in publish:  # utc.mark_write_through_pending
                assert n.wt_pending in (None, node.id)
                n.wt_pending = node.id
            publish.sort(key=self._depth)
            self.ongoing_write_through[node.id] = _Write(node, lock, publish)
            written = full_tokens
        return written

    def _commit_backup(
        self, node: HNode, full_tokens: int, swa_nodes: list[HNode], full_ids, swa_ids
    ) -> None:
        """``utc.commit_backup``: host values for the node and its SWA window (top first)."""
        if full_tokens:
            node.full_host = True
            node.fh_ids = full_ids if len(full_ids) else None
        swa_nodes.reverse()
        off = 0
        for n in swa_nodes:
            assert n.swa and not n.swa_host
            n.swa_host = True
            if len(swa_ids):
                k = n.length // self.page_size
                n.sh_ids = swa_ids[off : off + k]
                off += k

    def _depth(self, node: HNode) -> int:
        d = 0
        while node is not self.root:
            d += 1
            node = node.parent
        return d

    def _replace_pending_write_through_node(self, ack_id: int, old: HNode, new_nodes) -> None:
        """``_replace_pending_write_through_node``: a split pending node publishes both halves."""
        pending = self.ongoing_write_through.get(ack_id)
        if pending is None or old not in pending.publish:
            return
        out: list[HNode] = []
        for n in pending.publish:
            out.extend(new_nodes if n is old else (n,))
        pending.publish = out

    def _backup_node_for_write_back(self, node: HNode) -> bool:
        """``backup_node_for_write_back``: a synchronous backup, acknowledged at once."""
        if self.ongoing_write_through:
            self.writing_check(write_back=True)
        if self._execute_and_commit_kv_backup([node], write_back=True) == 0:
            return False
        self.writing_check(write_back=True)
        return True

    def flush_pending_backups(self) -> None:
        """``flush_pending_backups`` -> ``start_writing``: submit the queued D->H copies as
        one operation."""
        if not self._write_queue:
            return
        op = self._write_queue
        self._write_queue = []
        self._ack_write_queue.append(op)
        c = self.counts
        c["d2h_ops"] += 1
        c["d2h_full_tokens"] += sum(x[1] for x in op)
        c["d2h_swa_tokens"] += sum(x[2] for x in op)

    def writing_check(
        self, write_back: bool = False, acked: AckedTransfers | None = None, finish_count: int | None = None
    ) -> None:
        """``writing_check``: acknowledge the first ``finish_count`` submitted write operations
        (default: all; write_back: all, synchronously)."""
        if write_back:
            self.flush_pending_backups()
            finish_count = None
        n = (
            len(self._ack_write_queue)
            if finish_count is None
            else min(finish_count, len(self._ack_write_queue))
        )
        for _ in range(n):
            op = self._ack_write_queue.pop(0)
            for ack_id, full, swa in op:
                if ack_id in self.ongoing_write_through:
                    self._finish_write_through_ack(ack_id)
                if acked is not None:
                    acked.d2h_full += full
                    acked.d2h_swa += swa
                    acked.writes += 1

    def _finish_write_through_ack(self, ack_id: int) -> None:
        """``_finish_write_through_ack``: clear the pending marks, release the path lock."""
        self.counts["write_acks"] += 1
        w = self.ongoing_write_through.pop(ack_id)
        for n in w.publish:  # utc.finish_write_through
            if n.wt_pending == ack_id:
                n.wt_pending = None
                self._update_dup(n)
        if w.lock is not None:
            self.unlock(w.lock)
        if self.storage is not None:  # every published fragment goes to L3
            for n in w.publish:
                self.storage.write_backup_storage(n)

    # ------------------------------------------------------------------ load-back
    def init_load_back(
        self, best: HNode, last_device: HNode, host_hit: int, swa_host_hit: int
    ) -> tuple[int, HNode]:
        """``UnifiedRadixCache.init_load_back``: (tokens made device-resident, new last node)."""
        if not best.full or host_hit > 0 or swa_host_hit > 0:
            if self.load_back(best):
                n = 0
                x = best
                while x is not last_device:
                    n += x.length
                    x = x.parent
                return (n, best) if n else (0, last_device)
        return 0, last_device

    def load_back(self, best: HNode) -> bool:
        """``load_back`` / ``_load_back_transfers``: all FULL of the evicted segment under
        ``best`` and the host-only SWA of its window, or nothing."""
        self.counts["load_back_calls"] += 1
        host_lock = self.host_lock(best)
        lock = self.lock(best)
        kv_nodes: list[HNode] = []
        x = best
        while x is not self.root and not x.full:  # full.py LOAD_BACK
            kv_nodes.append(x)
            x = x.parent
        swa_nodes: list[HNode] = []
        n_swa = 0
        x = best
        while x is not self.root and n_swa < self.window:  # swa.py LOAD_BACK
            if not x.swa:
                swa_nodes.append(x)
            n_swa += x.length
            x = x.parent
        if any(n.lb_pending not in (None, best.id) for n in (*kv_nodes, *swa_nodes)):
            kv_nodes, swa_nodes = [], []
        kv_tokens = sum(n.length for n in kv_nodes)
        swa_tokens = sum(n.length for n in swa_nodes)
        ok = not (kv_tokens < max(1, self.load_back_threshold) and not swa_nodes)
        if ok and self.allocator.full_available_size() < kv_tokens:
            self.evict_for_alloc(kv_tokens - self.allocator.full_available_size(), 0)
            ok = self.allocator.full_available_size() >= kv_tokens
        if not ok:
            self.unlock(lock)
            self.host_unlock(host_lock)
            return False
        if self.recording:
            ok = self._alloc_device_for_load_ids(kv_nodes, swa_nodes, kv_tokens, swa_tokens)
        else:
            ok = self._alloc_device_for_load(kv_tokens, swa_tokens)
        self.unlock(lock)
        if not ok:
            self.host_unlock(host_lock)
            return False
        self._commit_load_back(best, kv_nodes, swa_nodes)
        self._load_queue.append((best.id, kv_tokens, swa_tokens))
        self.counts["load_back_ok"] += 1
        self.counts["load_full_tokens"] += kv_tokens
        self.counts["load_swa_tokens"] += swa_tokens
        self.ongoing_load_back[best.id] = _Load(best, self.lock(best), host_lock)
        return True

    def _alloc_device_for_load(self, kv_tokens: int, swa_tokens: int) -> bool:
        """``HybridCacheController.load``: FULL slots, then SWA slots (evicting SWA once when
        short, ``_evict_swa_for_device_alloc``); all or nothing."""
        a, p = self.allocator, self.page_size
        if kv_tokens:
            if a.full_free * p < kv_tokens:
                return False
            a.full_free -= kv_tokens // p
        if swa_tokens:
            if a.swa_free * p < swa_tokens:
                self.evict_for_alloc(0, swa_tokens - a.swa_available_size())
            if a.swa_free * p < swa_tokens:
                a.full_free += kv_tokens // p
                return False
            a.swa_free -= swa_tokens // p
        return True

    def _alloc_device_for_load_ids(self, kv_nodes, swa_nodes, kv_tokens: int, swa_tokens: int) -> bool:
        """:meth:`_alloc_device_for_load` on page ids (recording): the FULL load is a LOAD_H2D
        record that allocates the loaded nodes' FULL pages (``full_attn_allocator.alloc``), the
        SWA load one that allocates SWA pages for the window's FULL pages and maps them
        (``_resolve_device_transfers`` + ``RebuildFullToSWAMapping``); a failed SWA allocation
        frees the FULL pages again (``full_allocator.free``)."""
        a, p = self.allocator, self.page_size
        assert not a._in_group, "a load inside a free group"
        loaded = []
        if kv_tokens:
            if a.full_free * p < kv_tokens:
                return False
            a.full_free -= kv_tokens // p
            top_first = kv_nodes[::-1]
            op = self.host_full.record(OpKind.LOAD_H2D, _concat([n.fh_ids for n in top_first]))
            assert len(op.full) * p == kv_tokens, "a loaded node has no host page ids"
            off = 0
            for n in top_first:
                k = n.length // p
                n.value, off = op.full[off : off + k], off + k
                loaded.append(n)
        if swa_tokens:
            if a.swa_free * p < swa_tokens:
                self.evict_for_alloc(0, swa_tokens - a.swa_available_size())
            if a.swa_free * p < swa_tokens:
                a.full_free += kv_tokens // p
                if loaded:
                    self._record(OpKind.FREE_FULL, _concat([n.value for n in loaded]))
                    for n in loaded:
                        n.value = None
                return False
            a.swa_free -= swa_tokens // p
            top_first = swa_nodes[::-1]
            host = _concat([n.sh_ids for n in top_first])
            assert len(host) * p == swa_tokens, "a loaded SWA node has no host page ids"
            self.host_swa.record(OpKind.LOAD_H2D, host, _concat([n.value for n in top_first]))
        return True

    def _commit_load_back(self, best: HNode, kv_nodes: list[HNode], swa_nodes: list[HNode]) -> None:
        """``utc.commit_load_back``: device values for the loaded nodes, ancestors first."""
        if self.is_write_back:
            for n in kv_nodes:
                n.lb_pending = best.id
        for n in reversed(kv_nodes):
            n.full = True
            if n.full_lock > 0:
                self.full_protected += n.length
            else:
                self.full_evictable += n.length
            self._update_leaf(n)
        self._update_leaf(best)
        for n in reversed(swa_nodes):
            self._set_swa(n)
        self._update_leaf(best)

    def ready_to_load_host_cache(self) -> None:
        """``ready_to_load_host_cache`` -> ``start_loading``: submit the queued H->D copies."""
        if not self._load_queue:
            return
        op = self._load_queue
        self._load_queue = []
        self._ack_load_queue.append(op)
        c = self.counts
        c["h2d_ops"] += 1
        c["h2d_full_tokens"] += sum(x[1] for x in op)
        c["h2d_swa_tokens"] += sum(x[2] for x in op)

    def loading_check(self, acked: AckedTransfers | None = None, finish_count: int | None = None) -> None:
        """``loading_check``: acknowledge the first ``finish_count`` load operations (default:
        all), releasing their device and host locks (``finish_load_back``)."""
        n = (
            len(self._ack_load_queue)
            if finish_count is None
            else min(finish_count, len(self._ack_load_queue))
        )
        for _ in range(n):
            op = self._ack_load_queue.pop(0)
            for ack_id, full, swa in op:
                ld = self.ongoing_load_back.pop(ack_id)
                self.unlock(ld.lock)
                self.host_unlock(ld.host_lock)
                x = ld.node
                while x is not None and x is not self.root:
                    if self.is_write_back:
                        if x.lb_pending != ack_id:
                            x = x.parent
                            continue
                        x.lb_pending = None
                    self._update_dup(x)
                    x = x.parent
                self.counts["load_acks"] += 1
                if acked is not None:
                    acked.h2d_full += full
                    acked.h2d_swa += swa
                    acked.loads += 1

    def hicache_idle(self) -> bool:
        """Nothing queued or unacknowledged (the oracle then skips the event check)."""
        return not (
            self._write_queue
            or self._ack_write_queue
            or self._load_queue
            or self._ack_load_queue
            or self.ongoing_write_through
            or self.ongoing_load_back
        )

    def check_hicache_events(
        self, write_finish_count: int | None = None, load_finish_count: int | None = None
    ) -> AckedTransfers:
        """``check_hicache_events`` at the start of a scheduler step: submit what is queued,
        then acknowledge finished writes and loads; returns what was acknowledged.

        The counts are how many submitted operations (oldest first, see
        :meth:`inflight_ops`) have completed, as SGLang's ready-event counts; the default
        (None) is all of them, the oracle's rule that a transfer completes within a step."""
        acked = AckedTransfers()
        storage = self.storage
        if storage is not None:
            storage.pump()  # the storage threads' work queued before this step
        elif self.hicache_idle():
            return acked
        self.flush_pending_backups()
        sizes = storage.sample() if storage is not None else None
        self.writing_check(acked=acked, finish_count=write_finish_count)
        self.loading_check(acked=acked, finish_count=load_finish_count)
        if storage is not None:
            storage.drain(sizes)
        return acked

    def inflight_ops(self) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """Submitted, unacknowledged operations, oldest first, as (FULL, SWA) tokens:
        (D->H writes, H->D loads); an engine times them to decide the finish counts."""

        def sizes(queue):
            return [(sum(x[1] for x in op), sum(x[2] for x in op)) for op in queue]

        return sizes(self._ack_write_queue), sizes(self._ack_load_queue)

    def transfer_counts(self) -> Counter:
        return Counter(self.counts)
