"""Multi-turn continuations in hash-block traces, and how a continuation's prompt is rewritten.

Inference (traces without session ids, e.g. Mooncake): request ``r`` continues an earlier request
``p`` when

1. ``r``'s blocks start with all of ``p``'s *complete* blocks (``prompt_len // block_size`` of them,
   at least one),
2. ``p``'s last complete block first appeared in ``p`` itself (``p`` brought new content, so a
   request that only repeats a shared system prompt or document is nobody's parent; this also makes
   the owner of each complete-block prefix unique), and
3. ``r``'s prompt is longer than ``p``'s (a continuation contains the previous prompt).

Among the candidates the one with the longest match (the most complete blocks) wins. With explicit
sessions (Dynamo events) the parent is the previous request of the session, and the rewrite below
applies only when conditions 1 and 3 hold for that pair.

Rewrite (``continuation="reuse-output"``, the default): the hash ids of a continuation cannot show
the previous turn's output (outputs are not hashed), but SGLang cached it: a finished request inserts
prompt + output - 1 tokens. So a continuation's content becomes the parent's full prompt content ++
the parent's output block ++ the rest of its own prompt as one fresh block, keeping its prompt_len.
When the prompt is shorter than parent prompt + output, the output block is truncated to fit and
there is no fresh block. ``continuation="blocks-only"`` keeps the trace's own blocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from traces.schema import BlockContent, copy_ranges, row_chunks

ContinuationMode = Literal["reuse-output", "blocks-only"]
CONTINUATION_MODES: tuple[str, ...] = ("reuse-output", "blocks-only")


@dataclass(frozen=True)
class Linked:
    """Result of linking: parent per row, which links are content continuations, and final content."""

    parent: np.ndarray  # int64, -1 for none
    continuation: np.ndarray  # bool: content continues the parent's prompt
    content: BlockContent  # sequence content: (possibly rewritten) prompt blocks ++ output block


def infer_parents(
    offsets: np.ndarray, chains: np.ndarray, n_chains: int, prompt_len: np.ndarray, block_size: int
) -> np.ndarray:
    """Parent row per row by the inference rule in the module docstring (-1 if none)."""
    n = len(prompt_len)
    counts = np.diff(offsets)
    first_req = np.full(n_chains, n, dtype=np.int64)
    for a, b in row_chunks(offsets):
        sl = slice(int(offsets[a]), int(offsets[b]))
        np.minimum.at(first_req, chains[sl], np.repeat(np.arange(a, b, dtype=np.int64), counts[a:b]))
    ncomplete = np.minimum(prompt_len // block_size, counts)
    rows = np.flatnonzero(ncomplete >= 1)
    key = chains[offsets[rows] + ncomplete[rows] - 1]
    owners = rows[first_req[key] == rows]
    del first_req
    owner = np.full(n_chains, -1, dtype=np.int64)
    owner[chains[offsets[owners] + ncomplete[owners] - 1]] = owners
    parent = np.full(n, -1, dtype=np.int64)
    for a, b in row_chunks(offsets):
        sl = slice(int(offsets[a]), int(offsets[b]))
        req = np.repeat(np.arange(a, b, dtype=np.int64), counts[a:b])
        p = owner[chains[sl]]
        cand = (p >= 0) & (p < req)
        cand[cand] &= prompt_len[p[cand]] < prompt_len[req[cand]]
        idx = np.flatnonzero(cand)
        if len(idx):
            last = np.ones(len(idx), dtype=bool)
            last[:-1] = req[idx[:-1]] != req[idx[1:]]  # the deepest candidate block of each request
            parent[req[idx[last]]] = p[idx[last]]
    return parent


def continues_parent(
    offsets: np.ndarray, chains: np.ndarray, prompt_len: np.ndarray, parent: np.ndarray, block_size: int
) -> np.ndarray:
    """For explicit parent links: does the child start with all of the parent's complete blocks?"""
    counts = np.diff(offsets)
    ok = np.zeros(len(parent), dtype=bool)
    child = np.flatnonzero(parent >= 0)
    p = parent[child]
    nc = np.minimum(prompt_len[p] // block_size, counts[p])
    good = (counts[child] >= nc) & (prompt_len[child] > prompt_len[p])
    has = good & (nc >= 1)
    same = np.ones(len(child), dtype=bool)
    same[has] = chains[offsets[child[has]] + nc[has] - 1] == chains[offsets[p[has]] + nc[has] - 1]
    ok[child] = good & same
    return ok


def link_and_build(
    offsets: np.ndarray,
    chains: np.ndarray,
    lens: np.ndarray,
    n_chains: int,
    prompt_len: np.ndarray,
    output_len: np.ndarray,
    block_size: int,
    mode: ContinuationMode = "reuse-output",
    parent: np.ndarray | None = None,
) -> Linked:
    """Link continuations (inferred unless ``parent`` is given) and build the sequence content.

    Output blocks get chain ids ``n_chains + row``; fresh "rest" blocks ``n_chains + n + row``.
    """
    if mode not in CONTINUATION_MODES:
        raise ValueError(f"continuation must be one of {CONTINUATION_MODES}, got {mode!r}")
    n = len(prompt_len)
    if parent is None:
        parent = infer_parents(offsets, chains, n_chains, prompt_len, block_size)
        cont = parent >= 0
    else:
        cont = continues_parent(offsets, chains, prompt_len, parent, block_size)
    rewrite = cont if mode == "reuse-output" else np.zeros(n, dtype=bool)
    return Linked(
        parent,
        cont,
        build_sequences(offsets, chains, lens, n_chains, prompt_len, output_len, parent, rewrite),
    )


def _levels(parent: np.ndarray, rewrite: np.ndarray) -> np.ndarray:
    """Rewrite depth: 0 for rows kept as they are, depth(parent) + 1 for rewritten rows."""
    depth = np.zeros(len(parent), dtype=np.int64)
    rows = np.flatnonzero(rewrite)
    for _ in range(len(rows) + 1):  # parents precede children: converges in (max depth + 1) passes
        new = depth[parent[rows]] + 1
        if np.array_equal(new, depth[rows]):
            break
        depth[rows] = new
    return depth


def build_sequences(
    offsets: np.ndarray,
    chains: np.ndarray,
    lens: np.ndarray,
    n_chains: int,
    prompt_len: np.ndarray,
    output_len: np.ndarray,
    parent: np.ndarray,
    rewrite: np.ndarray,
) -> BlockContent:
    """Sequence content: each row's prompt blocks (rewritten where ``rewrite``) ++ its output block."""
    n = len(prompt_len)
    raw_counts = np.diff(offsets)
    depth = _levels(parent, rewrite)
    levels = [np.flatnonzero(depth == g) for g in range(int(depth.max(initial=0)) + 1)]

    nb_prompt = raw_counts.copy()
    for rows in levels[1:]:
        p = parent[rows]
        room = prompt_len[rows] - prompt_len[p]
        po = output_len[p]
        nb_prompt[rows] = nb_prompt[p] + (po > 0) + (room > po)
    nb_seq = nb_prompt + (output_len > 0)
    final_off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(nb_seq, out=final_off[1:])
    out_chain = np.empty(int(final_off[-1]), dtype=np.int64)
    out_len = np.empty(int(final_off[-1]), dtype=lens.dtype)

    keep = levels[0]
    copy_ranges(out_chain, final_off[keep], chains, offsets[keep], raw_counts[keep])
    copy_ranges(out_len, final_off[keep], lens, offsets[keep], raw_counts[keep])
    for rows in levels[1:]:
        p = parent[rows]
        copy_ranges(out_chain, final_off[rows], out_chain, final_off[p], nb_prompt[p])
        copy_ranges(out_len, final_off[rows], out_len, final_off[p], nb_prompt[p])
        room = prompt_len[rows] - prompt_len[p]
        po = output_len[p]
        at = final_off[rows] + nb_prompt[p]
        has_out = po > 0
        out_chain[at[has_out]] = n_chains + p[has_out]
        out_len[at[has_out]] = np.minimum(po, room)[has_out]
        rest = room > po
        at_rest = at[rest] + has_out[rest]
        out_chain[at_rest] = n_chains + n + rows[rest]
        out_len[at_rest] = (room - po)[rest]
    with_out = np.flatnonzero(output_len > 0)
    at = final_off[with_out] + nb_prompt[with_out]
    out_chain[at] = n_chains + with_out
    out_len[at] = output_len[with_out]
    return BlockContent(final_off, out_chain, out_len)
