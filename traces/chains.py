"""Interning helpers: turn (context, id) pairs into dense ids, and make block ids prefix-chained.

Everything here is a handful of numpy sorts; no loop runs per token, and loops over block depth
only run when a trace's ids turn out not to be prefix-chained.
"""

from __future__ import annotations

import numpy as np


def first_appearance_ids(keys: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense ids for ``keys`` (any 1-D integer array), numbered in order of first appearance."""
    if len(keys) == 0:
        return np.zeros(0, dtype=np.int64), 0
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first), dtype=np.int64)
    return rank[inverse.reshape(-1)], len(first)


def sorted_dense_ids(keys: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense ids in sorted-key order (cheaper than first appearance; used where order does not show)."""
    if len(keys) == 0:
        return np.zeros(0, dtype=np.int64), 0
    uniq, inverse = np.unique(keys, return_inverse=True)
    return inverse.reshape(-1).astype(np.int64, copy=False), len(uniq)


def pack_pairs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """One int64 key per (a, b) pair of non-negative ints; exact (densifies if the product overflows)."""
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    if len(a) == 0:
        return a
    a_max = int(a.max()) + 1
    b_max = int(b.max()) + 1
    if a_max * b_max >= 2**62:
        b, b_max = sorted_dense_ids(b)
        a, a_max = sorted_dense_ids(a)
        if a_max * max(b_max, 1) >= 2**62:  # pragma: no cover - needs > 2**31 distinct of each
            raise OverflowError("too many distinct ids to pack")
    return a * b_max + b


def block_depths(offsets: np.ndarray) -> np.ndarray:
    """Index of each block inside its request (0 for the first block)."""
    counts = np.diff(offsets)
    total = int(offsets[-1])
    return np.arange(total, dtype=np.int64) - np.repeat(offsets[:-1], counts)


def predecessors(ids: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The id of the previous block in the same request, -1 for a first block."""
    pred = np.empty(len(ids), dtype=np.int64)
    if len(ids):
        pred[1:] = ids[:-1]
        starts = offsets[:-1][np.diff(offsets) > 0]
        pred[starts] = -1
    return pred


def compact_ids(raw: np.ndarray) -> tuple[np.ndarray, int]:
    """Non-negative ids below a bound ``n_ids``: the raw ids themselves when they are already small
    non-negative integers (Mooncake's are; no copy, no sort), else dense ids from a sort."""
    if len(raw) == 0:
        return np.zeros(0, dtype=np.int64), 0
    raw = np.asarray(raw)
    if raw.dtype == np.int64:
        lo, hi = int(raw.min()), int(raw.max())
        if lo >= 0 and hi < 4 * len(raw) + 4096:
            return raw, hi + 1
    return sorted_dense_ids(raw)


def is_prefix_chained(ids: np.ndarray, offsets: np.ndarray, n_ids: int) -> bool:
    """True when every id always follows the same predecessor (so it names a whole prefix)."""
    from traces.schema import row_chunks

    seen = np.full(n_ids, -2, dtype=np.int64)
    for a, b in row_chunks(offsets):  # pass 1: remember one predecessor per id
        sl = slice(int(offsets[a]), int(offsets[b]))
        seen[ids[sl]] = predecessors(ids[sl], offsets[a : b + 1] - offsets[a])
    for a, b in row_chunks(offsets):  # pass 2: every occurrence must agree with it
        sl = slice(int(offsets[a]), int(offsets[b]))
        if not np.array_equal(seen[ids[sl]], predecessors(ids[sl], offsets[a : b + 1] - offsets[a])):
            return False
    return True


def chain_block_ids(raw: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, int]:
    """Prefix-chained ids in ``[0, n_ids)`` for per-request block ids that may or may not be chained.

    If every raw id always follows the same predecessor, the raw ids already name prefixes and are
    kept (made compact if needed). Otherwise each block is re-keyed by (chained id of the previous
    block, raw id), depth by depth, which makes equal ids mean equal prefixes.
    """
    dense, n_ids = compact_ids(raw)
    if is_prefix_chained(dense, offsets, n_ids):
        return dense, n_ids
    depth = block_depths(offsets)
    order = np.argsort(depth, kind="stable")  # all depth-0 blocks, then depth 1, ...
    bounds = np.searchsorted(depth[order], np.arange(int(depth.max()) + 2))
    chained = np.empty(len(raw), dtype=np.int64)
    next_id = 0
    for d in range(len(bounds) - 1):
        sel = order[bounds[d] : bounds[d + 1]]
        prev = np.full(len(sel), -1, dtype=np.int64) if d == 0 else chained[sel - 1]
        local, n_local = sorted_dense_ids(pack_pairs(prev + 1, dense[sel]))
        chained[sel] = local + next_id
        next_id += n_local
    return chained, next_id
