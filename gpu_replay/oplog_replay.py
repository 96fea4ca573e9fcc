"""Execute an op log (``kvplan run --record-ops``) on SGLang-shaped pools, step by step, and time
each step's memory operations (CUDA events on a GPU, the wall clock on CPU).

What each record does to memory here:
- ``ALLOC``: the pages it got, in both pools, are written in every replayed layer, K and V (what
  the forward's ``set_kv_buffer`` stores, as whole pages: an upper bound on a decode step's
  one-token writes), each with its allocation's tag (:mod:`gpu_replay.replay_pools`);
- frees (``FREE``, ``FREE_FULL``, ``FREE_SWA``, ``SWA_WINDOW_FREE``, ``EVICT``, ``TOMBSTONE``),
  ``REMAP_SWA`` and the free-group brackets move page ids only (no data; SGLang's allocator
  does not touch the buffers either);
- with ``write_back``: before a tree eviction (``EVICT`` with reason ``evict``) releases its
  pages, their data (FULL, and SWA where the leaf still has it) is backed up to the host pool
  with the chosen transfer kernel, as HiCache's ``write_back`` policy does
  (``hiradix_cache.py::HiRadixCache.evict`` -> ``write_backup(node, write_back=True)``);
- HiCache records (``BACKUP_D2H``, ``LOAD_H2D``, ``DEMOTE``, ``HOST_FREE``,
  ``STORAGE_PREFETCH``) of a log with host pools (``header.hicache.host_pages``): page ids on
  the device and host pools, and the data really copied between them
  (:mod:`gpu_replay.replay_hicache`); freed device pages are then poisoned, so a load that
  brought nothing back is caught. In a log without host pools they are counted as not
  replayed.

Page ids change only through the simulator's own executor (:class:`MemoryOpExecutor`), so the
replay reaches the same pool state as ``simulator.oplog.replay_ops``; beside it the replay keeps
its own account of live pages from the records, and a check compares the two and reads every
live page back against its tag (and, after an SWA remap, the SWA page a FULL page maps to
against the allocation that wrote it).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from gpu_replay.replay_hicache import HiCacheData
from gpu_replay.replay_pools import ReplayPool, pool_geometries
from gpu_replay.replay_timer import StepTimer
from simulator.errors import KvplanError
from simulator.memory_ops import (
    EVICTION,
    FREES_FULL,
    FREES_SWA,
    HICACHE_KINDS,
    MemoryOp,
    MemoryOpExecutor,
    OpKind,
)
from simulator.oplog import OpLog, fresh_executor

__all__ = ["OpLogReplay", "ReplayCheckError", "ReplayOptions", "StepRow"]

VERIFY = ("every", "end", "none")


class ReplayCheckError(KvplanError):
    """The replayed pools disagree with the op log (page state or page data)."""


@dataclass(frozen=True)
class ReplayOptions:
    """How to replay: where, which transfer kernel for write-back, how much to check."""

    device: str = "cpu"
    io_backend: str = "kernel"
    impl: str = "reference"
    layout: str = "layer_first"
    layers: int | None = None  # replay the first N layers of each pool (None: all)
    verify: str = "end"
    check_every: int = 1  # with verify="every": check every N-th step that changed pages
    write_back: bool = False
    host_pages: int | None = None  # host pool pages per pool (default: as many as the device's)
    sync_every: int = 256  # steps between harvests of CUDA event times
    # synchronize before each timed write-back call, so every call starts on an idle GPU and its
    # time covers its own issue and execution only (not queueing behind earlier work)
    isolate_calls: bool = False
    # HiCache logs: overwrite freed device pages with a poison tag (a load that copies nothing
    # then fails the check)
    poison: bool = True


@dataclass
class StepRow:
    """One step of the per-step table."""

    step: int
    sim_start_s: float = 0.0
    sim_duration_s: float = 0.0
    records: int = 0
    groups: int = 0  # free-group brackets among the records
    alloc_full_pages: int = 0
    alloc_swa_pages: int = 0
    freed_full_pages: int = 0
    freed_swa_pages: int = 0
    written_bytes: int = 0
    write_calls: int = 0  # indexed page stores issued (one per pool per ALLOC record)
    backup_pages: int = 0
    backup_bytes: int = 0
    backup_calls: int = 0  # transfer calls issued (one per pool per evicted leaf)
    # per backup call, in issue order: its pages and its seconds (the transfer model's fit data)
    backup_call_pages: list[int] = field(default_factory=list)
    backup_call_s: list[float] = field(default_factory=list)
    load_pages: int = 0  # HiCache load-back (H->D) pages, bytes and transfer calls
    load_bytes: int = 0
    load_calls: int = 0
    not_replayed: int = 0
    write_s: float = 0.0
    backup_s: float = 0.0
    load_s: float = 0.0
    issue_s: float = 0.0

    @property
    def mem_s(self) -> float:
        return self.write_s + self.backup_s + self.load_s


@dataclass
class _Live:
    """The replay's own account of live pages and of which allocation each SWA peer holds."""

    full: np.ndarray
    swa: np.ndarray
    swa_serial_of_full: np.ndarray  # per FULL page: serial of its SWA peer's data (0: none)


@dataclass
class OpLogReplay:
    """Replays one :class:`OpLog`; :meth:`run` returns the per-step rows."""

    log: OpLog
    options: ReplayOptions
    pools: dict[str, ReplayPool] = field(init=False)
    ex: MemoryOpExecutor = field(init=False)
    checks: int = 0
    replayed: Counter = field(default_factory=Counter)
    not_replayed: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        h, o = self.log.header, self.options
        if h.get("geometry") is None:
            raise KvplanError("op log has no geometry in its header; record it with kvplan run --record-ops")
        if o.verify not in VERIFY:
            raise KvplanError(f"verify must be one of {VERIFY}, not {o.verify!r}")
        if not str(o.device).startswith("cuda"):
            # small indexed stores: torch's CPU thread pool only adds contention (and noise)
            torch.set_num_threads(1)
        self.ex = fresh_executor(h)
        hicache_pages = (h.get("hicache") or {}).get("host_pages")
        if hicache_pages and o.write_back:
            raise KvplanError("a HiCache op log replays its own backups; --write-back is for logs without")
        host_pages = max(hicache_pages) if hicache_pages else None
        host_pages = host_pages or o.host_pages or max(h["full_pages"], h["swa_pages"]) + 1
        layout = o.layout if o.write_back or hicache_pages else None
        stacked = o.impl in ("pitched", "cxx_pitched")
        self.pools = {
            g.name: ReplayPool.build(g, o.device, host_layout=layout, stacked=stacked)
            for g in pool_geometries(h, o.layers, host_pages)
        }
        self._movers = self._make_movers() if o.write_back else {}
        self.hicache = HiCacheData(self, o.poison) if hicache_pages else None
        self._host_next = dict.fromkeys(self.pools, 1)
        self._serial = 0
        n_full, n_swa = h["full_pages"] + 1, h["swa_pages"] + 1
        self.live = _Live(np.zeros(n_full, bool), np.zeros(n_swa, bool), np.zeros(n_full, np.int64))
        self.timer = StepTimer(o.device)

    def _make_movers(self) -> dict:
        from gpu_replay.transfer import KVTransfer

        o = self.options
        return {name: KVTransfer(p.host, p.dev, o.io_backend, o.impl) for name, p in self.pools.items()}

    # ---- the run ---------------------------------------------------------------------------
    def run(self, on_step: Callable[[int], None] | None = None) -> list[StepRow]:
        """Replay every record; one row per step (steps without records included).
        ``on_step(step)`` is called after each step's records (tests compare pool states)."""
        rows: dict[int, StepRow] = {s.step: StepRow(s.step, s.start_s, s.duration_s) for s in self.log.steps}
        ops = self.log.ops
        i, since_sync, changed = 0, 0, 0
        while i < len(ops):
            step = ops[i].step
            row = rows.setdefault(step, StepRow(step))
            t0 = time.perf_counter()
            while i < len(ops) and ops[i].step == step:
                self._apply(ops[i], row)
                i += 1
            row.issue_s = time.perf_counter() - t0
            since_sync += 1
            if on_step is not None:
                on_step(step)
            if self.options.verify == "every" and row.records > row.groups:
                changed += 1
                if changed % self.options.check_every == 0:
                    self.check(step)
            if since_sync >= self.options.sync_every:
                self.timer.harvest()
                since_sync = 0
        self.timer.harvest()
        if self.options.verify != "none":
            self.check(ops[-1].step if ops else -1)
        return [rows[k] for k in sorted(rows)]

    def _apply(self, op: MemoryOp, row: StepRow) -> None:
        row.records += 1
        row.groups += op.kind in (OpKind.GROUP_BEGIN, OpKind.GROUP_END)
        if op.kind in HICACHE_KINDS and self.hicache is not None:
            got = self.ex.apply(op)
            self.replayed[op.kind.name] += 1
            self.hicache.apply(got, row)
            self._account(got, row)
            self.hicache.poison_freed(got)
            return
        if op.kind in HICACHE_KINDS:
            self.not_replayed[op.kind.name] += 1
            row.not_replayed += 1
            # HiCache records move host pages; the replay has no host page state yet, and they
            # change no device page id, so they are counted and skipped.
            return
        if op.kind == OpKind.EVICT and self._movers and op.reason == EVICTION:
            self._write_back(op, row)
        got = self.ex.apply(op)
        self.replayed[op.kind.name] += 1
        self._account(got, row)
        if self.hicache is not None:
            self.hicache.poison_freed(got)

    def _account(self, got: MemoryOp, row: StepRow) -> None:
        live, k = self.live, got.kind
        if k == OpKind.ALLOC:
            n = len(got.full)
            serials = np.arange(self._serial + 1, self._serial + 1 + n, dtype=np.int64)
            self._serial += n
            live.full[got.full] = True
            live.swa[got.swa] = True
            live.swa_serial_of_full[got.full] = serials
            row.alloc_full_pages += n
            row.alloc_swa_pages += len(got.swa)
            for name, pages in (("full", got.full), ("swa", got.swa)):
                if name in self.pools and len(pages):
                    pool = self.pools[name]
                    prepared = pool.prepare_write(pages, serials)
                    with self.timer.span(row, "write_s"):
                        pool.store(prepared)
                    row.written_bytes += len(pages) * pool.bytes_per_page
                    row.write_calls += 1
        elif k == OpKind.REMAP_SWA:
            live.swa_serial_of_full[got.full] = live.swa_serial_of_full[got.src]
            live.swa_serial_of_full[got.src] = 0
        if k in FREES_FULL:
            live.full[got.full] = False
            row.freed_full_pages += len(got.full)
        if k in FREES_SWA:
            live.swa[got.swa] = False
            row.freed_swa_pages += len(got.swa)
            if len(got.swa):
                live.swa_serial_of_full[got.full] = 0

    def _write_back(self, op: MemoryOp, row: StepRow) -> None:
        """Back the evicted pages up to the host pool (all replayed layers) before they go."""
        peers = self.ex.pages.full_to_swa[op.full]
        for name, pages in (("full", op.full), ("swa", peers[peers > 0])):
            if name not in self.pools or not len(pages):
                continue
            pool = self.pools[name]
            host = self._host_pages(name, len(pages))
            mover = self._movers[name]
            page = pool.geo.page_size
            idx_dev = pool.dev.k[0].device if self.options.io_backend == "kernel" else "cpu"
            hi = (torch.from_numpy(host)[:, None] * page + torch.arange(page)).flatten().to(idx_dev)
            di = (torch.from_numpy(pages)[:, None] * page + torch.arange(page)).flatten().to(idx_dev)
            if self.options.isolate_calls and self.timer.cuda:
                torch.cuda.synchronize()
            with self.timer.span(row, "backup_s", each="backup_call_s"):
                mover.transfer(hi, di, tuple(range(pool.geo.layer_num)), "d2h")
            row.backup_call_pages.append(len(pages))
            pool.host_serial[host] = pool.serial[pages]
            row.backup_pages += len(pages)
            row.backup_bytes += len(pages) * pool.bytes_per_page
            row.backup_calls += 1

    def _host_pages(self, name: str, n: int) -> np.ndarray:
        """``n`` host pages, handed out round-robin (1..host_pages-1): the replay measures the
        transfer, not HiCache's host eviction order."""
        total = self.pools[name].geo.host_pages - 1
        if n > total:
            raise KvplanError(f"write-back of {n} pages does not fit the host pool ({total} pages)")
        start = self._host_next[name]
        pages = (np.arange(start - 1, start - 1 + n) % total) + 1
        self._host_next[name] = int(pages[-1]) % total + 1
        return pages.astype(np.int64)

    # ---- checks ----------------------------------------------------------------------------
    def check(self, step: int) -> None:
        """Compare the replay's live pages with the allocator's free lists, then read every live
        page (and every backed-up host page) back against its tag."""
        self.checks += 1
        s, live = self.ex.pages, self.live
        if s._swa_group is None and s.full.group is None:
            for name, free, alive in (
                ("FULL", s.full.all_free(), live.full),
                ("SWA", s.swa.all_free(), live.swa),
            ):
                expect = np.flatnonzero(~alive[1:]) + 1
                if len(free) != len(expect) or not np.array_equal(np.sort(free), expect):
                    raise ReplayCheckError(
                        f"step {step}: {name} free pages ({len(free)}) differ from the pages the "
                        f"records left unallocated ({len(expect)})"
                    )
        mapped = np.flatnonzero(live.swa_serial_of_full)
        if "swa" in self.pools and len(mapped):
            peers = s.full_to_swa[mapped]
            wrong = mapped[self.pools["swa"].serial[peers] != live.swa_serial_of_full[mapped]]
            if len(wrong):
                raise ReplayCheckError(
                    f"step {step}: FULL pages {wrong[:8].tolist()} map to SWA data of another allocation"
                )
        for name, alive in (("full", live.full), ("swa", live.swa)):
            if name not in self.pools:
                continue
            pool = self.pools[name]
            bad = pool.bad_pages(np.flatnonzero(alive))
            if len(bad):
                raise ReplayCheckError(f"step {step}: live {name} pages {bad[:8].tolist()} lost their data")
            bad = pool.bad_host_pages(np.flatnonzero(pool.host_serial))
            if len(bad):
                raise ReplayCheckError(f"step {step}: backed-up {name} host pages {bad[:8].tolist()} differ")

    def release(self) -> None:
        for p in self.pools.values():
            p.release()
