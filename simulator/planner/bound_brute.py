"""Exhaustive search over the optimal bound's model, for tiny workloads: the exact optimum the
Belady bound is checked against (tests/test_bound*.py, docs/optimal-bound.md).

A state is a pair of node sets (full KV resident ``R``, SWA KV resident ``W``), as bitmasks. The
search runs forward over requests: for each request, every state reachable after the previous
release may evict down to any sub-state (``R`` a subtree, ``W`` within ``R``) that meets the
pools' limits; the request hits its longest valid resident prefix; its release inserts its path
(FULL and SWA). The best over every eviction choice at every request is the optimum.
"""

from __future__ import annotations

import numpy as np

from simulator.errors import ConfigError
from simulator.planner.bound_model import PoolModel, Workload, served_mask

MAX_NODES = 10  # 4**10 states with SWA


def brute_force_hits(wl: Workload, pools: PoolModel) -> int:
    """The most hit pages any sequence of evictions gets in the bound's model."""
    n = wl.trie.n_nodes
    swa = pools.swa_pages is not None
    if n > (MAX_NODES if swa else 2 * MAX_NODES):
        raise ConfigError(f"brute force needs a tiny trie, got {n} nodes")
    nb = 2 * n if swa else n
    states = np.arange(1 << nb, dtype=np.int64)
    full, win = states & ((1 << n) - 1), states >> n
    valid = _subtrees(wl.trie.parent, full)
    if swa:
        valid &= (win & ~full) == 0
    pop_full, pop_win = _popcount(full), _popcount(win)
    served = served_mask(wl, pools)
    best = np.full(1 << nb, -1, dtype=np.int64)
    best[0] = 0
    for t in range(wl.n):
        if not served[t]:
            continue
        reach = _superset_max(best, nb)  # evicting is free: any sub-state of a reached one
        path = wl.trie.path(t)
        hit = _hits(path, int(wl.match[t]), full, win, pools.window_pages, swa)
        ok = valid & (reach >= 0) & (pop_full - hit <= max(0, pools.full_pages - int(wl.peak[t])))
        if swa:
            ok &= pop_win + int(wl.prefill[t]) - hit <= pools.swa_pages
        pmask = int(np.bitwise_or.reduce(np.left_shift(1, path))) if len(path) else 0
        after = full | pmask
        if swa:
            after |= (win | pmask) << n
        if not ok.any():  # the SWA pool cannot take the prefill whatever is evicted: aborted
            continue
        best = np.full(1 << nb, -1, dtype=np.int64)
        np.maximum.at(best, after[ok], reach[ok] + hit[ok])
    return int(best.max())


def _popcount(x: np.ndarray) -> np.ndarray:
    out = np.zeros_like(x)
    y = x.copy()
    while y.any():
        out += y & 1
        y >>= 1
    return out


def _subtrees(parent: np.ndarray, full: np.ndarray) -> np.ndarray:
    """Masks whose nodes all have their parent present (a subtree hanging from the root)."""
    ok = np.ones(len(full), dtype=bool)
    for v, par in enumerate(parent):
        if par >= 0:
            ok &= ((full >> v) & 1 == 0) | ((full >> int(par)) & 1 == 1)
    return ok


def _superset_max(best: np.ndarray, nb: int) -> np.ndarray:
    """``out[s] = max(best[x] for x superset of s)``, one bit at a time."""
    out = best.copy()
    for b in range(nb):
        view = out.reshape(-1, 2, 1 << b)
        np.maximum(view[:, 0, :], view[:, 1, :], out=view[:, 0, :])
    return out


def _hits(path: np.ndarray, k: int, full: np.ndarray, win: np.ndarray, m: int, swa: bool) -> np.ndarray:
    """Per state: the longest prefix ``d <= k`` of ``path`` resident in FULL whose last ``m``
    pages (all of them when ``d < m``) hold SWA KV."""
    hit = np.zeros(len(full), dtype=np.int64)
    for d in range(1, k + 1):
        need = int(np.bitwise_or.reduce(np.left_shift(1, path[:d])))
        ok = (full & need) == need
        if swa:
            wneed = int(np.bitwise_or.reduce(np.left_shift(1, path[max(0, d - m) : d])))
            ok &= (win & wneed) == wneed
        hit = np.where(ok, d, hit)
    return hit
