"""Which tree pages hold SWA KV under 0.5.23's unified tree, per capacity, for the LRU curve.

A hit ends only where the last ``window`` tokens before it hold SWA KV
(``components/swa.py:create_match_validator``). In the unified tree a request's prompt enters the
tree with its SWA freed below its last window (``SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS``),
except the window before a full-only match (``SWAComponent.prepare_for_caching_req`` inserts up
to the branching point first); its decode keeps the last window of the output (every decode-time
policy; ``none`` keeps all of it). A page that stays in the tree keeps its SWA and may be healed;
a page evicted and inserted again takes the new request's state. These states differ between
capacities, so they are kept per capacity: a (nodes x capacities) boolean matrix.
"""

from __future__ import annotations

import numpy as np

from simulator.planner.bound_model import Workload


class SWAValidity:
    """Per-node SWA presence for each capacity, and the hits it allows."""

    def __init__(self, wl: Workload, window_pages: int, n_caps: int, keep_outputs: bool) -> None:
        self.wl = wl
        self.m = window_pages
        self.keep_outputs = keep_outputs
        self.swa = np.zeros((wl.trie.n_nodes, n_caps), dtype=bool)

    def hits(self, t: int, path: np.ndarray, resident: np.ndarray) -> np.ndarray:
        """Per capacity, the longest prefix within the resident depth ``resident`` and the match
        range whose last ``min(m, d)`` pages hold SWA."""
        k = int(self.wl.match[t])
        if k == 0:
            return np.zeros(len(resident), dtype=np.int64)
        j = np.arange(k)[:, None]
        present = self.swa[path[:k]] & (j < resident[None, :])
        last_gap = np.maximum.accumulate(np.where(present, -1, j), axis=0)
        valid = (j - last_gap) >= np.minimum(self.m, j + 1)
        return np.where(valid, j + 1, 0).max(axis=0)

    def insert(self, t: int, path: np.ndarray, resident: np.ndarray, hit: np.ndarray) -> None:
        """The release of request ``t``: its path's SWA state per capacity (kept pages OR'ed
        with what the request still holds, re-inserted pages replaced by it)."""
        wl, m = self.wl, self.m
        n = len(path)
        j = np.arange(n)[:, None]
        c = int(wl.prompt_len[t]) // wl.page_size
        held = (j >= c - m) & ((j < c) | (j >= n - m) | self.keep_outputs)
        held = held | ((hit < resident)[None, :] & (j >= resident - m) & (j < resident))
        old = self.swa[path]
        self.swa[path] = np.where(j < resident[None, :], old | held, held)
