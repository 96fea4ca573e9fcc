"""The offline optimal bound on a prefix cache's hit rate (Belady on the page tree).

The model (docs/optimal-bound.md): requests are served one at a time in file order; before each,
any pages may be evicted; a request hits the pages of its match range that are resident from the
root on; while it runs, the tree and its private pages share the full pool, and at release its
whole path is inserted. Dropping the tree's prefix-closure gives a relaxation in which pages are
independent unit items whose cache budget at request ``t`` is ``full_pages - peak[t]`` (the hit
pages cost nothing: they are part of the request's own peak). Belady's rule, keep the pages whose
next hit comes first, is optimal for that relaxation (proved in the docs), so its hit count is an
upper bound on every policy. When its resident sets happen to be prefix-closed at every request
and, with SWA, the windows its hits need fit the SWA pool, it is also feasible: then it is the
exact optimum and ``exact`` is true.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from simulator.cache_replay import WorkloadRequest
from simulator.planner.bound_model import PoolModel, Touches, Workload, page_workload, served_mask, touches


@dataclass(frozen=True)
class BoundResult:
    """The bound and what it rests on (token counts over the served requests)."""

    hit_rate_bound: float
    exact: bool
    prefix_closed: bool  # Belady's resident sets were subtrees at every request
    swa_feasible: bool  # the SWA windows of its hits fit the SWA pool (true without SWA)
    hit_tokens: int
    prompt_tokens: int
    infinite_capacity_hit_rate: float
    working_set_tokens: int
    capacity_tokens: int
    swa_capacity_tokens: int | None
    host_capacity_tokens: int  # HiCache's host full pool (0: device only)
    served: int
    aborted: int
    request_hits: np.ndarray  # hit tokens per request (0 for aborted ones)

    def to_dict(self) -> dict:
        """The scalars, for JSON."""
        return {k: v for k, v in vars(self).items() if k != "request_hits"}


def optimal_bound(workload: Sequence[WorkloadRequest], pools: PoolModel) -> BoundResult:
    """The Belady bound for ``workload`` (page ids at ``pools.page_size``) on ``pools``."""
    wl = page_workload(workload, pools.page_size)
    return bound_for(wl, pools)


def bound_for(wl: Workload, pools: PoolModel) -> BoundResult:
    """:func:`optimal_bound` on a workload already in pages (sweeps over capacities reuse it)."""
    served = served_mask(wl, pools)  # a request needs its pages on the device, host or not
    ev = touches(wl, served)
    # with a host tier, a page kept on the host hits too: the budget is device + host pages
    # (docs/optimal-bound.md, "HiCache"); the two-tier schedule is not certified, so not exact
    hits, prefix_closed = belady_hits(wl, ev, served, pools.full_pages + pools.host_full_pages)
    swa_ok = swa_windows_fit(wl, ev, served, hits, pools)
    p = pools.page_size
    prompt_tokens = int(wl.prompt_len[served].sum())
    inf_hits = infinite_hits(wl, ev)
    rate = float(hits.sum() * p / prompt_tokens) if prompt_tokens else 0.0
    inf_rate = float(inf_hits.sum() * p / prompt_tokens) if prompt_tokens else 0.0
    return BoundResult(
        hit_rate_bound=rate,
        exact=bool(prefix_closed and swa_ok and pools.host_full_tokens == 0),
        prefix_closed=bool(prefix_closed),
        swa_feasible=bool(swa_ok),
        hit_tokens=int(hits.sum() * p),
        prompt_tokens=prompt_tokens,
        infinite_capacity_hit_rate=inf_rate,
        working_set_tokens=int(working_set_pages(wl, ev, served) * p),
        capacity_tokens=pools.full_tokens,
        swa_capacity_tokens=pools.swa_tokens,
        host_capacity_tokens=pools.host_full_tokens,
        served=int(served.sum()),
        aborted=int((~served).sum()),
        request_hits=hits * p,
    )


def belady_hits(wl: Workload, ev: Touches, served: np.ndarray, full_pages: int) -> tuple[np.ndarray, bool]:
    """Hit pages per request under Belady on independent pages, and whether every resident set
    it chose was prefix-closed.

    The kept pages (as touch events) are held sorted by ``(next hit, depth)``: the hits of
    request ``t`` are the keys equal to ``t`` at the front; then the ``full_pages - peak[t]``
    smallest of the rest stay (shallower first on ties, so a parent never goes before a child
    hit at the same time); then the path of ``t`` joins, each page keyed by its next touch if
    that touch can hit (a page next touched outside a match range would be inserted again
    there anyway, so keeping it gains nothing).
    """
    span = int(wl.trie.depth.max()) + 1 if wl.trie.n_nodes else 1
    useful = np.flatnonzero(ev.next_is_match)
    new_key = ev.next_time * span + ev.depth
    key = np.empty(0, dtype=np.int64)
    eid = np.empty(0, dtype=np.int64)
    hits = np.zeros(wl.n, dtype=np.int64)
    dropped_at = np.full(len(ev.node), wl.n, dtype=np.int64)
    for t in np.flatnonzero(served):
        h = int(np.searchsorted(key, (t + 1) * span, side="left"))
        hits[t] = h
        budget = max(0, full_pages - int(wl.peak[t]))
        dropped_at[eid[h + budget :]] = t
        key, eid = key[h : h + budget], eid[h : h + budget]
        lo, hi = np.searchsorted(useful, (ev.start[t], ev.start[t + 1]))
        if hi > lo:
            new = useful[lo:hi]
            order = np.argsort(new_key[new], kind="stable")
            nk, new = new_key[new][order], new[order]
            at = np.searchsorted(key, nk)
            key = np.insert(key, at, nk)
            eid = np.insert(eid, at, new)
    return hits, _prefix_closed(wl, ev, dropped_at)


def _prefix_closed(wl: Workload, ev: Touches, dropped_at: np.ndarray) -> bool:
    """Whether a page was ever resident while its parent was not.

    A kept page's parent is touched whenever it is, with a next hit no later than its own, so
    the parent is kept at least as long unless one of its touches is useless (next touched
    outside a match range, so never kept). A violation is thus a kept child interval
    ``(touch, last resident request]`` that contains a useless touch of the parent.
    """
    useless = ~ev.next_is_match & (ev.next_time < wl.n)
    suspect = np.zeros(wl.trie.n_nodes, dtype=bool)
    suspect[ev.node[useless]] = True  # only these can be a missing parent
    child = np.flatnonzero(ev.next_is_match & (ev.depth > 0))
    child = child[suspect[wl.trie.parent[ev.node[child]]]]
    end = np.minimum(ev.next_time[child], dropped_at[child] - 1)
    child, end = child[end > ev.time[child]], end[end > ev.time[child]]
    if not len(child):
        return True
    parent_node = wl.trie.parent[ev.node[child]]
    order = ev.by_node
    stamp = ev.node[order] * (wl.n + 1) + ev.time[order]
    bad = np.concatenate([[0], np.cumsum(useless[order])])
    lo = np.searchsorted(stamp, parent_node * (wl.n + 1) + ev.time[child], side="left")
    hi = np.searchsorted(stamp, parent_node * (wl.n + 1) + end, side="left")
    return bool((bad[hi] - bad[lo] == 0).all())


def infinite_hits(wl: Workload, ev: Touches) -> np.ndarray:
    """Hit pages per request with unbounded pools: every match-range page touched before."""
    hit = ev.is_match & (ev.prev_time >= 0)
    return np.bincount(ev.time[hit], minlength=wl.n).astype(np.int64)


def working_set_pages(wl: Workload, ev: Touches, served: np.ndarray) -> int:
    """The largest full-pool need: pages that will hit later (kept since their last touch) plus
    the request's own peak. A full pool smaller than this must drop a page that would hit, so
    the bound falls below the unbounded hit rate; at or above it, the bound equals that rate."""
    if not served.any():
        return 0
    live = np.zeros(wl.n + 1, dtype=np.int64)
    keep = ev.next_is_match
    np.add.at(live, ev.time[keep] + 1, 1)
    np.add.at(live, ev.next_time[keep], -1)
    live = np.cumsum(live)[: wl.n]
    return int((live + wl.peak)[served].max())


def swa_windows_fit(
    wl: Workload, ev: Touches, served: np.ndarray, hits: np.ndarray, pools: PoolModel
) -> bool:
    """Whether the SWA KV Belady's hits need fits the SWA pool at every request.

    A hit of ``h`` pages needs the SWA KV of its last ``window_pages`` pages, kept since each
    page's previous touch; at request ``t`` the SWA pool holds those windows (of ``t`` and of later
    hits) plus ``t``'s prefill, ``prefill[t] - hits[t]`` pages. The windows of one page between
    two touches are one interval, so the pool's load is a sum of intervals.
    """
    if pools.swa_pages is None:
        return True
    m = pools.window_pages
    lo = np.maximum(hits - m, 0)
    counts = np.where(served, hits - lo, 0)
    req = np.repeat(np.arange(wl.n), counts)
    first = np.cumsum(counts) - counts
    idx = ev.start[req] + lo[req] + (np.arange(len(req)) - first[req])
    load = np.zeros(wl.n + 1, dtype=np.int64)
    np.add.at(load, ev.prev_time[idx] + 1, 1)
    np.add.at(load, req + 1, -1)
    load = np.cumsum(load)[: wl.n]
    need = load + wl.prefill - hits
    return bool((need[served] <= pools.swa_pages).all())
