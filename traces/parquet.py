"""Canonical traces on disk: one parquet file, request columns plus the content as list columns.

Block traces store ``chain_ids`` (list<int64>) and ``block_lens`` (list<int64>); token traces store
``tokens`` (list<int64>). File-level metadata (``kvplan.*`` keys) holds the format version, the
content kind, the source and the closed-loop spec as JSON. Writes go to a temporary name in the
same directory and are renamed into place, so a crash never leaves a half-written trace.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from traces.closed_loop import ClosedLoop, closed_loop_from_dict, closed_loop_to_dict
from traces.errors import TraceFormatError
from traces.jsonl import opened
from traces.output import check_output_path, umask_mode
from traces.parquet_checks import (
    check_content,
    check_format_version,
    check_requests,
    client_columns,
    dense_chain_ids,
)
from traces.schema import REQUEST_COLUMNS, BlockContent, TokenContent, Trace
from traces.source import TraceInput

FORMAT_VERSION = "2"  # 2: optional client columns max_new_tokens / ignore_eos (traces.schema)
READ_VERSIONS = ("1", "2")
_LISTS = {"blocks": ("chain_ids", "block_lens"), "tokens": ("tokens",)}


def _list_column(offsets: np.ndarray, values: np.ndarray) -> pa.LargeListArray:
    return pa.LargeListArray.from_arrays(pa.array(offsets, pa.int64()), pa.array(values.astype(np.int64)))


def write_parquet(trace: Trace, path: str | Path) -> Path:
    """Write ``trace`` to ``path`` atomically (temporary name, then rename); returns the path.

    Refuses a ``path`` that is a link, a device, a FIFO or a directory (see :mod:`traces.output`)."""
    path = Path(path)
    table = pa.Table.from_pandas(trace.requests, preserve_index=False)
    content = trace.content
    if isinstance(content, BlockContent):
        cols = {"chain_ids": content.chain_ids, "block_lens": content.block_lens}
    else:
        cols = {"tokens": content.tokens}
    for name, values in cols.items():
        table = table.append_column(name, _list_column(content.offsets, values))
    meta = {
        b"kvplan.format_version": FORMAT_VERSION.encode(),
        b"kvplan.content": content.kind.encode(),
        b"kvplan.source": trace.source.encode(),
        b"kvplan.closed_loop": json.dumps(closed_loop_to_dict(trace.closed_loop)).encode(),
    }
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})
    check_output_path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    os.close(fd)
    try:
        os.chmod(tmp, umask_mode())  # mkstemp makes 0600; a trace is shared like any other file
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _list_values(src: str, table: pa.Table, name: str) -> tuple[np.ndarray, np.ndarray]:
    col = table.column(name).combine_chunks()
    if not (pa.types.is_list(col.type) or pa.types.is_large_list(col.type)):
        raise TraceFormatError(src, None, name, f"must be a list column, got {col.type}")
    if col.null_count:
        row = int(np.flatnonzero(np.asarray(col.is_null()))[0])
        raise TraceFormatError(src, None, name, "missing list", row=row)
    try:
        if col.type != pa.large_list(pa.int64()):
            col = col.cast(pa.large_list(pa.int64()))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise TraceFormatError(src, None, name, f"must hold integers ({exc})") from None
    if col.values.null_count:
        at = int(np.flatnonzero(np.asarray(col.values.is_null()))[0])
        row = int(np.searchsorted(np.asarray(col.offsets), at, side="right") - 1)
        raise TraceFormatError(src, None, name, "missing value inside the list", row=row)
    offsets = np.asarray(col.offsets, dtype=np.int64)
    values = np.asarray(col.values, dtype=np.int64)
    return offsets - offsets[0], values[offsets[0] : offsets[-1]]


def _read_table(path: TraceInput | str | Path, limit: int | None) -> tuple[str, pa.Table]:
    with opened(path) as inp:
        try:
            table = pq.read_table(inp.binary())
        except (pa.ArrowException, OSError) as exc:
            raise TraceFormatError(inp.name, None, None, f"not a readable parquet file ({exc})") from None
    return inp.name, table if limit is None else table.slice(0, max(limit, 0))


def read_parquet(path: TraceInput | str | Path, limit: int | None = None) -> Trace:
    """Read a trace written by :func:`write_parquet` (its first ``limit`` rows), with the text
    readers' consistency checks."""
    src, table = _read_table(path, limit)
    meta = table.schema.metadata or {}
    kind = meta.get(b"kvplan.content", b"").decode(errors="replace")
    if kind not in _LISTS:
        raise TraceFormatError(src, None, None, "not a kvplan trace (no kvplan.content metadata)")
    check_format_version(src, meta.get(b"kvplan.format_version", b"").decode(errors="replace"), READ_VERSIONS)
    missing = [c for c in (*REQUEST_COLUMNS, *_LISTS[kind]) if c not in table.column_names]
    if missing:
        raise TraceFormatError(src, None, missing[0], "missing column")
    lists = {name: _list_values(src, table, name) for name in _LISTS[kind]}
    client = client_columns(src, table)
    requests = table.drop_columns(list(_LISTS[kind])).to_pandas()
    for name, values in client.items():
        requests[name] = values
    check_requests(src, requests)
    check_content(src, requests, lists)
    if kind == "blocks":
        (offsets, chains), (_, lens) = lists["chain_ids"], lists["block_lens"]
        content: BlockContent | TokenContent = BlockContent(offsets, dense_chain_ids(chains), lens)
    else:
        content = TokenContent(*lists["tokens"])
    for col, dtype in (
        ("turn", np.int32),
        ("parent", np.int64),
        ("prompt_len", np.int64),
        ("output_len", np.int64),
    ):
        requests[col] = requests[col].astype(dtype)
    for col in ("rid", "session_id"):
        requests[col] = requests[col].astype("string")
    source = meta.get(b"kvplan.source", b"").decode(errors="replace")
    return Trace(requests, content, source=source, closed_loop=_closed_loop(src, meta))


def _closed_loop(src: str, meta: dict) -> ClosedLoop | None:
    """The ``kvplan.closed_loop`` metadata; a hand-edited or foreign value is a located error."""
    raw = meta.get(b"kvplan.closed_loop", b"null")
    try:
        data = json.loads(raw.decode())
        if data is not None and not isinstance(data, dict):
            raise TypeError(f"a JSON {type(data).__name__}, not an object")
        return closed_loop_from_dict(data)
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise TraceFormatError(
            src, None, "kvplan.closed_loop", f"not a closed-loop spec this kvplan writes ({exc!r:.80})"
        ) from None
