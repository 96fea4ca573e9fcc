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
from traces.page_fill import block_page_keys
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
    keys = _packed_page_keys(content.chain_ids, first_end, n_pages, page_size)
    if keys is None:  # the packed keys would overflow: pack_pairs densifies
        blk, _ = gather_ranges(np.zeros(len(n_pages), np.int64), n_pages)  # k
        offset_in_block = np.repeat(first_end, n_pages) + blk * page_size
        keys = pack_pairs(np.repeat(content.chain_ids, n_pages), offset_in_block)
    seq_lens = content.seq_lens()
    offsets = np.zeros(len(seq_lens) + 1, dtype=np.int64)
    np.cumsum(seq_lens // page_size, out=offsets[1:])
    return offsets, keys


def _packed_page_keys(
    chain_ids: np.ndarray, first_end: np.ndarray, n_pages: np.ndarray, page_size: int
) -> np.ndarray | None:
    """``pack_pairs(chain id, offset in block)`` of every page, in four passes over the pages
    instead of a dozen (issue 14): with ``a * b_max + b`` linear, a block's keys are its base
    plus ``page_size`` per page. None when ``pack_pairs`` would have to densify (no page, or
    the product overflows)."""
    has = n_pages > 0
    if not has.any():
        return None
    chain = chain_ids[has].astype(np.int64, copy=False)
    first, n = first_end[has], n_pages[has]
    a_max = int(chain.max()) + 1
    b_max = int((first + (n - 1) * page_size).max()) + 1  # the largest offset in a block, + 1
    if a_max * b_max >= 2**62:
        return None
    return block_page_keys(chain * b_max + first, n, page_size)


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


#: Above this many pages in a trace, ``row_page_keys`` computes page keys chunk by chunk on
#: demand instead of for the whole trace at once (8 bytes per page: 128 MiB).
LAZY_PAGES_ABOVE = 1 << 24
_CHUNK_PAGES = 1 << 20  # pages per lazily computed chunk (8 MiB of keys)
_CHUNKS_KEPT = 4


def row_page_keys(content: Content, page_size: int) -> RowPageKeys | None:
    """A per-row page-key source for a big hash-block trace, or None where the whole-trace keys
    (:func:`page_keys`) are the better choice (small traces, raw-token content, huge id ranges).

    Big traces hold 8 bytes per page for every request at once otherwise (a 1M-request Mooncake
    trace at page 64 has 212M pages: 1.7 GB); the simulator needs a request's pages only while
    the request is being served.
    """
    if page_size < 1:
        raise ValueError(f"page size must be >= 1, got {page_size}")
    if not isinstance(content, BlockContent) or len(content.block_lens) == 0:
        return None
    page_offsets = np.zeros(len(content.offsets), dtype=np.int64)
    np.cumsum(content.seq_lens() // page_size, out=page_offsets[1:])
    if int(page_offsets[-1]) <= LAZY_PAGES_ABOVE:
        return None
    b_max = int(content.block_lens.max()) + 1
    n_chains = int(content.chain_ids.max()) + 1
    if n_chains * b_max >= 2**62:
        return None
    return RowPageKeys(content, page_size, page_offsets, b_max)


class RowPageKeys:
    """Page keys of one row at a time, computed in chunks of rows and kept for the last few chunks.

    A key is ``chain id * b_max + offset of the page end in its block`` with one ``b_max`` for
    the whole trace, so keys from different chunks compare exactly as :func:`page_keys`' do
    (equal exactly for equal pages). :meth:`row` returns a copy, so that what a caller keeps
    (a radix tree node's key) holds that row only, never a whole chunk.
    """

    def __init__(self, content: BlockContent, page_size: int, page_offsets: np.ndarray, b_max: int) -> None:
        from traces.schema import row_chunks

        self.content = content
        self.page_size = page_size
        self.page_offsets = page_offsets
        self.b_max = b_max
        bounds = row_chunks(page_offsets, _CHUNK_PAGES)
        self._starts = np.array([a for a, _ in bounds] + [len(page_offsets) - 1], dtype=np.int64)
        self._chunks: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.page_offsets) - 1

    def row_len(self, i: int) -> int:
        return int(self.page_offsets[i + 1] - self.page_offsets[i])

    def row(self, i: int) -> np.ndarray:
        """The page keys of row ``i`` (a fresh int64 array)."""
        return self.row_view(i).copy()

    def row_view(self, i: int) -> np.ndarray:
        """Row ``i``'s keys as a view into its chunk: slice it, then copy what is kept."""
        c = int(np.searchsorted(self._starts, i, side="right")) - 1
        keys = self._chunks.get(c)
        if keys is None:
            keys = self._chunk_keys(c)
        base = int(self.page_offsets[self._starts[c]])
        return keys[int(self.page_offsets[i]) - base : int(self.page_offsets[i + 1]) - base]

    def _chunk_keys(self, c: int) -> np.ndarray:
        if len(self._chunks) >= _CHUNKS_KEPT:
            del self._chunks[next(iter(self._chunks))]  # the oldest
        a, b = int(self._starts[c]), int(self._starts[c + 1])
        off = self.content.offsets
        s, e = int(off[a]), int(off[b])
        part = BlockContent(off[a : b + 1] - s, self.content.chain_ids[s:e], self.content.block_lens[s:e])
        keys = _block_page_keys(part, self.page_size, self.b_max)
        self._chunks[c] = keys
        return keys


def _block_page_keys(content: BlockContent, page_size: int, b_max: int) -> np.ndarray:
    """:func:`_block_pages`' keys with a fixed ``b_max`` (so keys agree across chunks)."""
    starts = block_starts(content)
    ends = starts + content.block_lens
    first_page = starts // page_size
    n_pages = ends // page_size - first_page
    first_end = (first_page + 1) * page_size - starts
    k, _ = gather_ranges(np.zeros(len(n_pages), np.int64), n_pages)
    offset_in_block = np.repeat(first_end, n_pages) + k * page_size
    return np.repeat(content.chain_ids.astype(np.int64, copy=False), n_pages) * b_max + offset_in_block


class LazyPages:
    """A request's page keys, fetched from a :class:`RowPageKeys` on each use.

    Stands in for the ``pages`` array where code only slices it (``pages[:n]``) or takes its
    length; nothing is held between uses.
    """

    __slots__ = ("_rows", "_i")

    def __init__(self, rows: RowPageKeys, i: int) -> None:
        self._rows = rows
        self._i = i

    def __getitem__(self, key):
        part = self._rows.row_view(self._i)[key]  # copy the slice only, not the whole row
        return part.copy() if isinstance(part, np.ndarray) else part

    def __len__(self) -> int:
        return self._rows.row_len(self._i)

    def __array__(self, dtype=None, copy=None):
        arr = self._rows.row(self._i)
        return arr if dtype is None else arr.astype(dtype, copy=False)
