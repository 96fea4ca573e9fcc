"""The radix tree of a workload's page paths, one node per page (shared by the bound and the
hit-ratio curve).

A node is a distinct root path of pages: two requests share a node exactly when they share the
whole prefix up to it, which is what a prefix cache can reuse. Built level by level with
``np.unique`` over (parent node, page id) pairs, so the cost is numpy work per depth, not per page.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PrefixTrie:
    """Node ids of every request's page path (CSR: ``nodes[offsets[i]:offsets[i+1]]``, root side
    first), each node's parent (-1 under the root) and depth (0 for a child of the root)."""

    offsets: np.ndarray
    nodes: np.ndarray
    parent: np.ndarray
    depth: np.ndarray

    @property
    def n_nodes(self) -> int:
        return len(self.parent)

    def path(self, i: int) -> np.ndarray:
        return self.nodes[self.offsets[i] : self.offsets[i + 1]]


def build_trie(paths: Sequence[np.ndarray]) -> PrefixTrie:
    """The trie of ``paths`` (page-id arrays); request ``i``'s nodes follow its pages in order."""
    lengths = np.array([len(p) for p in paths], dtype=np.int64)
    offsets = np.zeros(len(paths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    pages = np.concatenate([np.asarray(p, np.int64) for p in paths]) if len(paths) else np.empty(0, np.int64)
    nodes = np.empty(len(pages), dtype=np.int64)
    parents: list[np.ndarray] = []
    order = np.argsort(-lengths, kind="stable")  # the requests still active at depth j: a prefix
    sorted_len = lengths[order]
    span = int(pages.max()) + 2 if len(pages) else 2
    prev = np.full(len(paths), -1, dtype=np.int64)  # node at depth j-1, per request (in `order`)
    n_nodes = 0
    for j in range(int(sorted_len[0]) if len(paths) else 0):
        active = int(np.searchsorted(-sorted_len, -j, side="left"))  # lengths > j
        reqs = order[:active]
        pos = offsets[reqs] + j
        keys = (prev[:active] + 1) * span + pages[pos]
        uniq, inv = np.unique(keys, return_inverse=True)
        ids = n_nodes + inv.reshape(-1)
        nodes[pos] = ids
        parents.append(uniq // span - 1)
        prev[:active] = ids
        n_nodes += len(uniq)
    parent = np.concatenate(parents) if parents else np.empty(0, np.int64)
    depth = np.empty(n_nodes, dtype=np.int64)
    start = 0
    for j, par in enumerate(parents):
        depth[start : start + len(par)] = j
        start += len(par)
    return PrefixTrie(offsets, nodes, parent, depth)
