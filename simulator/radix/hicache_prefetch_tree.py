"""The L3 tier attached to the HiCache tree: L2->L3 backups, prefetch on enqueue, the storage
threads' work and the scheduler-side drains (SGLang 0.5.23, cache mode).

Paths are under ``python/sglang/srt/``; ``urc`` = ``mem_cache/unified_radix_cache.py``,
``cc`` = ``managers/cache_controller.py``, ``hcc`` = ``mem_cache/hybrid_cache/
hybrid_cache_controller.py``, ``utc`` = ``mem_cache/unified_cache/unified_tree_core.py``,
``swa.py`` = ``mem_cache/unified_cache/components/swa.py``.

Lifecycle of a prefetch (``Scheduler._prefetch_kvcache`` -> ``urc.prefetch_from_storage``):
issued when the request enters the waiting queue (threshold, rate limit, host lock of the
anchor); the storage thread's hit query (``hcc._storage_hit_query``) runs at the next pump;
the scheduler's drain allocates host slots for the hit (``_drain_and_alloc_storage_hit``,
with host eviction, partial allocation and the SWA staging); the I/O thread reads the pages
(``cc._page_transfer`` + ``hcc._page_transfer_sidecar``); the ack drain inserts them as
host-only nodes (``_handle_prefetch_result`` -> ``utc.insert_host``, ``swa.py:_commit_prefetch``).
Admission polls it with the termination policy (``urc.check_prefetch_progress``).
Released host slots go through SGLang's release queues, freed by the drain of a later step.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from policies.hicache_prefetch import (
    PrefetchProgress,
    PrefetchTermination,
    prefetch_capacity_limit,
)
from simulator.memory_ops import OpKind
from simulator.radix.hicache_insert_host import HostInsert, _cut
from simulator.radix.hicache_node import HNode, HostLockReceipt
from simulator.radix.hicache_storage import KV, SWA, PageStore, page_hash_chain

_PREFETCH = OpKind.STORAGE_PREFETCH  # host slots filled from L3 (recording)


@dataclass(eq=False)
class PrefetchOp:
    """``PrefetchOperation`` + ``_OngoingPrefetch`` of one request."""

    rid: str
    anchor: HNode
    pages: np.ndarray  # the page-aligned prefetch key
    last_hash: int | None
    anchor_lock: HostLockReceipt
    swa_keys: int  # SWA TRAILING_PAGES placeholder pages (0: no SWA transfer)
    storage_start: int
    hashes: list[int] = field(default_factory=list)
    hit_tokens: int = 0
    host_tokens: int | None = None  # FULL host slots allocated for the hit
    swa_host_tokens: int = 0  # SWA staging slots allocated and still held
    full_held: int = 0  # FULL host slots still held (not yet in the tree or released)
    swa_trailing: int = 0  # SWA keys: the placeholders, then the hit's last pages (_sync_trailing_keys)
    swa_hits: int = 0
    completed_tokens: int = 0
    terminated: bool = False
    pool_transfers_done: bool = True
    progress: PrefetchProgress | None = None
    deadline_expired: bool = False
    terminated_s: float = -math.inf  # when the admission poll terminated it (timed engines)
    # host page ids of the FULL slots and the SWA staging (recording memory ops only)
    full_ids: np.ndarray | None = None
    swa_ids: np.ndarray | None = None

    @property
    def requested_tokens(self) -> int:
        return len(self.pages) * self.progress.page_size


@dataclass
class _Backup:
    node: HNode
    lock: HostLockReceipt
    hashes: list[int]
    swa_keys: list[int]


@dataclass
class _Ack:
    """``PrefetchAck``: progress (completed tokens), the SWA pool hits, or the completion."""

    op: PrefetchOp
    completed_tokens: int | None = None
    swa_hits: int | None = None
    completed_req: bool = False


class StorageController(HostInsert):
    """The storage half of ``HybridCacheController`` plus ``UnifiedRadixCache``'s L3 methods,
    over a :class:`~simulator.radix.hicache_tree.HiCacheTree`."""

    def __init__(self, tree, store: PageStore, policy: PrefetchTermination, threshold: int) -> None:
        self.tree = tree
        self.store = store
        self.policy = policy
        self.prefetch_threshold = threshold
        self.page_size = tree.page_size
        # swa.py: full_window_pages = ceil(sliding_window_size / page)
        self.full_window_pages = -(-tree.window // tree.page_size)
        self.prefetch_capacity_limit = prefetch_capacity_limit(tree.host_full.capacity)
        self.prefetch_tokens_occupied = 0
        self.ongoing_prefetch: dict[str, PrefetchOp] = {}
        self.ongoing_backup: dict[int, _Backup] = {}
        self._next_backup_id = 0
        self.prefetch_queue: list[PrefetchOp] = []
        self.prefetch_hit_queue: list[PrefetchOp] = []
        self.prefetch_buffer: list[PrefetchOp] = []
        self.ack_prefetch_queue: list[_Ack] = []
        self.backup_queue: list[int] = []
        self.ack_backup_queue: list[int] = []
        # host_mem_release_queue / extra_host_mem_release_queues[SWA], in tokens
        self.release_full: list[int] = []
        self.release_swa: list[int] = []
        # the released slots' host page ids, beside them (None unless recording)
        self.release_full_ids: list[np.ndarray | None] = []
        self.release_swa_ids: list[np.ndarray | None] = []
        self.loaded_tokens: dict[str, tuple[int, int | None]] = {}
        self.holding: set[PrefetchOp] = set()  # ops holding host slots
        self.now_s = 0.0  # the engine's clock for the timeout policy
        self.counts: Counter = tree.counts

    # ------------------------------------------------------------------ hashes
    def last_hash(self, node: HNode) -> int | None:
        """``UnifiedTreeNode.get_last_hash_value``."""
        return node.hash_value[-1] if node.hash_value else None

    def hash_new_node(self, node: HNode) -> None:
        """``compute_node_hash_values``: chain from the parent's last page hash."""
        parent = node.parent
        prior = parent.hash_value[-1] if parent is not None and parent.length and parent.hash_value else None
        node.hash_value = page_hash_chain(node.key, prior)

    # ------------------------------------------------------------------ L2 -> L3
    def write_backup_storage(self, node: HNode) -> None:
        """``urc.write_backup_storage`` after a write ack: the node's FULL pages and, when its
        SWA has a host copy, its SWA pages (``swa.py`` BACKUP_STORAGE: trailing whole pages),
        host-locked until the storage ack."""
        if not node.full_host:  # build_storage_backup_spec: None unless backed up
            return
        hashes = list(node.hash_value or [])
        swa_keys = hashes if node.swa_host and hashes else []
        op_id = self._next_backup_id
        self._next_backup_id += 1
        self.ongoing_backup[op_id] = _Backup(node, self.tree.host_lock(node), hashes, swa_keys)
        self.backup_queue.append(op_id)
        self.counts["storage_backups"] += 1

    # ------------------------------------------------------------------ prefetch issue
    def arrive(self, cache, req) -> None:
        """``Scheduler._prefetch_kvcache`` when ``req`` enters the waiting queue: match, then
        prefetch the part past the device + host match when the anchor is backed up."""
        cache.match(req)
        tree = self.tree
        anchor = req.best_match_node  # match result's last_host_node
        matched = req.prefix_len + req.host_hit_length
        if not (anchor.full_host or anchor is tree.root):
            return
        p = self.page_size
        match_end = req.prompt_len + req.num_outputs - 1  # Req._compute_max_prefix_len
        n_pages = max(0, match_end - matched) // p
        start = matched // p
        self.prefetch_from_storage(req.rid, anchor, req.pages[start : start + n_pages], matched)
        if req.rid in self.ongoing_prefetch:
            self.counts["prefetch_issued"] += 1

    def prefetch_from_storage(self, rid: str, anchor: HNode, pages: np.ndarray, storage_start: int) -> None:
        """``urc.prefetch_from_storage`` (cache mode): threshold, rate limit, anchor host lock,
        SWA staging size (``swa.py:prepare_prefetch``), queued for the hit query."""
        p = self.page_size
        if rid in self.ongoing_prefetch:
            return
        length = len(pages) * p
        if length < self.prefetch_threshold:
            return
        if self.prefetch_tokens_occupied >= self.prefetch_capacity_limit:  # prefetch_rate_limited
            return
        lock = self.tree.host_lock(anchor)
        n = len(pages)
        if n >= self.full_window_pages:
            swa = self.full_window_pages
        elif n > 0 and anchor is self.tree.root:
            swa = n  # at the root the whole sequence is the window
        else:
            swa = 0
        op = PrefetchOp(rid, anchor, pages, self.last_hash(anchor), lock, swa, storage_start)
        op.swa_trailing = swa
        op.pool_transfers_done = swa == 0
        op.progress = PrefetchProgress(requested_tokens=length, page_size=p)
        self.ongoing_prefetch[rid] = op
        self.prefetch_queue.append(op)
        self.prefetch_tokens_occupied += length

    # ------------------------------------------------------------------ storage threads
    def pump(self) -> None:
        """The four storage threads' loop bodies on everything queued (the oracle's
        ``StorageSync.pump``): hit queries, page reads, ack sync, page writes."""
        while self.prefetch_queue:  # cc.prefetch_thread_func
            op = self.prefetch_queue.pop(0)
            hit = 0 if op.terminated else self._hit_query(op)
            op.hashes = op.hashes[: hit // self.page_size]
            op.hit_tokens = hit
            self.prefetch_hit_queue.append(op)
        while self.prefetch_buffer:  # cc.prefetch_io_aux_func
            op = self.prefetch_buffer.pop(0)
            self._page_transfer(op)
            self.ack_prefetch_queue.append(_Ack(op, completed_req=True))
        while self.backup_queue:  # hcc.backup_thread_func
            op_id = self.backup_queue.pop(0)
            b = self.ongoing_backup[op_id]
            for h in b.swa_keys:  # batch_set_v2 of the SWA pool, then the KV pages
                self.store.set(SWA, h)
            for h in b.hashes:
                if not self.store.set(KV, h):
                    break
            self.ack_backup_queue.append(op_id)

    def _hit_query(self, op: PrefetchOp) -> int:
        """``hcc._storage_hit_query`` + ``_sync_prefetch_hit_query``: stored tokens of the key."""
        op.hashes = page_hash_chain(op.pages, op.last_hash)
        return self.store.hit_pages(op.hashes, op.swa_keys) * self.page_size

    def _page_transfer(self, op: PrefetchOp) -> None:
        """``cc._page_transfer`` then ``hcc._page_transfer_sidecar``: FULL pages until the first
        miss (nothing once terminated); the SWA window's trailing pages only after every FULL
        page landed (``_sync_trailing_keys`` shrinks the staging to the hit)."""
        p = self.page_size
        done = 0 if op.terminated else self.store.read_run(KV, op.hashes)
        self.ack_prefetch_queue.append(_Ack(op, completed_tokens=done * p))
        if op.swa_keys == 0:
            return
        hits = 0
        if not op.terminated and done == len(op.hashes):
            keys = op.hashes[max(0, done - op.swa_keys) : done]
            op.swa_trailing = len(keys)
            needed = len(keys) * p
            self._shrink_swa_staging(op, needed)
            hits = self.store.read_run(SWA, keys)
        self.ack_prefetch_queue.append(_Ack(op, swa_hits=hits))

    # ------------------------------------------------------------------ scheduler drains
    def sample(self) -> tuple[int, int, int, int, int]:
        """The queue sizes ``_sync_hicache_ready_counts`` reads before the write / load checks;
        the drain consumes exactly these."""
        return (
            len(self.prefetch_hit_queue),
            len(self.ack_prefetch_queue),
            len(self.ack_backup_queue),
            len(self.release_full),
            len(self.release_swa),
        )

    def drain(self, sizes: tuple[int, int, int, int, int]) -> None:
        """``urc._drain_storage_control_queues_impl``: hits (allocate), prefetch acks, backup
        acks, then the sampled releases."""
        n_hit, n_ack, n_backup, n_rel, n_rel_swa = sizes
        for op in self._take(self.prefetch_hit_queue, n_hit):
            self._drain_hit(op)
        for ack in self._take(self.ack_prefetch_queue, n_ack):
            self._drain_ack(ack)
        for op_id in self._take(self.ack_backup_queue, n_backup):
            b = self.ongoing_backup.pop(op_id)
            self.tree.host_unlock(b.lock)
            self.counts["storage_backup_acks"] += 1
        ids = self._take(self.release_full_ids, n_rel)
        for n, pages in zip(self._take(self.release_full, n_rel), ids, strict=True):
            self.tree.host_full.release(n, pages)
        ids = self._take(self.release_swa_ids, n_rel_swa)
        for n, pages in zip(self._take(self.release_swa, n_rel_swa), ids, strict=True):
            self.tree.host_swa.release(n, pages)

    def _release_full(self, tokens: int, ids: np.ndarray | None) -> None:
        """Queue FULL host slots for release (``append_host_mem_release``)."""
        self.release_full.append(tokens)
        self.release_full_ids.append(ids)

    def _release_swa(self, tokens: int, ids: np.ndarray | None) -> None:
        """Queue SWA host slots for release (``extra_host_mem_release_queues``)."""
        self.release_swa.append(tokens)
        self.release_swa_ids.append(ids)

    def _shrink_swa_staging(self, op: PrefetchOp, needed: int) -> None:
        """``_sync_trailing_keys`` shrinks the SWA staging to ``needed`` tokens."""
        if op.swa_host_tokens > needed:
            k = needed // self.page_size
            self._release_swa(op.swa_host_tokens - needed, _cut(op.swa_ids, k, None))
            op.swa_ids = _cut(op.swa_ids, 0, k)
            op.swa_host_tokens = needed

    @staticmethod
    def _take(queue: list, n: int) -> list:
        out = queue[:n]
        del queue[:n]
        return out

    def _drain_hit(self, op: PrefetchOp) -> None:
        """``_drain_and_alloc_storage_hit`` -> ``_try_alloc_storage_hit`` (cache mode)."""
        if self.ongoing_prefetch.get(op.rid) is not op:
            return
        if op.terminated or op.hit_tokens < self.prefetch_threshold:
            self.revoke(op)
            return
        tree, p = self.tree, self.page_size
        hit = op.hit_tokens
        # hcc.allocate_storage_hit: the whole hit, host eviction once, else what fits
        full, swa_pool = tree.host_full, tree.host_swa
        alloc = hit if (ids := full.alloc(hit, kind=_PREFETCH)) is not None else None
        if alloc is None:
            tree.evict_host(hit, "full")
            if (ids := full.alloc(hit, kind=_PREFETCH)) is not None:
                alloc = hit
            else:
                avail = full.available_size()
                part = min(hit, avail - avail % p)
                if part >= self.prefetch_threshold and (ids := full.alloc(part, kind=_PREFETCH)) is not None:
                    alloc = part
        if alloc is None:
            self.revoke(op)
            return
        op.full_ids = ids if len(ids) else None
        swa = min(op.swa_keys, hit // p) * p  # _alloc_prefetch_aux_staging
        if swa:
            if (sids := swa_pool.alloc(swa, kind=_PREFETCH)) is None:  # swa.py:alloc_prefetch_staging
                tree.evict_host(swa, "swa")
                if (sids := swa_pool.alloc(swa, kind=_PREFETCH)) is None:
                    self._release_full(alloc, op.full_ids)
                    op.full_ids = None
                    self.revoke(op)
                    return
            op.swa_ids = sids if len(sids) else None
        op.swa_host_tokens = swa
        op.full_held = alloc
        self.holding.add(op)
        op.hit_tokens = alloc
        op.hashes = op.hashes[: alloc // p]
        op.host_tokens = alloc
        op.progress.hit_tokens = alloc
        self.prefetch_buffer.append(op)

    def _drain_ack(self, ack: _Ack) -> None:
        """``_drain_ack_prefetch``: progress, SWA hits, completion (insert, release the tail)."""
        op = ack.op
        current = self.ongoing_prefetch.get(op.rid) is op
        if ack.completed_tokens is not None and current:
            op.completed_tokens = ack.completed_tokens
            op.progress.completed_tokens = ack.completed_tokens
        if ack.swa_hits is not None and current:
            op.swa_hits = ack.swa_hits
            op.pool_transfers_done = True
        if ack.completed_req:
            if current:
                self._handle_prefetch_result(op)
            tail = (op.host_tokens or 0) - op.completed_tokens
            if tail > 0:
                k = op.completed_tokens // self.page_size
                self._release_full(tail, _cut(op.full_ids, k, None))
                op.full_ids = _cut(op.full_ids, 0, k)
                op.full_held -= tail
            if not op.pool_transfers_done and op.swa_host_tokens:
                self._release_swa(op.swa_host_tokens, op.swa_ids)
                op.swa_ids = None
                op.swa_host_tokens = 0
            if op.full_held == 0 and op.swa_host_tokens == 0:
                self.holding.discard(op)

    def revoke(self, op: PrefetchOp) -> None:
        """``revoke_pending_prefetch`` -> ``_retire_ongoing_prefetch`` before any slot is held."""
        self._retire(op, 0, release_swa=False)

    def _retire(self, op: PrefetchOp, full_tokens: int, release_swa: bool) -> None:
        """``_retire_ongoing_prefetch``: unlock the anchor, queue the slots' release, free the
        occupancy."""
        self.ongoing_prefetch.pop(op.rid, None)
        self.tree.host_unlock(op.anchor_lock)
        if full_tokens:
            self._release_full(full_tokens, _cut(op.full_ids, 0, full_tokens // self.page_size))
            op.full_held -= full_tokens
        if release_swa and op.swa_host_tokens:
            self._release_swa(op.swa_host_tokens, op.swa_ids)
            op.swa_ids = None
            op.swa_host_tokens = 0
        self.prefetch_tokens_occupied = max(0, self.prefetch_tokens_occupied - len(op.pages) * self.page_size)
        self.loaded_tokens[op.rid] = (0, None)

    # ------------------------------------------------------------------ admission
    def check_prefetch_progress(self, rid: str) -> bool:
        """``urc.check_prefetch_progress``: True when the request may be scheduled (no
        prefetch, finished, or stopped by the termination policy)."""
        op = self.ongoing_prefetch.get(rid)
        if op is None:
            return True
        if not op.terminated:
            if not self._can_terminate(op):
                if op.progress.wait_started_s is None:  # _start_storage_prefetch_wait
                    op.progress.wait_started_s = self.now_s
                return False
            if self.policy.name == "timeout":
                op.deadline_expired = True
        op.terminated = True  # cc.terminate_prefetch
        if op.host_tokens is None:
            self.revoke(op)
        else:
            self._handle_prefetch_result(op)
        return True

    def _can_terminate(self, op: PrefetchOp) -> bool:
        """``urc._can_terminate_prefetch``; ``timeout`` = ``_prefetch_deadline_expired``."""
        progress = op.progress
        if self.policy.name == "timeout" and op.host_tokens is not None and progress.complete:
            return False
        return self.policy.can_terminate(progress, self.now_s)

    def ready(self, rid: str) -> tuple[int, int | None] | None:
        """The storage gate of ``Scheduler.get_new_batch_prefill``: None while the request
        must wait for its prefetch; else the L3-loaded span (tokens, absolute start) the
        request records as ``storage_hit_length`` / ``storage_hit_start``
        (``pop_prefetch_loaded_span``)."""
        if not self.check_prefetch_progress(rid):
            return None
        loaded, start = self.loaded_tokens.pop(rid, (0, None))
        if loaded > 0:
            self.counts["prefetch_done"] += 1
            self.counts["prefetch_tokens"] += loaded
        return loaded, start

    def held_tokens(self) -> tuple[int, int]:
        """(FULL, SWA) host slots the L3 tier holds outside the tree: prefetch staging not
        yet inserted and slots waiting in the release queues."""
        full = sum(op.full_held for op in self.holding) + sum(self.release_full)
        swa = sum(op.swa_host_tokens for op in self.holding) + sum(self.release_swa)
        return full, swa

    def busy(self) -> bool:
        """Storage work queued or unacknowledged."""
        return bool(
            self.prefetch_queue
            or self.prefetch_hit_queue
            or self.prefetch_buffer
            or self.ack_prefetch_queue
            or self.backup_queue
            or self.ack_backup_queue
            or self.release_full
            or self.release_swa
            or self.ongoing_prefetch
        )
