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

from traces.pages import sequence_pages
from traces.schema import BlockContent, Trace, row_chunks

#: Default page size for statistics: SGLang's common paged setting for hybrid SWA models.
DEFAULT_PAGE_SIZE = 64


def infinite_cache_scan(trace: Trace, page_size: int = DEFAULT_PAGE_SIZE) -> tuple[np.ndarray, int]:
    """Matched prompt tokens per request under an infinite cache, and the number of distinct pages."""
    if page_size < 1:
        raise ValueError(f"page size must be >= 1, got {page_size}")
    prompt_len = trace.requests["prompt_len"].to_numpy(np.int64)
    output_len = trace.requests["output_len"].to_numpy(np.int64)
    if isinstance(trace.content, BlockContent):
        pages, distinct = _block_scan(trace.content, output_len, page_size)
    else:
        pages, distinct = _token_scan(trace, page_size)
    cap = (prompt_len - 1) // page_size * page_size
    return np.minimum(pages * page_size, cap), distinct


def infinite_cache_matched(trace: Trace, page_size: int = DEFAULT_PAGE_SIZE) -> np.ndarray:
    """Matched prompt tokens per request under an infinite cache (see module docstring)."""
    return infinite_cache_scan(trace, page_size)[0]


def _prefix_sum(values: np.ndarray, full: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Per request: sum of ``values`` over the leading units up to and including the first non-full one."""
    counts = np.diff(offsets)
    bad = (~full).astype(np.int64)
    csum = np.cumsum(bad)
    before = csum - bad - np.repeat(np.concatenate(([0], csum))[offsets[:-1]], counts)
    take = before == 0  # no non-full unit before this one in its request
    req = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    return np.bincount(req[take], weights=values[take], minlength=len(counts)).astype(np.int64)


def _block_scan(content: BlockContent, output_len: np.ndarray, page_size: int) -> tuple[np.ndarray, int]:
    """One pass in row order, chunk by chunk: matched pages per request and the distinct page count.

    ``best[c]`` is the most tokens of chain ``c`` any earlier request left in the tree; inside a chunk,
    earlier rows of the same chunk are folded in by a sort. Memory: O(chains) + O(chunk).
    """
    offsets = content.offsets
    n_ids = int(content.chain_ids.max(initial=-1)) + 1
    # int32: a block and a position in one sequence stay below 2**31 (prompt and output are each at
    # most MAX_TOKENS = 2**30, checked by every reader)
    best = np.zeros(n_ids, dtype=np.int32)  # inserted tokens per chain, over rows already scanned
    longest = np.zeros(n_ids, dtype=np.int32)  # tokens per chain over all sequences (distinct pages)
    start_of = np.zeros(n_ids, dtype=np.int32)
    pages_out = np.zeros(len(offsets) - 1, dtype=np.int64)
    for a, b in row_chunks(offsets):
        sl = slice(int(offsets[a]), int(offsets[b]))
        off = offsets[a : b + 1] - offsets[a]
        chains = content.chain_ids[sl]
        lens = content.block_lens[sl].astype(np.int64)
        csum = np.concatenate(([0], np.cumsum(lens)))
        starts = csum[:-1] - np.repeat(csum[off[:-1]], np.diff(off))
        ins = lens.copy()
        rows = np.flatnonzero((output_len[a:b] > 0) & (np.diff(off) > 0))
        ins[off[rows + 1] - 1] -= 1  # a finished request leaves prompt + output - 1 tokens
        order = np.argsort(chains, kind="stable")  # by chain, then row order
        sc = chains[order]
        new_group = np.ones(len(sc), dtype=bool)
        new_group[1:] = sc[1:] != sc[:-1]
        gid = np.cumsum(new_group) - 1
        big = int(ins.max(initial=0)) + 1
        acc = np.maximum.accumulate(gid * big + ins[order]) - gid * big  # running max within chain
        within = np.zeros(len(order), dtype=np.int64)
        within[1:] = acc[:-1]
        within[new_group] = 0
        earlier = np.empty(len(order), dtype=np.int64)
        earlier[order] = np.maximum(within, best[sc])
        last = np.flatnonzero(np.append(new_group[1:], True))  # last (= running max) of each chain
        best[sc[last]] = np.maximum(best[sc[last]], acc[last])
        np.maximum.at(longest, chains, lens)
        start_of[chains] = starts  # a chain id always starts at the same position
        matched = np.minimum(lens, earlier)
        pages = (starts + matched) // page_size - starts // page_size
        pages_out[a:b] = _prefix_sum(pages, matched == lens, off)
    start64 = start_of.astype(np.int64)
    distinct = int(np.sum((start64 + longest) // page_size - start64 // page_size))
    return pages_out, distinct


def _token_scan(trace: Trace, page_size: int) -> tuple[np.ndarray, int]:
    """Page-level computation for raw-token content (its pages are never more than its tokens)."""
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
    return _prefix_sum(seen.astype(np.int64), seen, offsets), int(ids.max(initial=-1)) + 1


def distinct_pages(trace: Trace, page_size: int = DEFAULT_PAGE_SIZE) -> int:
    """Number of distinct page ids over all sequences (the infinite cache's final size in pages)."""
    return infinite_cache_scan(trace, page_size)[1]


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
    matched, n_distinct = infinite_cache_scan(trace, page_size)
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
        "distinct_pages": n_distinct,
        "infinite_cache_hit_tokens": int(matched.sum()),
        "infinite_cache_hit_rate": (float(matched.sum()) / total_prompt) if total_prompt else 0.0,
        "requests_with_hit": int(np.sum(matched > 0)),
    }
