"""Mooncake / Dynamo hash-id JSONL: ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids``.

``hash_ids`` are prefix-chained ids of ``block_size``-token blocks (512 in Mooncake's release); the
last block may be partial, so ``len(hash_ids) == ceil(input_length / block_size)`` is required.
Sessions are not in the file: continuations are inferred (see :mod:`traces.continuation`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from traces.buffers import FloatBuffer, IntBuffer
from traces.chains import chain_block_ids
from traces.continuation import ContinuationMode, link_and_build
from traces.errors import TraceFormatError
from traces.jsonl import (
    check_max,
    hash_id_list,
    length_field,
    locate_bad_int,
    number_field,
    opened,
    require_object,
)
from traces.jsonl_chunks import iter_json_chunks, iter_line_chunks, parse_records
from traces.readers import mooncake_lines
from traces.readers.common import arrival_order, fixed_block_lens, reorder_csr, roots_and_depths
from traces.readers.mooncake_chunks import plain_chunk
from traces.request_table import RequestTable
from traces.schema import Trace
from traces.source import TraceInput

DEFAULT_BLOCK_SIZE = 512
#: Whether plain lines are scanned straight into arrays (:mod:`traces.readers.mooncake_lines`),
#: in the compiled build; pure Python parses every line with ``json`` (its C scanner is faster there).
SCAN_LINES = mooncake_lines.COMPILED


def check_block_size(src: str, block_size: int) -> int:
    """Tokens per hash id: at least 1 (0 is not 'the default') and at most MAX_TOKENS."""
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise TraceFormatError(src, None, "block_size", f"must be an integer >= 1, got {block_size!r}")
    return check_max(src, None, "block_size", block_size)


def read_mooncake(
    path: TraceInput | str | Path,
    block_size: int = DEFAULT_BLOCK_SIZE,
    continuation: ContinuationMode = "reuse-output",
    limit: int | None = None,
) -> Trace:
    """Read a Mooncake-format JSONL trace (streaming; the first ``limit`` records) into a canonical trace."""
    with opened(path) as inp:
        src = inp.name
        check_block_size(src, block_size)
        bufs = _Buffers()
        if SCAN_LINES:
            for texts in iter_line_chunks(inp, limit):
                scanned = mooncake_lines.scan_lines(texts, block_size)
                if scanned is not None:
                    bufs.add_plain(*scanned)
                    continue
                chunk, error = parse_records(src, texts)  # the same records, or json's error
                _add_chunk(src, chunk, block_size, bufs)
                if error is not None:
                    raise error
        else:
            for chunk in iter_json_chunks(inp, limit):
                _add_chunk(src, chunk, block_size, bufs)
    ts, lines, in_len, out_len, counts, hashes = bufs.all()
    return _assemble(src, ts / 1000.0, lines, in_len, out_len, counts, hashes, block_size, continuation)


class _Buffers:
    """The records' fields as growing arrays (streaming: no list of records is kept)."""

    def __init__(self) -> None:
        self.ts = FloatBuffer()
        self.ints = [IntBuffer() for _ in range(5)]  # lines, input, output, id counts, hash ids

    def add(self, t: float, line: int, n_in: int, n_out: int, ids: list) -> None:
        lines, in_len, out_len, counts, _ = self.ints
        self.ts.append(t)
        lines.append(line)
        in_len.append(n_in)
        out_len.append(n_out)
        counts.append(len(ids))

    def add_plain(self, lines: np.ndarray, *plain: np.ndarray) -> None:
        """A plain chunk (:func:`plain_chunk`'s arrays) and its line numbers."""
        t, *ints = plain
        self.ts.extend_numpy(t)
        for buf, values in zip(self.ints, (lines, *ints), strict=True):
            buf.extend_numpy(values)

    def all(self) -> tuple[np.ndarray, ...]:
        return (self.ts.numpy(), *(b.numpy() for b in self.ints))


def _add_chunk(src: str, chunk: list[tuple[int, object]], block_size: int, bufs: _Buffers) -> None:
    """Append a chunk of ``(line_number, object)`` records: a few C-level passes for a plain
    chunk, else record by record (the same values, or the located error)."""
    plain = plain_chunk([obj for _, obj in chunk], block_size)
    if plain is None:
        for line, obj in chunk:
            _record(src, line, obj, block_size, bufs)
    else:
        bufs.add_plain(np.fromiter((line for line, _ in chunk), np.int64, len(chunk)), *plain)


def _record(src: str, line: int, obj: object, block_size: int, bufs: _Buffers) -> None:
    """Check one record field by field (the located errors) and append it."""
    obj = require_object(src, line, obj)
    t = number_field(src, line, obj, "timestamp")
    n_in = length_field(src, line, obj, "input_length")
    n_out = length_field(src, line, obj, "output_length")
    ids = hash_id_list(src, line, obj, "hash_ids", n_in, block_size)
    try:
        bufs.ints[4].extend(ids)
    except (TypeError, OverflowError):
        locate_bad_int(src, line, "hash_ids", ids, minimum=None)
    bufs.add(t, line, n_in, n_out, ids)


def _assemble(
    src: str,
    arrival: np.ndarray,
    lines: np.ndarray,
    prompt_len: np.ndarray,
    output_len: np.ndarray,
    counts: np.ndarray,
    raw: np.ndarray,
    block_size: int,
    continuation: ContinuationMode,
) -> Trace:
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    order = arrival_order(arrival, src)
    if order is not None:
        arrival, lines, prompt_len, output_len = (
            arrival[order],
            lines[order],
            prompt_len[order],
            output_len[order],
        )
        offsets, raw = reorder_csr(order, offsets, raw)
    chains, n_chains = chain_block_ids(raw, offsets)
    del raw
    lens = fixed_block_lens(np.diff(offsets), prompt_len, block_size)
    linked = link_and_build(offsets, chains, lens, n_chains, prompt_len, output_len, block_size, continuation)
    root, depth = roots_and_depths(linked.parent)
    # rid: the record's line number; session: its root turn's (numpy labels: no pandas, issue 14)
    requests = RequestTable(
        lines, arrival, prompt_len, output_len, session_id=lines[root], turn=depth, parent=linked.parent
    )
    return Trace(requests, linked.content, source=src)
