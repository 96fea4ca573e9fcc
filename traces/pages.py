"""Re-blocking content to pages: exact, prefix-chained page ids for any page size.

For prefix-chained blocks, the page that ends at token position ``e`` is fully named by the chain id
of the block holding token ``e - 1`` and ``e`` minus that block's start: the chain id fixes every
token before the block, and the offset fixes how far into the block the page reaches. Interning
those (chain, offset) pairs gives page ids with the required property without walking prefixes.
Raw-token content is first cut into page rows, rows are interned, and the row ids are chained.
"""

from __future__ import annotations

import numpy as np

from traces.chains import chain_block_ids, first_appearance_ids, pack_pairs
from traces.schema import BlockContent, Content, TokenContent, gather_ranges


def block_starts(content: BlockContent) -> np.ndarray:
    """Token position (within its request) where each block starts."""
    csum = np.zeros(len(content.block_lens) + 1, dtype=np.int64)
    np.cumsum(content.block_lens, out=csum[1:])
    req_start = np.repeat(csum[content.offsets[:-1]], np.diff(content.offsets))
    return csum[:-1] - req_start


def sequence_pages(content: Content, page_size: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR (offsets over requests, dense page ids) of every full page of each sequence."""
    offsets, keys = page_keys(content, page_size)
    ids, _ = first_appearance_ids(keys)
    return offsets, ids


def page_keys(content: Content, page_size: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR (offsets over requests, page keys): equal keys exactly for equal pages.

    The keys are :func:`sequence_pages` before its dense renumbering, which sorts every page of
    the trace; a consumer that only compares pages (the radix tree) can skip that sort.
    """
    if page_size < 1:
        raise ValueError(f"page size must be >= 1, got {page_size}")
    if isinstance(content, BlockContent):
        return _block_pages(content, page_size)
    if isinstance(content, TokenContent):
        return _token_pages(content, page_size)
    raise TypeError(f"unknown content type {type(content).__name__}")


def _block_pages(content: BlockContent, page_size: int) -> tuple[np.ndarray, np.ndarray]:
    starts = block_starts(content)
    ends = starts + content.block_lens
    first_page = starts // page_size  # pages already ended before this block
    n_pages = ends // page_size - first_page
    # page k of a block ends at (first_page + 1 + k) * page_size: its offset in the block is
    # the block's first page end minus the block start, plus k pages
    first_end = (first_page + 1) * page_size - starts
    blk, _ = gather_ranges(np.zeros(len(n_pages), np.int64), n_pages)  # k
    offset_in_block = np.repeat(first_end, n_pages) + blk * page_size
    keys = pack_pairs(np.repeat(content.chain_ids, n_pages), offset_in_block)
    seq_lens = content.seq_lens()
    offsets = np.zeros(len(seq_lens) + 1, dtype=np.int64)
    np.cumsum(seq_lens // page_size, out=offsets[1:])
    return offsets, keys


def _token_pages(content: TokenContent, page_size: int) -> tuple[np.ndarray, np.ndarray]:
    lens = content.seq_lens()
    n_pages = lens // page_size
    idx, _ = gather_ranges(content.offsets[:-1], n_pages * page_size)
    rows = np.ascontiguousarray(content.tokens[idx].reshape(-1, page_size))
    offsets = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(n_pages, out=offsets[1:])
    if len(rows) == 0:
        return offsets, np.zeros(0, dtype=np.int64)
    _, row_ids = np.unique(rows, axis=0, return_inverse=True)
    chained, _ = chain_block_ids(row_ids.reshape(-1).astype(np.int64), offsets)
    return offsets, chained
