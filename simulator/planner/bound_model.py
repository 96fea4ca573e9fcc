"""What the optimal bound optimises over: a workload's page paths in the radix tree and, per
request, the page counts that cache-replay's serving loop (simulator/cache_replay.py) charges.

Per request ``t`` (pages of ``p`` tokens, prompt ``P``, output ``O``):

- ``match[t] = floor((P - 1) / p)``: the pages a match may hit (``match``: key capped at len - 1);
- ``insert[t] = floor((P + O - 1) / p)``: the pages inserted at release (all of its KV but the
  last output token's, which is never computed);
- ``peak[t] = ceil((P + O - 1) / p)``: the full-pool pages the request holds just before release;
  the hit part of them is the locked tree prefix, the rest is private;
- ``prefill[t] = ceil(P / p)``: the pages allocated at prefill (in both pools; the SWA pool's peak
  for the request).

A request whose prefill cannot fit the whole pool is aborted by every policy (see
:func:`served_mask`); it hits nothing and inserts nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from simulator.cache_replay import WorkloadRequest
from simulator.errors import ConfigError
from simulator.planner.prefix_trie import PrefixTrie, build_trie


@dataclass(frozen=True)
class PoolModel:
    """Device pools in tokens (SGLang's ``size`` / ``size_swa``) and the page size; ``swa_tokens``
    None: no SWA pool (every layer full attention). ``host_full_tokens``: HiCache's host pool for
    the full layers (0: no host tier); a host hit counts as a hit, so the bound's cache budget
    grows by it, while a request still needs its pages on the device (docs/optimal-bound.md,
    "HiCache")."""

    page_size: int
    full_tokens: int
    swa_tokens: int | None = None
    window: int | None = None
    host_full_tokens: int = 0

    def __post_init__(self) -> None:
        if self.page_size < 1 or self.full_tokens < self.page_size:
            raise ConfigError(f"bad pool model: {self}")
        if (self.swa_tokens is None) != (self.window is None):
            raise ConfigError("an SWA pool needs both swa_tokens and window")
        if self.host_full_tokens < 0:
            raise ConfigError(f"bad pool model: {self}")

    @property
    def full_pages(self) -> int:
        return self.full_tokens // self.page_size

    @property
    def host_full_pages(self) -> int:
        return self.host_full_tokens // self.page_size

    @property
    def swa_pages(self) -> int | None:
        return None if self.swa_tokens is None else self.swa_tokens // self.page_size

    @property
    def window_pages(self) -> int:
        """Pages of SWA KV a hit needs at its end: the run must cover ``window`` tokens."""
        return 0 if self.window is None else -(-self.window // self.page_size)


@dataclass(frozen=True)
class Workload:
    """A workload in pages: the trie of its inserted paths and the per-request page counts."""

    trie: PrefixTrie
    prompt_len: np.ndarray
    output_len: np.ndarray
    match: np.ndarray
    insert: np.ndarray
    peak: np.ndarray
    prefill: np.ndarray
    page_size: int

    @property
    def n(self) -> int:
        return len(self.prompt_len)


def page_workload(workload: Sequence[WorkloadRequest], page_size: int) -> Workload:
    """Page counts and the trie of the inserted paths (``pages[:insert]``) of ``workload``."""
    p = page_size
    prompt = np.array([w.prompt_len for w in workload], dtype=np.int64)
    output = np.array([w.output_len for w in workload], dtype=np.int64)
    if len(workload) and (prompt.min() < 1 or output.min() < 1):
        raise ConfigError("prompt and output must be non-empty")
    total = prompt + output - 1
    insert = np.array([min(len(w.pages), int(n)) for w, n in zip(workload, total // p, strict=True)])
    insert = insert.astype(np.int64).reshape(-1)
    paths = [np.asarray(w.pages[:n], np.int64) for w, n in zip(workload, insert, strict=True)]
    return Workload(
        trie=build_trie(paths),
        prompt_len=prompt,
        output_len=output,
        match=np.minimum((prompt - 1) // p, insert),
        insert=insert,
        peak=-(-total // p),
        prefill=-(-prompt // p),
        page_size=p,
    )


def served_mask(wl: Workload, pools: PoolModel) -> np.ndarray:
    """Requests some policy can serve; every policy aborts the others.

    The prefill must fit the full pool once everything evictable is gone (the locked prefix it
    hits is part of what it needs). With SWA, its uncached part ``prefill - h`` must also fit
    beside the SWA window its hit ``h`` locks, for some ``h`` up to the longest prefix earlier
    served requests inserted; an aborted request inserts nothing, so this is iterated to a
    fixed point (the served set only shrinks).
    """
    served = wl.prefill <= pools.full_pages
    if pools.swa_pages is None:
        return served
    m = pools.window_pages
    while True:
        reach = prior_depth(wl, served)
        ok = served & (np.minimum(m, reach) + wl.prefill - reach <= pools.swa_pages)
        if (ok == served).all():
            return served
        served = ok


def prior_depth(wl: Workload, served: np.ndarray) -> np.ndarray:
    """Per request, the pages of its match range that earlier served requests inserted (its hit
    with unbounded pools)."""
    trie = wl.trie
    lengths = np.diff(trie.offsets)
    time = np.repeat(np.arange(wl.n, dtype=np.int64), lengths)
    depth = np.arange(len(time), dtype=np.int64) - trie.offsets[time]
    first = np.full(trie.n_nodes, wl.n, dtype=np.int64)
    keep = served[time]
    np.minimum.at(first, trie.nodes[keep], time[keep])
    hit = (depth < wl.match[time]) & (first[trie.nodes] < time)
    return np.bincount(time[hit], minlength=wl.n).astype(np.int64)


@dataclass(frozen=True)
class Touches:
    """Every (request, path node) pair of the served requests, in request order, with the same
    node's next and previous touch (request index; ``n`` / -1 when none)."""

    node: np.ndarray
    time: np.ndarray
    depth: np.ndarray
    is_match: np.ndarray  # the touch may hit (depth < match[t])
    next_time: np.ndarray
    next_is_match: np.ndarray
    prev_time: np.ndarray
    start: np.ndarray  # CSR offsets per request into these arrays
    by_node: np.ndarray  # the events sorted by (node, time)


def touches(wl: Workload, served: np.ndarray) -> Touches:
    """The touch events of the served requests and each one's neighbours in its node's history."""
    trie = wl.trie
    lengths = np.where(served, np.diff(trie.offsets), 0)
    start = np.zeros(wl.n + 1, dtype=np.int64)
    np.cumsum(lengths, out=start[1:])
    time = np.repeat(np.arange(wl.n, dtype=np.int64), lengths)
    depth = np.arange(len(time), dtype=np.int64) - start[time]
    node = trie.nodes[trie.offsets[time] + depth]
    is_match = depth < wl.match[time]
    order = np.argsort(node * (wl.n + 1) + time)  # by (node, time); all keys distinct
    same = node[order][1:] == node[order][:-1]
    next_time = np.full(len(time), wl.n, dtype=np.int64)
    next_is_match = np.zeros(len(time), dtype=bool)
    prev_time = np.full(len(time), -1, dtype=np.int64)
    cur, nxt = order[:-1][same], order[1:][same]
    next_time[cur] = time[nxt]
    next_is_match[cur] = is_match[nxt]
    prev_time[nxt] = time[cur]
    return Touches(node, time, depth, is_match, next_time, next_is_match, prev_time, start, order)
