"""Memory operations as records: what the tree, the controller and the SWA-eviction policies
decided, as data that one executor applies to the allocator's page ids.

SGLang 0.5.23 has the same split in ``mem_cache/unified_cache/cache_action.py`` (frozen action
records) and ``UnifiedRadixCache._apply_cache_actions`` (their executor). Here a record is one
allocator call on an array of full page ids; SWA pages are resolved through the full-to-SWA
mapping when the record is applied and kept on it, so a GPU replay can scatter both pools.

Recording is opt-in (:meth:`SWAKVAllocator.start_recording`); with it off nothing here runs.
Records are cheap: one per decision (arrays of pages), never one per page; a decode jump emits
one allocation record whose pages carry their step in ``page_steps``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from simulator.kv_pages import HostPageState, SWAPageState

_EMPTY = np.empty(0, dtype=np.int64)
EVICTION = "evict"  # the reason of records the tree emits on its own (eviction)


class OpKind(IntEnum):
    """The record vocabulary (stored as these integers in the op log)."""

    ALLOC = 0  # new pages in both pools (alloc_extend / alloc_decode): full ids, their SWA peers
    FREE = 1  # free_segment: a request's private slots, SWA peers then FULL
    FREE_FULL = 2  # free_full_segment: FULL pages whose SWA peers are gone (dead window, dups)
    FREE_SWA = 3  # free_swa_segment: SWA peers of FULL pages that stay
    SWA_WINDOW_FREE = 4  # a decoding/chunked request frees its out-of-window SWA (FREE_SWA)
    EVICT = 5  # the tree deletes a leaf: FULL, and SWA where the leaf still has it
    TOMBSTONE = 6  # the tree drops an internal node's SWA (FREE_SWA)
    REMAP_SWA = 7  # RebuildFullToSWAMapping: ``full`` takes over the SWA peers of ``src``
    GROUP_BEGIN = 8  # free_group_begin
    GROUP_END = 9  # free_group_end
    # HiCache (``host``: host page ids; ``bound``: host pool, 0 FULL / 1 SWA; ``full``: device
    # FULL page ids, whose SWA peers are the SWA pool's pages; see the executor)
    BACKUP_D2H = 10  # allocate ``count`` host pages and copy the device pages ``full`` into them
    LOAD_H2D = 11  # allocate device pages and copy the host pages into them (host pages stay)
    HOST_FREE = 12  # free host pages
    DEMOTE = 13  # free a backed-up node's device pages (FULL and SWA peers), keep its host pages
    STORAGE_PREFETCH = 14  # allocate ``count`` host pages and read L3 storage pages into them


HICACHE_KINDS = frozenset(
    {OpKind.BACKUP_D2H, OpKind.LOAD_H2D, OpKind.HOST_FREE, OpKind.DEMOTE, OpKind.STORAGE_PREFETCH}
)
# kinds that allocate host pages
HOST_ALLOCS = frozenset({OpKind.BACKUP_D2H, OpKind.STORAGE_PREFETCH})

# kinds that release pages; the pools they touch: (FULL, SWA)
FREES_FULL = frozenset({OpKind.FREE, OpKind.FREE_FULL, OpKind.EVICT, OpKind.DEMOTE})
FREES_SWA = frozenset(
    {OpKind.FREE, OpKind.FREE_SWA, OpKind.SWA_WINDOW_FREE, OpKind.EVICT, OpKind.TOMBSTONE, OpKind.DEMOTE}
)


@dataclass(frozen=True, slots=True)
class MemoryOp:
    """One decision. ``full``: FULL page ids (in order); ``swa``: SWA pages it allocated or
    freed (filled in by the executor); ``src``: REMAP_SWA's source pages; ``page_steps``: the
    step of each allocated page when a decode jump allocated them in one record; ``bound``:
    the allocation's merge bound (``SWAPageState.alloc``), or a HiCache record's host pool;
    ``count``: pages an ALLOC or a BACKUP_D2H asks for (its pages are chosen when it is
    applied); ``host``: a HiCache record's host page ids; ``reason``: request id or
    :data:`EVICTION`."""

    kind: OpKind
    step: int
    reason: str
    full: np.ndarray = field(default_factory=lambda: _EMPTY)
    swa: np.ndarray = field(default_factory=lambda: _EMPTY)
    src: np.ndarray = field(default_factory=lambda: _EMPTY)
    page_steps: np.ndarray | None = None
    bound: int = 0
    count: int = 0
    host: np.ndarray = field(default_factory=lambda: _EMPTY)


@dataclass
class StepInfo:
    """One scheduler step as the engine announced it (``begin_step``)."""

    step: int
    start_s: float
    duration_s: float


class MemoryOpExecutor:
    """The one place page ids change: applies records to :class:`SWAPageState`, keeps them.

    ``apply`` is also what a replay calls; ``keep=False`` applies without keeping.
    """

    def __init__(
        self, pages: SWAPageState | None, keep: bool = True, host: HostPageState | None = None
    ) -> None:
        self.pages = pages
        self.host = host
        self.keep = keep
        self.ops: list[MemoryOp] = []
        self.steps: list[StepInfo] = []
        self.step = 0

    def begin_step(self, step: int, start_s: float = 0.0, duration_s: float = 0.0) -> None:
        self.step = step
        self.steps.append(StepInfo(step, start_s, duration_s))

    def apply(self, op: MemoryOp) -> MemoryOp:
        """Apply ``op``; return it with its SWA pages resolved (what is kept). A replayed
        record's recorded pages must come out the same (AssertionError otherwise)."""
        recorded_swa = op.swa
        s = self.pages
        k = op.kind
        if k in HICACHE_KINDS:
            op = self._apply_host(op)
        elif k == OpKind.ALLOC:
            n = op.count or len(op.full)
            full, swa = s.alloc(n, op.bound)
            if len(op.full) and not np.array_equal(full, op.full):
                raise AssertionError(f"replayed allocation differs: {full} != recorded {op.full}")
            op = _with(op, full=full, swa=swa)
        elif k in (OpKind.FREE, OpKind.EVICT):
            mapped = s.full_to_swa[op.full] > 0
            if mapped.all():
                op = _with(op, swa=s.free(op.full))
            else:  # a tombstoned leaf (EVICT) has FULL only
                assert not mapped.any(), "a free of pages with some SWA peers gone"
                s.free_full(op.full)
        elif k == OpKind.FREE_FULL:
            s.free_full(op.full)
        elif k in (OpKind.FREE_SWA, OpKind.SWA_WINDOW_FREE, OpKind.TOMBSTONE):
            op = _with(op, swa=s.free_swa(op.full))
        elif k == OpKind.REMAP_SWA:
            s.remap_swa(op.full, op.src)
        elif k == OpKind.GROUP_BEGIN:
            s.group_begin()
        elif k == OpKind.GROUP_END:
            s.group_end()
        else:
            raise NotImplementedError(f"no executor for {k.name} records yet")
        if len(recorded_swa) and not np.array_equal(recorded_swa, op.swa):
            raise AssertionError(f"{k.name}: SWA pages {op.swa} != recorded {recorded_swa}")
        if self.keep:
            self.ops.append(op)
        return op

    def _apply_host(self, op: MemoryOp) -> MemoryOp:
        """HiCache records: host page ids (``HostKVCache.alloc`` / ``free``) and, when the
        executor has device pages, the device side (see :func:`apply_hicache_device`)."""
        pool = self.host.pools[op.bound] if self.host is not None else None
        k = op.kind
        if k in HOST_ALLOCS and pool is not None:
            pages = pool.alloc(op.count)
            if pages is None:
                raise AssertionError(f"host pool {op.bound} cannot allocate {op.count} pages")
            if len(op.host) and not np.array_equal(pages, op.host):
                raise AssertionError(f"replayed host allocation differs: {pages} != recorded {op.host}")
            op = _with(op, host=pages)
        elif k == OpKind.HOST_FREE and pool is not None:
            pool.free(op.host)
        elif pool is not None and not pool.used[op.host].all():  # LOAD_H2D / DEMOTE
            raise AssertionError(f"{k.name} of host pages that are not allocated")
        if self.pages is not None and k not in (OpKind.HOST_FREE, OpKind.STORAGE_PREFETCH):
            op = apply_hicache_device(self.pages, op)
        return op


def apply_hicache_device(s: SWAPageState, op: MemoryOp) -> MemoryOp:
    """The device side of a HiCache record (SGLang 0.5.23 ``HybridCacheController.write`` /
    ``load`` and ``UnifiedTreeCore._demote``), on :class:`SWAPageState`:

    - BACKUP_D2H reads device pages: pool 0 the FULL pages ``full``, pool 1 their SWA peers
      (resolved into ``swa``); nothing changes on the device;
    - LOAD_H2D pool 0 allocates ``len(host)`` FULL pages (``full_attn_allocator.alloc``, no SWA
      peers); pool 1 allocates as many SWA pages (``swa_attn_allocator.alloc``) and maps the
      FULL pages ``full`` to them (``RebuildFullToSWAMapping``);
    - DEMOTE frees the FULL pages ``full`` and their SWA peers, if any (like EVICT).
    """
    k = op.kind
    if k == OpKind.BACKUP_D2H:
        if op.bound == 1:
            swa = s.full_to_swa[op.full]
            if not (swa > 0).all():
                raise AssertionError("BACKUP_D2H of SWA pages: a FULL page has no SWA peer")
            return _with(op, swa=swa)
        return op
    if k == OpKind.LOAD_H2D:
        n = len(op.host)
        if op.bound == 0:
            full = s.full.take(n, n)
            if len(op.full) and not np.array_equal(full, op.full):
                raise AssertionError(f"replayed load allocation differs: {full} != recorded {op.full}")
            s.full_to_swa[full] = 0
            return _with(op, full=full)
        if len(op.full) != n or s.full_to_swa[op.full].any():
            raise AssertionError("LOAD_H2D of SWA pages: FULL pages missing or already mapped")
        swa = s.swa.take(n, n)
        s.full_to_swa[op.full] = swa
        return _with(op, swa=swa)
    if k == OpKind.DEMOTE:
        mapped = s.full_to_swa[op.full] > 0
        if mapped.all() and len(op.full):
            return _with(op, swa=s.free(op.full))
        assert not mapped.any(), "a demotion of pages with some SWA peers gone"
        s.free_full(op.full)
    return op


def _with(op: MemoryOp, **changes) -> MemoryOp:
    d = {f: getattr(op, f) for f in MemoryOp.__slots__}
    d.update(changes)
    return MemoryOp(**d)


def check_op_stream(
    ops: list[MemoryOp], full_pages: int, swa_pages: int, page_size: int, host_pages: tuple | None = None
) -> list[str]:
    """Replay ``ops`` on fresh pools and list what breaks SGLang's allocator invariants: a page
    freed twice or never allocated, an allocation SGLang would hand out differently, a group
    left open. (The invariant checker of :mod:`simulator.invariants` checks the tree; this is
    its counterpart for records, kept here so it reads them without the tree.) ``host_pages``:
    the (FULL, SWA) HiCache host pools, whose double frees the host state itself rejects."""
    errors: list[str] = []
    host = HostPageState(*host_pages) if host_pages else None
    ex = MemoryOpExecutor(SWAPageState(full_pages, swa_pages, page_size), keep=False, host=host)
    full_live = np.zeros(full_pages + 1, dtype=bool)
    swa_live = np.zeros(swa_pages + 1, dtype=bool)
    for i, op in enumerate(ops):
        try:
            if op.kind in FREES_FULL and not full_live[op.full].all() and op.kind != OpKind.EVICT:
                errors.append(f"record {i} ({op.kind.name}): frees FULL pages not allocated")
            got = ex.apply(op)
        except (AssertionError, NotImplementedError, IndexError) as exc:
            errors.append(f"record {i} ({op.kind.name}, step {op.step}, {op.reason}): {exc}")
            break
        if got.kind == OpKind.ALLOC or got.kind == OpKind.LOAD_H2D:
            new_full = got.full if got.kind == OpKind.ALLOC or got.bound == 0 else got.full[:0]
            if full_live[new_full].any() or swa_live[got.swa].any():
                errors.append(f"record {i}: allocates a page that is in use")
            full_live[new_full] = True
            swa_live[got.swa] = True
        if got.kind in FREES_FULL:
            full_live[got.full] = False
        if got.kind in FREES_SWA:
            if not swa_live[got.swa].all():
                errors.append(f"record {i} ({got.kind.name}): frees SWA pages not allocated")
            swa_live[got.swa] = False
    if ex.pages._swa_group is not None:
        errors.append("the stream ends inside a free group")
    return errors
