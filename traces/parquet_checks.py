"""The consistency checks of the text readers, for a trace read back from parquet.

A parquet file may come from another tool or a hand edit, so :func:`traces.parquet.read_parquet`
refuses what the JSONL readers refuse: an unknown format version, no rows, missing or empty rids
and duplicates, non-integer or negative lengths and ids, parents that do not precede their row,
infinite arrival times, and content whose length disagrees with ``prompt_len + output_len``.
Every error names the file, the 0-based row and the column. All checks are vectorised.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from traces.chains import sorted_dense_ids
from traces.errors import TraceFormatError
from traces.jsonl import MAX_TOKENS
from traces.schema import CLIENT_COLUMNS

MAX_TOKEN_ID = 2**31 - 1  # as the token JSONL reader (traces/readers/tokens.py)


def check_format_version(src: str, version: str, known: tuple[str, ...]) -> None:
    if version not in known:
        found = repr(version) if version else "none"
        raise TraceFormatError(
            src,
            None,
            "kvplan.format_version",
            f"unknown version {found}; this kvplan reads {', '.join(known)}",
        )


def client_columns(src: str, table: pa.Table) -> dict[str, pd.api.extensions.ExtensionArray]:
    """The client columns (``traces.schema.CLIENT_COLUMNS``) a table holds, checked and as the
    canonical nullable arrays: ``max_new_tokens`` integers in [1, 2**30], ``ignore_eos`` booleans;
    nulls are requests that do not send the value."""
    out: dict[str, pd.api.extensions.ExtensionArray] = {}
    for name in CLIENT_COLUMNS:
        if name in table.column_names:
            col = table.column(name).combine_chunks()
            out[name] = _ignore_eos(src, col) if name == "ignore_eos" else _max_new_tokens(src, col)
    return out


def _ignore_eos(src: str, col: pa.Array) -> pd.arrays.BooleanArray:
    if not (pa.types.is_boolean(col.type) or pa.types.is_null(col.type)):
        raise TraceFormatError(src, None, "ignore_eos", f"must be a boolean column, got {col.type}")
    values = np.asarray(pc.fill_null(col.cast(pa.bool_()), False), dtype=bool)
    return pd.arrays.BooleanArray(values, np.asarray(col.is_null(), dtype=bool))


def _max_new_tokens(src: str, col: pa.Array) -> pd.arrays.IntegerArray:
    name = "max_new_tokens"
    if not (pa.types.is_integer(col.type) or pa.types.is_null(col.type)):
        raise TraceFormatError(src, None, name, f"must be an integer column, got {col.type}")
    try:
        values = np.asarray(pc.fill_null(col.cast(pa.int64()), 1), dtype=np.int64)
    except pa.ArrowInvalid as exc:  # an unsigned value past int64
        raise TraceFormatError(src, None, name, f"integer out of range ({exc})") from None
    _fail(src, values < 1, name, lambda r: f"must be >= 1, got {values[r]}")
    _fail(src, values > MAX_TOKENS, name, lambda r: f"must be <= {MAX_TOKENS:,}, got {values[r]:,}")
    return pd.arrays.IntegerArray(values, np.asarray(col.is_null(), dtype=bool))


def _first(mask: np.ndarray) -> int | None:
    bad = np.flatnonzero(mask)
    return int(bad[0]) if len(bad) else None


def _fail(src: str, mask: np.ndarray, field: str, problem) -> None:
    """Raise for the first row where ``mask`` holds; ``problem(row)`` words it."""
    row = _first(mask)
    if row is not None:
        raise TraceFormatError(src, None, field, problem(row), row=row)


def _numeric(src: str, frame: pd.DataFrame, name: str) -> pd.Series:
    col = frame[name]
    if pd.api.types.is_bool_dtype(col.dtype) or not pd.api.types.is_numeric_dtype(col.dtype):
        raise TraceFormatError(src, None, name, f"must be a numeric column, got {col.dtype}")
    return col


def _int_column(src: str, frame: pd.DataFrame, name: str, minimum: int, maximum: int = 2**62) -> np.ndarray:
    col = _numeric(src, frame, name)
    _fail(src, col.isna().to_numpy(), name, lambda r: "missing value")
    if not pd.api.types.is_integer_dtype(col.dtype):
        values = col.to_numpy(np.float64)
        _fail(src, values != np.floor(values), name, lambda r: f"must be an integer, got {values[r]!r}")
        _fail(src, np.abs(values) > maximum, name, lambda r: f"must be <= {maximum:,}, got {values[r]!r}")
    values = col.to_numpy(np.int64)
    _fail(src, values < minimum, name, lambda r: f"must be >= {minimum}, got {values[r]}")
    _fail(src, values > maximum, name, lambda r: f"must be <= {maximum:,}, got {values[r]:,}")
    return values


def check_requests(src: str, frame: pd.DataFrame) -> None:
    """Request columns: what every reader guarantees of the rows it builds."""
    n = len(frame)
    if n == 0:
        raise TraceFormatError(src, None, None, "empty trace: no records")
    rid = frame["rid"]
    _fail(
        src,
        (rid.isna() | (rid.astype("string") == "")).to_numpy(bool),
        "rid",
        lambda r: "must be a non-empty string",
    )
    dup = rid.duplicated().to_numpy(bool)
    _fail(
        src,
        dup,
        "rid",
        lambda r: (
            f"duplicate rid {rid.iloc[r]!r} (first at row {int(np.flatnonzero(rid == rid.iloc[r])[0])})"
        ),
    )
    _int_column(src, frame, "prompt_len", 1, MAX_TOKENS)
    _int_column(src, frame, "output_len", 1, MAX_TOKENS)
    _int_column(src, frame, "turn", 0)
    parent = _int_column(src, frame, "parent", -1)
    _fail(src, parent >= np.arange(n), "parent", lambda r: f"must be -1 or an earlier row, got {parent[r]}")
    arrival = _numeric(src, frame, "arrival_s").to_numpy(np.float64)
    _fail(
        src,
        np.isinf(arrival),
        "arrival_s",
        lambda r: f"must be finite (or NaN for a closed-loop turn), got {arrival[r]}",
    )


def check_content(src: str, frame: pd.DataFrame, columns: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
    """List columns: no null lists, ids in range, and the token count each row declares."""
    for name, (offsets, values) in columns.items():
        if name == "tokens":
            low, high = 0, MAX_TOKEN_ID
        elif name == "chain_ids":
            low, high = 0, None
        else:  # block_lens
            low, high = 1, None
        bad = (values < low) if high is None else ((values < low) | (values > high))
        if bad.any():
            row = int(np.searchsorted(offsets, _first(bad), side="right") - 1)
            value = values[_first(bad)]
            span = f"in [{low}, {high}]" if high is not None else f">= {low}"
            raise TraceFormatError(src, None, name, f"must be {span}, got {value}", row=row)
    if "block_lens" in columns:
        off_c, off_l = columns["chain_ids"][0], columns["block_lens"][0]
        _fail(src, np.diff(off_c) != np.diff(off_l), "block_lens", lambda r: "needs one length per chain id")
        csum = np.concatenate(([0], np.cumsum(columns["block_lens"][1], dtype=np.int64)))
        seq = csum[off_l[1:]] - csum[off_l[:-1]]
    else:
        seq = np.diff(columns["tokens"][0])
    want = frame["prompt_len"].to_numpy(np.int64) + frame["output_len"].to_numpy(np.int64)
    content = "block_lens" if "block_lens" in columns else "tokens"
    _fail(
        src, seq != want, content, lambda r: f"holds {seq[r]} tokens but prompt_len + output_len = {want[r]}"
    )


def dense_chain_ids(chains: np.ndarray) -> np.ndarray:
    """Chain ids small enough to index arrays with: kept when they already are (kvplan writes them
    so), renumbered (equal stays equal) when a file holds huge ones, which would size arrays by them."""
    if len(chains) == 0 or int(chains.max()) < 4 * len(chains) + 4096:
        return chains
    return sorted_dense_ids(chains)[0]
