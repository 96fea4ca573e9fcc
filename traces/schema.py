"""The canonical trace: a request table plus the token content of every request, both columnar.

A request's *sequence* is its prompt followed by its output (``prompt_len + output_len`` tokens),
because SGLang inserts prompt + output into the radix tree and a later turn may reuse both.
Content is stored for the whole sequence, in one of two forms:

* :class:`BlockContent`: prefix-chained blocks. ``chain_ids[j]`` names the whole token prefix up to
  the end of block ``j`` (equal id => equal prefix, and equal tokens inside the block up to the
  shorter of the two lengths), ``block_lens[j]`` its token count. Hash-id traces use this.
* :class:`TokenContent`: raw token ids (bench_multiturn-like or oracle JSONL workloads).

Both are CSR arrays over requests (``offsets`` has ``n + 1`` entries), so nothing is per-token Python.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from traces.request_table import RequestTable

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from traces.closed_loop import ClosedLoop

#: Columns every trace's ``requests`` frame has, in this order.
REQUEST_COLUMNS = ("rid", "arrival_s", "session_id", "turn", "parent", "prompt_len", "output_len")

#: What a client sends with each request, where the trace records it (parquet format version 2):
#: ``max_new_tokens`` (nullable Int64, >= 1) and ``ignore_eos`` (nullable boolean); NA = not
#: sent. A trace that records neither has neither column.
CLIENT_COLUMNS = {"max_new_tokens": "Int64", "ignore_eos": "boolean"}


@dataclass(frozen=True)
class BlockContent:
    """Prefix-chained blocks of each request's sequence (CSR over requests)."""

    offsets: np.ndarray  # int64, n + 1
    chain_ids: np.ndarray  # int64, one per block; dense and non-negative
    block_lens: np.ndarray  # int32 (or int64), one per block, all >= 1

    kind = "blocks"

    def seq_lens(self) -> np.ndarray:
        """Tokens per request (sum of its block lengths)."""
        csum = np.concatenate(([0], np.cumsum(self.block_lens, dtype=np.int64)))
        return csum[self.offsets[1:]] - csum[self.offsets[:-1]]

    def take(self, rows: np.ndarray) -> BlockContent:
        """The content of ``rows`` only, in that order (used by ``head`` and slicing)."""
        idx, offsets = gather_ranges(self.offsets[rows], np.diff(self.offsets)[rows])
        return BlockContent(offsets, self.chain_ids[idx], self.block_lens[idx])


@dataclass(frozen=True)
class TokenContent:
    """Raw token ids of each request's sequence (CSR over requests)."""

    offsets: np.ndarray  # int64, n + 1
    tokens: np.ndarray  # int64

    kind = "tokens"

    def seq_lens(self) -> np.ndarray:
        return np.diff(self.offsets)

    def take(self, rows: np.ndarray) -> TokenContent:
        idx, offsets = gather_ranges(self.offsets[rows], np.diff(self.offsets)[rows])
        return TokenContent(offsets, self.tokens[idx])


Content = BlockContent | TokenContent


def gather_ranges(starts: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Flat indices of the ranges ``[starts[i], starts[i] + lens[i])`` and the CSR offsets of the result."""
    lens = np.asarray(lens, dtype=np.int64)
    offsets = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    total = int(offsets[-1])
    if total == 0:
        return np.zeros(0, dtype=np.int64), offsets
    # position within its range = global index - range's output start; add the range's input start.
    shift = np.repeat(np.asarray(starts, dtype=np.int64) - offsets[:-1], lens)
    return np.arange(total, dtype=np.int64) + shift, offsets


def row_chunks(offsets: np.ndarray, max_items: int = 1 << 20) -> list[tuple[int, int]]:
    """Split CSR rows into consecutive ``(first_row, end_row)`` chunks of about ``max_items`` items.

    Big traces are processed chunk by chunk so temporaries stay a few tens of MB (issue 2, item 9).
    """
    n = len(offsets) - 1
    if n <= 0:
        return []
    targets = np.arange(max_items, int(offsets[-1]), max_items)
    # sorted, not np.unique: repeated cuts only make empty pairs, dropped below, and a plain
    # np.unique imports numpy.ma (50-100 ms of a run's start-up, issue 14)
    cuts = np.sort(np.concatenate(([0], np.searchsorted(offsets, targets, side="right") - 1, [n])))
    cuts = cuts[(cuts >= 0) & (cuts <= n)]
    return [(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:], strict=True) if b > a]


def copy_ranges(
    dst: np.ndarray, dst_starts: np.ndarray, src: np.ndarray, src_starts: np.ndarray, lens: np.ndarray
) -> None:
    """``dst[dst_starts[i]:+lens[i]] = src[src_starts[i]:+lens[i]]`` for all i, in bounded-memory chunks."""
    lens = np.asarray(lens, dtype=np.int64)
    csum = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=csum[1:])
    for a, b in row_chunks(csum):
        s_idx, _ = gather_ranges(src_starts[a:b], lens[a:b])
        d_idx, _ = gather_ranges(dst_starts[a:b], lens[a:b])
        dst[d_idx] = src[s_idx]


class Trace:
    """A workload: ``requests`` (one row per request, in serving order) and its ``content``.

    Row order is arrival order; rows whose ``arrival_s`` is NaN are closed-loop turns whose time the
    simulator resolves from ``closed_loop``. ``parent`` is the row index of the previous turn (-1 if
    none), always smaller than the row's own index.

    ``requests`` is given as a DataFrame or as a :class:`~traces.request_table.RequestTable`
    (numpy columns; the frame is then built on first read, so a run that reads only
    :meth:`column` and :meth:`labels` never imports pandas, issue 14). Immutable, like the
    frozen dataclass it was.
    """

    def __init__(
        self,
        requests: pd.DataFrame | RequestTable,
        content: Content,
        source: str = "",
        closed_loop: ClosedLoop | None = None,
    ) -> None:
        table = requests if isinstance(requests, RequestTable) else None
        self.__dict__.update(
            _table=table,
            _frame=None if table is not None else requests,
            content=content,
            source=source,
            closed_loop=closed_loop,
            _pages_cache={},
        )

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __repr__(self) -> str:
        return f"Trace({len(self)} requests, {type(self.content).__name__}, source={self.source!r})"

    @property
    def requests(self) -> pd.DataFrame:
        """The request table as a DataFrame (:data:`REQUEST_COLUMNS`, then any client columns)."""
        if self._frame is None:
            self.__dict__["_frame"] = self._table.to_frame()
        return self._frame

    def __len__(self) -> int:
        return len(self._table if self._table is not None else self._frame)

    def column(self, name: str, dtype: Any = None) -> np.ndarray:
        """A numeric request column as a numpy array (of ``dtype`` if given), without building
        the DataFrame when the trace has numpy columns."""
        if self._table is not None:
            values = self._table.column(name)
            return values if dtype is None else values.astype(dtype, copy=False)
        return self._frame[name].to_numpy(dtype)

    def labels(self, name: str) -> list[str | None]:
        """A string request column (``rid``, ``session_id``) as strings, None where missing."""
        if self._table is not None:
            return self._table.labels(name)
        col = self._frame[name]
        na = col.isna().to_numpy()
        return [None if m else str(v) for v, m in zip(col.tolist(), na, strict=True)]

    def has_column(self, name: str) -> bool:
        """Whether the request table has ``name`` (the client columns are optional)."""
        if self._table is not None:
            return name in REQUEST_COLUMNS
        return name in self._frame.columns

    def row_hashes(self) -> tuple[list[str], np.ndarray]:
        """(column names, ``pandas.util.hash_pandas_object(requests, index=False)`` as uint64),
        computed from the numpy columns when the trace has them (no pandas)."""
        if self._table is not None:
            return list(REQUEST_COLUMNS), self._table.row_hashes()
        import pandas as pd

        req = self._frame
        return list(map(str, req.columns)), pd.util.hash_pandas_object(req, index=False).to_numpy()

    def sequence_pages(self, page_size: int) -> tuple[np.ndarray, np.ndarray]:
        """CSR (offsets, page_ids) of the full pages of each request's prompt ++ output.

        Two requests share page id at position k exactly when they share the whole token prefix up
        to the end of page k. Ids are dense, numbered in order of first appearance.
        """
        from traces.chains import first_appearance_ids

        key = ("seq", int(page_size))
        if key not in self._pages_cache:
            offsets, keys = self.page_keys(page_size)
            self._pages_cache[key] = (offsets, first_appearance_ids(keys)[0])
        return self._pages_cache[key]

    def page_keys(self, page_size: int) -> tuple[np.ndarray, np.ndarray]:
        """CSR (offsets, page keys) like :meth:`sequence_pages`, without the dense renumbering:
        equal keys exactly for equal pages, which is all the radix tree compares."""
        from traces.pages import page_keys

        key = ("keys", int(page_size))
        if key not in self._pages_cache:
            self._pages_cache[key] = page_keys(self.content, int(page_size))
        return self._pages_cache[key]

    def row_page_keys(self, page_size: int):
        """A per-row source of :meth:`page_keys`' keys for a big trace, computed on demand
        (:class:`traces.pages.RowPageKeys`), or None when the whole-trace arrays are cheap."""
        from traces.pages import row_page_keys

        key = ("rows", int(page_size))
        if key not in self._pages_cache:
            self._pages_cache[key] = row_page_keys(self.content, int(page_size))
        return self._pages_cache[key]

    def prompt_pages(self, page_size: int) -> tuple[np.ndarray, np.ndarray]:
        """CSR of the full pages inside each prompt (a prefix of each row of ``sequence_pages``)."""
        offsets, ids = self.sequence_pages(page_size)
        n_prompt = self.column("prompt_len", np.int64) // int(page_size)
        idx, new_offsets = gather_ranges(offsets[:-1], n_prompt)
        return new_offsets, ids[idx]

    def head(self, n: int) -> Trace:
        """The first ``n`` requests (parents always precede children, so links stay valid)."""
        n = min(n, len(self))
        rows = np.arange(n)
        if self._table is not None:
            requests = self._table.head(n)
        else:
            requests = self._frame.iloc[:n].copy()
        return Trace(requests, self.content.take(rows), self.source, self.closed_loop)


def int_labels(values: np.ndarray) -> pa.Array:
    """Decimal string labels for integers, built in Arrow (no Python string per row)."""
    import pyarrow as pa

    return pa.array(np.asarray(values, dtype=np.int64)).cast(pa.string())


def _strings(values: np.ndarray | list | pa.Array | None, n: int) -> pd.api.extensions.ExtensionArray:
    import pandas as pd
    import pyarrow as pa

    string_dtype = pd.StringDtype("pyarrow")
    if values is None:
        return pd.array(pa.nulls(n, pa.string()), dtype=string_dtype)
    if isinstance(values, np.ndarray) and values.dtype.kind in "iu":
        values = int_labels(values)
    if isinstance(values, np.ndarray):
        values = values.tolist()
    return pd.array(values, dtype=string_dtype)


def make_requests(
    rid: np.ndarray | list | pa.Array,
    arrival_s: np.ndarray,
    prompt_len: np.ndarray,
    output_len: np.ndarray,
    session_id: np.ndarray | list | pa.Array | None = None,
    turn: np.ndarray | None = None,
    parent: np.ndarray | None = None,
) -> pd.DataFrame:
    """Build the request frame with the canonical column names and dtypes (strings are Arrow-backed;
    integer arrays given as ``rid``/``session_id`` become their decimal labels)."""
    import pandas as pd

    n = len(prompt_len)
    frame = pd.DataFrame(
        {
            "rid": _strings(rid, n),
            "arrival_s": np.asarray(arrival_s, dtype=np.float64),
            "session_id": _strings(session_id, n),
            "turn": np.zeros(n, np.int32) if turn is None else np.asarray(turn, dtype=np.int32),
            "parent": np.full(n, -1, np.int64) if parent is None else np.asarray(parent, dtype=np.int64),
            "prompt_len": np.asarray(prompt_len, dtype=np.int64),
            "output_len": np.asarray(output_len, dtype=np.int64),
        }
    )
    return frame


def add_client_columns(frame: pd.DataFrame, max_new_tokens: list, ignore_eos: list) -> None:
    """Append :data:`CLIENT_COLUMNS` (one value or None per row) when any row states one."""
    import pandas as pd

    if any(v is not None for v in max_new_tokens) or any(v is not None for v in ignore_eos):
        frame["max_new_tokens"] = pd.array(max_new_tokens, dtype="Int64")
        frame["ignore_eos"] = pd.array(ignore_eos, dtype="boolean")


def check_trace(trace: Trace) -> None:
    """Internal consistency (an AssertionError means a bug in a reader, not bad input)."""
    req = trace.requests
    assert tuple(req.columns[: len(REQUEST_COLUMNS)]) == REQUEST_COLUMNS, list(req.columns)
    n = len(req)
    assert len(trace.content.offsets) == n + 1
    seq = trace.content.seq_lens()
    want = req["prompt_len"].to_numpy() + req["output_len"].to_numpy()
    assert np.array_equal(seq, want), "content length != prompt_len + output_len"
    parent = req["parent"].to_numpy()
    assert np.all(parent < np.arange(n)), "parent must precede its child"
