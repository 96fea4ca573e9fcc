"""The L3 storage tier in simulated time: SGLang's storage threads as timed serial servers.

:class:`~simulator.radix.hicache_prefetch_tree.StorageController` (the tier ``kvplan
cache-replay`` proves against SGLang) completes every queued storage operation at the next
step's pump, the oracle's rule. A served run times them instead. SGLang 0.5.23 runs three
storage threads, each working through its queue in order (paths under ``srt/``):

* the hit query (``managers/cache_controller.py`` ``prefetch_thread_func`` ->
  ``_storage_hit_query``): one ``batch_exists`` per ``STORAGE_BATCH_SIZE`` (128) pages until
  the first short batch, each costing the backend's operation latency;
* the page reads (``prefetch_io_aux_func`` -> ``_page_transfer``): one ``batch_get`` per 128
  pages, each ``latency + bytes / read bandwidth``, a progress ack after each batch, and the
  termination check before each batch; then the SWA window's trailing pages in one more call
  (``hybrid_cache_controller.py`` ``_page_transfer_sidecar``) and the completion ack;
* the backups (``hybrid_cache_controller.py`` ``backup_thread_func``): the SWA pages in one
  ``batch_set_v2`` then the FULL pages per 128, each ``latency + bytes / write bandwidth``.

The time of each call is ``mem_cache/storage/sim_storage.py`` ``SimHiCacheStorage._sleep_io``.
A thread's result is visible from the first scheduler step that starts at or after its
completion: the pump (run by ``check_hicache_events`` at the step start) moves it to the
scheduler's queues, which the same call's drain consumes. Termination by the admission poll
(``check_prefetch_progress``) stops the reads of batches that start at or after it.

Approximations: a backup's pages become visible to hit queries when the whole backup completes
(SGLang: batch by batch); a hit query's duration is fixed when the query starts.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from policies.hicache_prefetch import gate_prefetch, make_prefetch_policy
from simulator.radix.hicache_prefetch_tree import PrefetchOp, StorageController, _Ack
from simulator.radix.hicache_storage import KV, SWA, PageStore, StorageParams, page_hash_chain

STORAGE_BATCH_SIZE = 128  # mem_cache/hicache_storage.py

OUTCOMES = ("complete", "partial", "timed_out", "revoked")


@dataclass(slots=True)
class StorageIO:
    """One storage operation: ``h2l3`` (a backup) or ``l32h`` (a prefetch's page reads), its
    times (simulated seconds) and pages per pool."""

    direction: str
    submit_s: float
    start_s: float
    done_s: float
    kv_pages: int
    swa_pages: int
    ack_s: float = math.nan


@dataclass(slots=True)
class PrefetchRecord:
    """One issued prefetch, from its issue at queue entry to its end (the ``outcome``)."""

    rid: str
    issue_s: float
    requested_tokens: int
    hit_tokens: int | None = None  # the L3 hit (None: the query never ran)
    host_tokens: int = 0  # host slots allocated for the hit
    completed_tokens: int = 0  # landed in host memory when it ended
    loaded_tokens: int = 0  # new host tokens inserted into the tree
    wait_start_s: float = math.nan  # the first admission poll that had to wait
    end_s: float = math.nan
    released_s: float = math.nan  # the admission poll that let the request go
    outcome: str | None = None


class TimedStorageController(StorageController):
    """:class:`StorageController` whose storage threads take simulated time (module doc).

    ``now_s`` is the engine's clock; :meth:`stamp` dates the work queued since the last call,
    :meth:`pump` completes what is due by ``now_s``."""

    def __init__(self, tree, store, policy, threshold: int) -> None:
        super().__init__(tree, store, policy, threshold)
        self._queued_at: dict[object, float] = {}  # queue item -> when it was queued
        self._done_at: dict[object, float] = {}  # queue-head item -> its completion time
        self._free = {"query": 0.0, "backup": 0.0}
        self._io: Iterator[float] | None = None  # the page reads in progress
        self._io_wait = math.inf  # when the reads in progress next complete a call
        self._io_free = 0.0
        self._records: dict[PrefetchOp, PrefetchRecord] = {}
        self._by_rid: dict[str, PrefetchRecord] = {}
        self.prefetches: list[PrefetchRecord] = []
        self.io: list[StorageIO] = []
        self.declined: dict[str, int] = {}

    # ------------------------------------------------------------------ timing
    def _call_s(self, nbytes: int, gbps: float) -> float:
        """``SimHiCacheStorage._sleep_io``: latency + bytes / bandwidth (<= 0: infinite)."""
        p = self.store.params
        return p.op_latency_s + (nbytes / (gbps * 1e9) if gbps > 0 else 0.0)

    def _kv_calls_s(self, pages: int, gbps: float) -> float:
        """FULL pages in calls of at most 128 pages."""
        kv = self.store.params.kv_page_bytes
        full, rest = divmod(pages, STORAGE_BATCH_SIZE)
        t = full * self._call_s(STORAGE_BATCH_SIZE * kv, gbps)
        return t + (self._call_s(rest * kv, gbps) if rest else 0.0)

    def _query_s(self, op: PrefetchOp) -> float:
        """The hit query's ``batch_exists`` calls: up to the first short batch."""
        if not op.hashes:
            op.hashes = page_hash_chain(op.pages, op.last_hash)
        n = len(op.hashes)
        hit = 0
        for h in op.hashes:
            if not self.store.exists(KV, h):
                break
            hit += 1
        calls = min(-(-n // STORAGE_BATCH_SIZE), hit // STORAGE_BATCH_SIZE + 1)
        return calls * self._call_s(0, self.store.params.read_gbps)

    def _backup_s(self, op_id: int) -> float:
        b = self.ongoing_backup[op_id]
        p = self.store.params
        t = self._call_s(len(b.swa_keys) * p.swa_page_bytes, p.write_gbps) if b.swa_keys else 0.0
        return t + self._kv_calls_s(len(b.hashes), p.write_gbps)

    def stamp(self, now: float) -> None:
        """Date the storage work queued since the last call (its threads pick it up at ``now``)."""
        for queue in (self.prefetch_queue, self.prefetch_buffer, self.backup_queue):
            for item in reversed(queue):  # the undated items are the queue's tail
                if item in self._queued_at:
                    break
                self._queued_at[item] = now
        self._start_io()

    def _head_done(self, queue: list, thread: str) -> float:
        """Completion time of the head of a query / backup queue (inf: none dated)."""
        if not queue or queue[0] not in self._queued_at:
            return math.inf
        item = queue[0]
        done = self._done_at.get(item)
        if done is None:
            start = max(self._queued_at[item], self._free[thread])
            if thread == "query":
                dur = 0.0 if self._stopped(item, start) else self._query_s(item)
            else:
                dur = self._backup_s(item)
            done = self._done_at[item] = start + dur
        return done

    def next_event(self) -> float:
        """The next time a storage thread completes something, a ``timeout`` deadline passes
        (an admission poll strictly after it terminates the prefetch) or queued host-slot
        releases wait for the next event check."""
        t = min(
            self._head_done(self.prefetch_queue, "query"),
            self._head_done(self.backup_queue, "backup"),
            self._io_wait,
        )
        if self.release_full or self.release_swa:
            # host slots queued for release by the last drain are freed by the next one
            # (``_drain_storage_control_queues_impl`` releases what it sampled first): due now
            t = min(t, self.now_s)
        for op in self.ongoing_prefetch.values():
            if not op.terminated:
                d = self.policy.deadline_s(op.progress)
                # a deadline already passed waits for the request's next poll, not a wake-up
                if d is not None and d >= self.now_s:
                    t = min(t, math.nextafter(d, math.inf))
        return t

    # ------------------------------------------------------------------ the threads
    def pump(self) -> None:
        """The storage threads' work completed by ``now_s`` (replaces the replay's pump)."""
        now = self.now_s
        self.stamp(now)
        while self._head_done(self.prefetch_queue, "query") <= now:  # prefetch_thread_func
            op = self.prefetch_queue.pop(0)
            done = self._done_at.pop(op)
            start = max(self._queued_at.pop(op), self._free["query"])
            self._free["query"] = done
            hit = (
                0
                if self._stopped(op, start)
                else self.store.hit_pages(op.hashes, op.swa_keys) * self.page_size
            )
            op.hashes = op.hashes[: hit // self.page_size]
            op.hit_tokens = hit
            rec = self._records.get(op)
            if rec is not None:
                rec.hit_tokens = hit
            self.prefetch_hit_queue.append(op)
        while self._io is not None and self._io_wait <= now:  # prefetch_io_aux_func
            self._io_wait = next(self._io, math.inf)
            if self._io_wait == math.inf:
                self._io = None
                self._start_io()
        while self._head_done(self.backup_queue, "backup") <= now:  # backup_thread_func
            op_id = self.backup_queue.pop(0)
            done = self._done_at.pop(op_id)
            at = self._queued_at.pop(op_id)
            start = max(at, self._free["backup"])
            self._free["backup"] = done
            b = self.ongoing_backup[op_id]
            for h in b.swa_keys:  # batch_set_v2 of the SWA pool, then the KV pages
                self.store.set(SWA, h)
            for h in b.hashes:
                if not self.store.set(KV, h):
                    break
            self.io.append(StorageIO("h2l3", at, start, done, len(b.hashes), len(b.swa_keys), now))
            self.ack_backup_queue.append(op_id)

    def _start_io(self) -> None:
        """The I/O thread takes the next dated op of ``prefetch_buffer`` when it is idle."""
        while self._io is None and self.prefetch_buffer and self.prefetch_buffer[0] in self._queued_at:
            op = self.prefetch_buffer.pop(0)
            at = self._queued_at.pop(op)
            self._io = self._transfer(op, at, max(at, self._io_free))
            self._io_wait = next(self._io, math.inf)
            if self._io_wait == math.inf:
                self._io = None

    def _transfer(self, op: PrefetchOp, at: float, start: float) -> Iterator[float]:
        """``_page_transfer`` + ``_page_transfer_sidecar`` + the completion ack, as a generator
        that yields the completion time of each storage call before applying it."""
        p, params = self.page_size, self.store.params
        t, done, ok = start, 0, True
        for i in range(0, len(op.hashes), STORAGE_BATCH_SIZE):
            if ok and self._stopped(op, t):
                ok = False
            if ok:
                batch = op.hashes[i : i + STORAGE_BATCH_SIZE]
                t += self._call_s(len(batch) * params.kv_page_bytes, params.read_gbps)
                yield t
                got = self.store.read_run(KV, batch)
                ok = got == len(batch)
                done += got
            self.ack_prefetch_queue.append(_Ack(op, completed_tokens=done * p))
        swa = 0
        if op.swa_keys:
            hits = 0
            if ok and done == len(op.hashes) and not self._stopped(op, t):
                keys = op.hashes[max(0, done - op.swa_keys) : done]
                op.swa_trailing = len(keys)
                needed = len(keys) * p
                self._shrink_swa_staging(op, needed)
                t += self._call_s(len(keys) * params.swa_page_bytes, params.read_gbps)
                yield t
                hits = swa = self.store.read_run(SWA, keys)
            self.ack_prefetch_queue.append(_Ack(op, swa_hits=hits))
        self.ack_prefetch_queue.append(_Ack(op, completed_req=True))
        self._io_free = t
        self.io.append(StorageIO("l32h", at, start, t, done, swa, self.now_s))

    def _stopped(self, op: PrefetchOp, t: float) -> bool:
        """Terminated by an admission poll at or before ``t`` (``operation.is_terminated``)."""
        return op.terminated and op.terminated_s <= t

    def busy(self) -> bool:
        return self._io is not None or super().busy()

    # ------------------------------------------------------------------ outcomes
    def issue(self, cache, req) -> None:
        """``Scheduler._prefetch_kvcache`` at queue entry, with the gate's verdict counted."""
        before = self.ongoing_prefetch.get(req.rid)
        self.arrive(cache, req)
        op = self.ongoing_prefetch.get(req.rid)
        if op is not None and op is not before:
            rec = PrefetchRecord(req.rid, self.now_s, len(op.pages) * self.page_size)
            self._records[op] = self._by_rid[req.rid] = rec
            self.prefetches.append(rec)
            return
        anchor = req.best_match_node
        matched = req.prefix_len + req.host_hit_length
        verdict = gate_prefetch(
            max(0, req.prompt_len + req.num_outputs - 1 - matched),
            page_size=self.page_size,
            threshold=self.prefetch_threshold,
            occupied_tokens=self.prefetch_tokens_occupied,
            host_pool_tokens=self.tree.host_full.capacity,
            anchor_backed_up=anchor.full_host or anchor is self.tree.root,
        )
        self.declined[verdict.value] = self.declined.get(verdict.value, 0) + 1

    def _end(self, op: PrefetchOp, outcome: str) -> None:
        rec = self._records.pop(op, None)
        if rec is None:
            return
        rec.outcome = "timed_out" if op.deadline_expired else outcome
        rec.host_tokens = op.host_tokens or 0
        rec.completed_tokens = op.completed_tokens
        rec.end_s = self.now_s
        if op.progress.wait_started_s is not None:
            rec.wait_start_s = op.progress.wait_started_s

    def revoke(self, op: PrefetchOp) -> None:
        super().revoke(op)
        self._end(op, "revoked")

    def _handle_prefetch_result(self, op: PrefetchOp) -> None:
        super()._handle_prefetch_result(op)
        full = op.host_tokens is not None and op.completed_tokens >= op.host_tokens > 0
        full = full and (not op.swa_keys or op.swa_hits == op.swa_trailing)
        rec = self._records.get(op)
        if rec is not None:
            rec.loaded_tokens = self.loaded_tokens.get(op.rid, (0, None))[0]
        self._end(op, "complete" if full else "partial")

    def check_prefetch_progress(self, rid: str) -> bool:
        op = self.ongoing_prefetch.get(rid)
        was = op is not None and op.terminated
        ok = super().check_prefetch_progress(rid)
        if op is not None and op.terminated and not was:
            op.terminated_s = self.now_s
        if ok:
            rec = self._by_rid.pop(rid, None)
            if rec is not None:
                rec.released_s = self.now_s
        return ok


def attach_timed_storage(setup: Any, cache: Any) -> TimedStorageController:
    """The page store of ``--hicache-storage-backend`` (bytes per page from the rank's pool
    geometry) and the timed controller over the served cache's HiCache tree (``setup``: the
    engine's ``HiCacheSetup``)."""
    tree = cache.tree
    r, geo, p = setup.resolved, setup.geometry, tree.page_size
    tier = r.storage
    params = StorageParams(
        backend=tier.backend,
        capacity_bytes=tier.capacity_bytes,
        read_gbps=tier.read_gbps,
        write_gbps=tier.write_gbps,
        op_latency_s=tier.op_latency_s,
        kv_page_bytes=geo.full.bytes_per_token * p,
        swa_page_bytes=(geo.swa.bytes_per_token if geo.swa is not None else 0) * p,
    )
    policy = make_prefetch_policy(
        r.prefetch_policy,
        timeout_base_s=r.prefetch_timeout_base,
        per_ki_token_s=r.prefetch_timeout_per_ki_token,
    )
    storage = TimedStorageController(tree, PageStore(params), policy, r.prefetch_threshold)
    tree.storage = storage
    return storage
