"""The radix tree of a workload's page paths, one node per page (shared by the bound and the
hit-ratio curve).

A node is a distinct root path of pages: two requests share a node exactly when they share the
whole prefix up to it, which is what a prefix cache can reuse. Nodes are found by hashing every
prefix at once (numpy cumulative sums); the result is checked to be a tree (each node has one
parent and one page, and no two nodes share both), and a collision falls back to an exact
level-by-level build.
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


def build_trie_by_levels(paths: Sequence[np.ndarray]) -> PrefixTrie:
    """The trie of ``paths`` (page-id arrays); request ``i``'s nodes follow its pages in order.

    Depth by depth, the requests still sharing their node with another one are grouped by
    (node, next page); a request whose node is its own alone can share nothing deeper, so the
    rest of its path gets fresh ids at once. The loop runs as deep as the deepest shared prefix.
    """
    lengths = np.array([len(p) for p in paths], dtype=np.int64)
    offsets = np.zeros(len(paths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    pages = np.concatenate([np.asarray(p, np.int64) for p in paths]) if len(paths) else np.empty(0, np.int64)
    nodes = np.empty(len(pages), dtype=np.int64)
    parent_parts: list[np.ndarray] = []
    depth_parts: list[np.ndarray] = []
    span = int(pages.max()) + 2 if len(pages) else 2
    active = np.flatnonzero(lengths > 0)
    prev = np.full(len(active), -1, dtype=np.int64)
    n_nodes, j = 0, 0
    while len(active):
        pos = offsets[active] + j
        uniq, inv, counts = np.unique((prev + 1) * span + pages[pos], return_inverse=True, return_counts=True)
        ids = n_nodes + inv.reshape(-1)
        nodes[pos] = ids
        parent_parts.append(uniq // span - 1)
        depth_parts.append(np.full(len(uniq), j, dtype=np.int64))
        n_nodes += len(uniq)
        alone = counts[inv.reshape(-1)] == 1
        n_nodes = _fresh_tails(
            active[alone], ids[alone], j, offsets, lengths, nodes, parent_parts, depth_parts, n_nodes
        )
        keep = ~alone & (lengths[active] > j + 1)
        active, prev, j = active[keep], ids[keep], j + 1
    parent = np.concatenate(parent_parts) if parent_parts else np.empty(0, np.int64)
    depth = np.concatenate(depth_parts) if depth_parts else np.empty(0, np.int64)
    return PrefixTrie(offsets, nodes, parent, depth)


def _fresh_tails(
    reqs: np.ndarray,
    at: np.ndarray,
    j: int,
    offsets: np.ndarray,
    lengths: np.ndarray,
    nodes: np.ndarray,
    parent_parts: list[np.ndarray],
    depth_parts: list[np.ndarray],
    n_nodes: int,
) -> int:
    """Give the pages below depth ``j`` of ``reqs`` (whose node ``at`` is theirs alone) fresh
    node ids, a chain per request; returns the new node count."""
    tail = lengths[reqs] - j - 1
    total = int(tail.sum())
    if total == 0:
        return n_nodes
    ids = np.arange(n_nodes, n_nodes + total, dtype=np.int64)
    first = np.cumsum(tail) - tail
    owner = np.repeat(np.arange(len(reqs)), tail)
    k = np.arange(total) - first[owner]  # 0 for the page at depth j + 1
    nodes[offsets[reqs][owner] + j + 1 + k] = ids
    parent_parts.append(np.where(k == 0, at[owner], ids - 1))
    depth_parts.append(j + 1 + k)
    return n_nodes + total


_PRIMES = (2147483629, 2147483587)  # below 2**31: products of two residues fit int64


def build_trie(paths: Sequence[np.ndarray]) -> PrefixTrie:
    """The trie of ``paths`` (page-id arrays); request ``i``'s nodes follow its pages in order."""
    lengths = np.array([len(p) for p in paths], dtype=np.int64)
    offsets = np.zeros(len(paths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] == 0:
        return build_trie_by_levels(paths)
    pages = np.concatenate([np.asarray(p, np.int64) for p in paths])
    req = np.repeat(np.arange(len(paths)), lengths)
    depth = np.arange(len(pages), dtype=np.int64) - offsets[req]
    h1, h2 = (_prefix_hash(pages, depth, offsets, req, prime, seed) for seed, prime in enumerate(_PRIMES))
    _, first, inv = np.unique(h1 << 31 | h2, return_index=True, return_inverse=True)
    nodes = inv.reshape(-1).astype(np.int64)
    parent_at = np.where(depth > 0, np.roll(nodes, 1), -1)
    trie = PrefixTrie(offsets, nodes, parent_at[first], depth[first])
    if not _is_tree(trie, pages, parent_at, first):
        return build_trie_by_levels(paths)  # a hash collision: exact but slower
    return trie


def _prefix_hash(
    pages: np.ndarray, depth: np.ndarray, offsets: np.ndarray, req: np.ndarray, prime: int, seed: int
) -> np.ndarray:
    """``sum((page_i + 1) * base**i) mod prime`` over each prefix (a random base per prime)."""
    base = int(np.random.default_rng(0xB0D + seed).integers(2, prime - 1))
    table = np.empty(int(depth.max()) + 1, dtype=np.int64)
    acc = 1
    for i in range(len(table)):  # one multiplication per depth level, not per page
        table[i] = acc
        acc = acc * base % prime
    power = table[depth]
    term = (pages + 1) % prime * power % prime
    csum = np.cumsum(term)  # < 2**31 per term: no overflow below 2**32 pages
    before = np.concatenate([[0], csum])[offsets[req]]
    return (csum - before) % prime


def _is_tree(trie: PrefixTrie, pages: np.ndarray, parent_at: np.ndarray, first: np.ndarray) -> bool:
    """Every occurrence of a node has the node's parent and page, and (parent, page) names one
    node: then equal ids mean equal prefixes (by induction on depth)."""
    node_page = pages[first]
    if (trie.parent[trie.nodes] != parent_at).any() or (node_page[trie.nodes] != pages).any():
        return False
    span = int(pages.max()) + 2
    pairs = np.sort((trie.parent + 1) * span + node_page)
    return bool((pairs[1:] != pairs[:-1]).all())
