"""Pieces every reader shares: arrival sorting, session links, block lengths, parent trees."""

from __future__ import annotations

import warnings

import numpy as np

from traces.errors import TraceWarning


def arrival_order(arrival_s: np.ndarray, path: str) -> np.ndarray | None:
    """The stable order that sorts rows by arrival, or None if already sorted (warns when it sorts)."""
    if len(arrival_s) < 2 or bool(np.all(arrival_s[1:] >= arrival_s[:-1])):
        return None
    warnings.warn(
        f"{path}: timestamps are not sorted; rows were sorted by arrival time (stable)",
        TraceWarning,
        stacklevel=3,
    )
    return np.argsort(arrival_s, kind="stable")


def session_links(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Parent (previous row of the same session) and turn index, from per-row session codes (-1 = none)."""
    n = len(codes)
    parent = np.full(n, -1, dtype=np.int64)
    turn = np.zeros(n, dtype=np.int32)
    order = np.argsort(codes, kind="stable")
    sc = codes[order]
    same = np.zeros(n, dtype=bool)
    same[1:] = (sc[1:] == sc[:-1]) & (sc[1:] >= 0)
    parent[order[1:][same[1:]]] = order[:-1][same[1:]]
    group_start = np.maximum.accumulate(np.where(~same, np.arange(n), 0))
    turn[order] = (np.arange(n) - group_start).astype(np.int32)
    return parent, turn


def roots_and_depths(parent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Root row and depth (turn index) of every row in a parent forest (parents precede children)."""
    n = len(parent)
    root = np.where(parent >= 0, parent, np.arange(n))
    while True:  # pointer jumping: log(depth) passes
        nxt = root[root]
        if np.array_equal(nxt, root):
            return root, _depths(parent)
        root = nxt


def _depths(parent: np.ndarray) -> np.ndarray:
    depth = np.zeros(len(parent), dtype=np.int64)
    rows = np.flatnonzero(parent >= 0)
    for _ in range(len(rows) + 1):
        new = depth[parent[rows]] + 1
        if np.array_equal(new, depth[rows]):
            break
        depth[rows] = new
    return depth


def fixed_block_lens(counts: np.ndarray, prompt_len: np.ndarray, block_size: int) -> np.ndarray:
    """Block lengths for hash traces: ``block_size`` everywhere except each prompt's last, partial block."""
    total = int(counts.sum())
    lens = np.full(total, block_size, dtype=np.int32)
    nonempty = counts > 0
    last = np.cumsum(counts)[nonempty] - 1
    lens[last] = (prompt_len[nonempty] - (counts[nonempty] - 1) * block_size).astype(np.int32)
    return lens


def reorder_csr(order: np.ndarray, offsets: np.ndarray, *values: np.ndarray) -> tuple[np.ndarray, ...]:
    """Apply a row permutation to CSR arrays: returns (new_offsets, *new_values)."""
    from traces.schema import gather_ranges

    idx, new_offsets = gather_ranges(offsets[:-1][order], np.diff(offsets)[order])
    return (new_offsets, *(v[idx] for v in values))
