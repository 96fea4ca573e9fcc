"""What is in a trace, and the infinite-capacity prefix hit rate (the upper bound of any cache).

Hit rule, per request in row (arrival) order, as SGLang's radix cache would see it with unlimited
memory: the matched prefix is the longest run of the request's pages that already appeared in an
earlier request's inserted tokens (a finished request inserts prompt + output - 1 tokens, so
earlier outputs count), in whole pages, capped at ``prompt_len - 1`` floored to a page (SGLang always
recomputes at least one token). Rate = sum(matched tokens) / sum(prompt_len).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from traces.pages import block_starts, sequence_pages
from traces.schema import BlockContent, Trace

#: Default page size for statistics: SGLang's common paged setting for hybrid SWA models.
DEFAULT_PAGE_SIZE = 64


def infinite_cache_matched(trace: Trace, page_size: int = DEFAULT_PAGE_SIZE) -> np.ndarray:
    """Matched prompt tokens per request under an infinite cache (see module docstring)."""
    if page_size < 1:
        raise ValueError(f"page size must be >= 1, got {page_size}")
    prompt_len = trace.requests["prompt_len"].to_numpy(np.int64)
    if isinstance(trace.content, BlockContent):
        pages = _matched_pages_blocks(
            trace.content, trace.requests["output_len"].to_numpy(np.int64), page_size
        )
    else:
        pages = _matched_pages_tokens(trace, page_size)
    cap = (prompt_len - 1) // page_size * page_size
    return np.minimum(pages * page_size, cap)


def _prefix_sum(values: np.ndarray, full: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Per request: sum of ``values`` over the leading units up to and including the first non-full one."""
    counts = np.diff(offsets)
    bad = (~full).astype(np.int32)
    csum = np.cumsum(bad, dtype=np.int64)
    before = csum - bad - np.repeat(np.concatenate(([0], csum))[offsets[:-1]], counts)
    take = before == 0  # no non-full unit before this one in its request
    out = np.zeros(len(counts), dtype=np.int64)
    req = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    np.add.at(out, req[take], values[take])
    return out


def _inserted_lens(content: BlockContent, output_len: np.ndarray) -> np.ndarray:
    """Tokens of each block that its request leaves in the tree: all but the very last generated token."""
    ins = content.block_lens.astype(np.int64)
    rows = np.flatnonzero((output_len > 0) & (np.diff(content.offsets) > 0))
    ins[content.offsets[rows + 1] - 1] -= 1
    return ins


def _matched_pages_blocks(content: BlockContent, output_len: np.ndarray, page_size: int) -> np.ndarray:
    """Block-level computation: memory O(blocks), never O(pages)."""
    chains = content.chain_ids
    ins = _inserted_lens(content, output_len)
    order = np.argsort(chains, kind="stable")  # by chain, then request order
    sc = chains[order]
    new_group = np.ones(len(sc), dtype=bool)
    new_group[1:] = sc[1:] != sc[:-1]
    del sc
    gid = np.cumsum(new_group) - 1
    big = int(ins.max(initial=0)) + 1
    acc = np.maximum.accumulate(gid * big + ins[order]) - gid * big  # running max within chain
    seen_before = np.zeros(len(order), dtype=np.int64)
    seen_before[1:] = acc[:-1]
    seen_before[new_group] = 0
    del acc, gid, new_group
    best_earlier = np.empty(len(order), dtype=np.int64)
    best_earlier[order] = seen_before
    del seen_before, order, ins
    lens = content.block_lens.astype(np.int64)
    matched = np.minimum(lens, best_earlier)
    del best_earlier
    starts = block_starts(content)
    pages = (starts + matched) // page_size - starts // page_size
    return _prefix_sum(pages, matched == lens, content.offsets)


def _matched_pages_tokens(trace: Trace, page_size: int) -> np.ndarray:
    offsets, ids = sequence_pages(trace.content, page_size)
    n = len(trace)
    counts = np.diff(offsets)
    req = np.repeat(np.arange(n, dtype=np.int64), counts)
    # pages a request leaves in the tree: those inside its first prompt + output - 1 tokens
    seq = trace.content.seq_lens()
    inserted = np.maximum(seq - (trace.requests["output_len"].to_numpy(np.int64) > 0), 0) // page_size
    index_in_req = np.arange(len(ids), dtype=np.int64) - np.repeat(offsets[:-1], counts)
    contrib = index_in_req < inserted[req]
    first = np.full(int(ids.max(initial=-1)) + 1, n, dtype=np.int64)
    np.minimum.at(first, ids[contrib], req[contrib])
    seen = first[ids] < req
    return _prefix_sum(seen.astype(np.int64), seen, offsets)


def distinct_pages(trace: Trace, page_size: int = DEFAULT_PAGE_SIZE) -> int:
    """Number of distinct page ids over all sequences (the infinite cache's final size in pages)."""
    content = trace.content
    if not isinstance(content, BlockContent):
        return int(len(np.unique(sequence_pages(content, page_size)[1])))
    starts = block_starts(content)
    ends = starts + content.block_lens
    uniq, first, inv = np.unique(content.chain_ids, return_index=True, return_inverse=True)
    max_end = np.zeros(len(uniq), dtype=np.int64)
    np.maximum.at(max_end, inv.reshape(-1), ends)
    s = starts[first]
    return int(np.sum(max_end // page_size - s // page_size))


def _pct(values: np.ndarray) -> dict[str, float]:
    if len(values) == 0:
        return {"mean": 0.0, "p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0}
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {
        "mean": float(np.mean(values)),
        "p50": float(p50),
        "p90": float(p90),
        "p99": float(p99),
        "max": float(np.max(values)),
    }


def trace_stats(trace: Trace, page_size: int = DEFAULT_PAGE_SIZE) -> dict[str, Any]:
    """Summary statistics as a JSON-ready dict (keys documented in docs/traces.md)."""
    req = trace.requests
    n = len(req)
    arrival = req["arrival_s"].to_numpy(np.float64)
    finite = arrival[np.isfinite(arrival)]
    span = float(finite.max() - finite.min()) if len(finite) else None
    prompt = req["prompt_len"].to_numpy(np.int64)
    output = req["output_len"].to_numpy(np.int64)
    parent = req["parent"].to_numpy(np.int64)
    sessions = req["session_id"].dropna()
    per_session = sessions.value_counts().to_numpy()
    matched = infinite_cache_matched(trace, page_size)
    total_prompt = int(prompt.sum())
    return {
        "source": trace.source,
        "requests": n,
        "content": trace.content.kind,
        "closed_loop": type(trace.closed_loop).__name__ if trace.closed_loop is not None else None,
        "open_loop_arrivals": int(len(finite)),
        "time_span_s": span,
        "request_rate_per_s": (len(finite) / span) if span else None,
        "input_len": _pct(prompt),
        "output_len": _pct(output),
        "total_input_tokens": total_prompt,
        "total_output_tokens": int(output.sum()),
        "sessions": int(len(per_session)),
        "multi_turn_sessions": int(np.sum(per_session > 1)),
        "requests_with_parent": int(np.sum(parent >= 0)),
        "turns_per_session": _pct(per_session),
        "max_turn": int(req["turn"].max()) if n else 0,
        "page_size": page_size,
        "distinct_pages": distinct_pages(trace, page_size),
        "infinite_cache_hit_tokens": int(matched.sum()),
        "infinite_cache_hit_rate": (float(matched.sum()) / total_prompt) if total_prompt else 0.0,
        "requests_with_hit": int(np.sum(matched > 0)),
    }
