"""The LRU hit-ratio curve: hit rate against full-pool capacity, from one pass over the trace.

Method (docs/optimal-bound.md, "LRU hit-ratio curve"): SGLang's LRU evicts the least recently
used *leaf*. A node is touched whenever a descendant is, and a path's nodes are stamped root
last-most-recent, so a parent is always more recent than its children: leaf-LRU is then plain
LRU over pages, which has Mattson's inclusion property, and what is resident at any moment is
the top of one recency stack whatever the capacity. One pass computes, per request, the stack
positions of its path's pages (a Fenwick tree over access slots, in numpy batches); then each
capacity needs only the number of resident pages, a scalar advanced per request, all capacities
at once as one numpy vector.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from simulator.cache_replay import WorkloadRequest
from simulator.planner.bound_model import PoolModel, Touches, Workload, page_workload, served_mask, touches
from simulator.planner.swa_validity import SWAValidity


@dataclass(frozen=True)
class HitRatioCurve:
    """Hit rate (prefix-hit tokens / prompt tokens of the requests served) per capacity."""

    capacity_tokens: np.ndarray
    hit_rate: np.ndarray

    def to_list(self) -> list[dict]:
        return [
            {"capacity_tokens": int(c), "hit_rate": float(h)}
            for c, h in zip(self.capacity_tokens, self.hit_rate, strict=True)
        ]


def _fenwick_add(tree: np.ndarray, idx: np.ndarray, val: int) -> None:
    idx = idx + 1
    while idx.size:
        np.add.at(tree, idx, val)
        idx = idx + (idx & -idx)
        idx = idx[idx < len(tree)]


def _fenwick_prefix(tree: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Sums over slots ``[0, idx)``."""
    out = np.zeros(len(idx), dtype=np.int64)
    idx = idx.copy()
    while (idx > 0).any():
        out += tree[idx]
        idx = idx - (idx & -idx)
    return out


def stack_positions(wl: Workload, ev: Touches) -> np.ndarray:
    """For every touch, its page's LRU stack position (1 = most recent) just before the request,
    or a huge value for a page never inserted. A request's release touches its path deepest
    first, so the root side ends up most recent."""
    n_ev = len(ev.node)
    slot = np.empty(n_ev, dtype=np.int64)
    lengths = np.diff(ev.start)
    slot[:] = ev.start[ev.time] + (lengths[ev.time] - 1 - ev.depth)  # deepest first
    prev_event = np.full(n_ev, -1, dtype=np.int64)
    order = np.lexsort((ev.time, ev.node))
    same = ev.node[order][1:] == ev.node[order][:-1]
    prev_event[order[1:][same]] = order[:-1][same]
    tree = np.zeros(n_ev + 1, dtype=np.int64)
    pos = np.full(n_ev, np.iinfo(np.int64).max // 4, dtype=np.int64)
    live = 0
    for t in np.flatnonzero(lengths):
        lo, hi = ev.start[t], ev.start[t + 1]
        prev = prev_event[lo:hi]
        seen = prev >= 0
        if seen.any():
            s = slot[prev[seen]]
            pos[lo:hi][seen] = live - _fenwick_prefix(tree, s)
            _fenwick_add(tree, s, -1)
            live -= int(seen.sum())
        _fenwick_add(tree, slot[lo:hi], 1)
        live += hi - lo
    return pos


def lru_curve(
    workload: Sequence[WorkloadRequest],
    capacities_tokens: Sequence[int],
    page_size: int,
    window: int | None = None,
    tombstone: str = "unified",
    swa_eviction: str = "interval",
) -> HitRatioCurve:
    """LRU's hit rate at each full-pool capacity (tokens); the SWA pool assumed never short.

    ``window`` (tokens) with ``tombstone="unified"`` tracks which pages keep SWA KV
    (:mod:`simulator.planner.swa_validity`); the legacy tree's matches are not limited by it
    at batch 1 (checked against cache-replay), so there the curve is pure full-pool LRU.
    """
    wl = page_workload(workload, page_size)
    caps = np.asarray(capacities_tokens, dtype=np.int64)
    track = window is not None and tombstone == "unified"
    return curve_for(wl, caps, -(-window // page_size) if track else None, swa_eviction == "none")


def curve_for(
    wl: Workload, capacities_tokens: np.ndarray, window_pages: int | None = None, keep_outputs: bool = False
) -> HitRatioCurve:
    """:func:`lru_curve` on a workload in pages (``window_pages`` None: no SWA tracking)."""
    p = wl.page_size
    served = served_mask(wl, PoolModel(p, int(capacities_tokens.min())))
    ev = touches(wl, served)
    pos = stack_positions(wl, ev)
    cap = capacities_tokens // p
    need = _eviction_need(wl)
    swa = None if window_pages is None else SWAValidity(wl, window_pages, len(cap), keep_outputs)
    r = np.zeros(len(cap), dtype=np.int64)
    hits = np.zeros(len(cap), dtype=np.int64)
    for t in np.flatnonzero(served):
        lo, hi = ev.start[t], ev.start[t + 1]
        resident = np.searchsorted(pos[lo:hi], r, side="right")
        if swa is None:
            h = np.minimum(resident, wl.match[t])
        else:
            path = ev.node[lo:hi]
            h = swa.hits(t, path, resident)
            swa.insert(t, path, resident, h)
        hits += h
        other = np.minimum(r - resident, np.maximum(0, cap - need[t]))
        r = (hi - lo) + other
    prompt = int(wl.prompt_len[served].sum())
    return HitRatioCurve(capacities_tokens, hits * p / prompt if prompt else hits * 0.0)


def _eviction_need(wl: Workload) -> np.ndarray:
    """Pages a request holds plus the free page the allocator evicts for, at its tightest
    moment: the prefill (``alloc_for_extend`` asks one page more when ``p > 1``) or its last
    decode step (``alloc_for_decode`` wants one free page before allocating)."""
    p = wl.page_size
    prefill = wl.prefill + (1 if p > 1 else 0)
    before_last = -(-(wl.prompt_len + wl.output_len - 2) // p) + 1
    return np.maximum(prefill, np.where(wl.output_len > 1, before_last, 0))
