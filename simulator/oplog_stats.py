"""Summary of an op log: steps, records and pages by kind, traffic totals and peak usage.

The totals are the allocator's own counters (``AllocatorStats``) recomputed from the records,
so ``kvplan ops stats`` can be checked against a run.
"""

from __future__ import annotations

from collections import Counter

from simulator.memory_ops import FREES_FULL, FREES_SWA, HICACHE_KINDS, OpKind
from simulator.oplog import OpLog, fresh_executor


def op_log_stats(log: OpLog) -> dict:
    """One dict: header essentials, counts by kind, page traffic and peak pool usage."""
    h = log.header
    records: Counter = Counter()
    full_by_kind: Counter = Counter()
    swa_by_kind: Counter = Counter()
    host_by_kind: Counter = Counter()
    ex = fresh_executor(h)
    peak_full = peak_swa = 0
    for op in log.ops:
        ex.apply(op)
        records[op.kind.name] += 1
        full_by_kind[op.kind.name] += len(op.full)
        swa_by_kind[op.kind.name] += len(op.swa)
        if op.kind in HICACHE_KINDS:
            host_by_kind[f"{op.kind.name}_{'swa' if op.bound else 'full'}"] += len(op.host)
        if op.kind == OpKind.ALLOC:
            full_free, swa_free = ex.pages.free_counts()
            peak_full = max(peak_full, h["full_pages"] - full_free)
            peak_swa = max(peak_swa, h["swa_pages"] - swa_free)
    full_free, swa_free = ex.pages.free_counts()
    alloc = [op for op in log.ops if op.kind == OpKind.ALLOC]
    steps = [s.step for s in log.steps]
    return dict(
        page_size=h["page_size"],
        full_pages=h["full_pages"],
        swa_pages=h["swa_pages"],
        steps=len(log.steps),
        first_step=min(steps) if steps else None,
        last_step=max(steps) if steps else None,
        simulated_s=max((s.start_s + s.duration_s for s in log.steps), default=0.0),
        records=len(log.ops),
        records_by_kind=dict(sorted(records.items())),
        full_pages_by_kind=dict(sorted(full_by_kind.items())),
        swa_pages_by_kind=dict(sorted(swa_by_kind.items())),
        requests=len({op.reason for op in log.ops if op.reason and op.reason not in ("evict", "decode")}),
        full_pages_allocated=sum(len(op.full) for op in alloc),
        swa_pages_allocated=sum(len(op.swa) for op in alloc),
        full_pages_freed=sum(len(op.full) for op in log.ops if op.kind in FREES_FULL),
        swa_pages_freed=sum(len(op.swa) for op in log.ops if op.kind in FREES_SWA),
        peak_full_pages_used=peak_full,
        peak_swa_pages_used=peak_swa,
        final_full_free=full_free,
        final_swa_free=swa_free,
        **_hicache_stats(ex, host_by_kind),
    )


def _hicache_stats(ex, host_by_kind: Counter) -> dict:
    """HiCache logs: host pages by kind and pool (``BACKUP_D2H_full``: FULL pages copied to the
    host, ``LOAD_H2D_swa``: SWA pages loaded back, ...) and the host pools' final free pages."""
    if ex.host is None:
        return {}
    full, swa = ex.host.pools
    return dict(
        host_pages=[full.num_pages, swa.num_pages],
        host_pages_by_kind=dict(sorted(host_by_kind.items())),
        final_host_full_free=full.available(),
        final_host_swa_free=swa.available(),
    )
