"""Azure LLM inference trace 2023 CSV: ``TIMESTAMP,ContextTokens,GeneratedTokens``.

Arrivals and lengths only: every prompt and every output gets unique content, so the infinite-cache
hit rate is 0 by construction. Arrival = seconds since the first timestamp.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from traces.buffers import IntBuffer
from traces.continuation import build_sequences
from traces.errors import TraceFormatError
from traces.jsonl import open_text
from traces.readers.common import arrival_order
from traces.schema import Trace, make_requests

HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def _int_cell(src: str, line: int, name: str, cell: str, minimum: int) -> int:
    try:
        value = int(cell)
    except ValueError:
        raise TraceFormatError(src, line, name, f"must be an integer, got {cell!r}") from None
    if value < minimum:
        raise TraceFormatError(src, line, name, f"must be >= {minimum}, got {value}")
    return value


def read_azure(path: str | Path) -> Trace:
    """Read an Azure 2023 LLM inference CSV (streaming) into a canonical trace."""
    src = str(path)
    ts_ns, lines, in_len, out_len = IntBuffer(), IntBuffer(), IntBuffer(), IntBuffer()
    with open_text(src) as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            raise TraceFormatError(src, None, None, "empty trace: no header and no records")
        if tuple(h.strip() for h in header) != HEADER:
            raise TraceFormatError(
                src, 1, None, f"expected header {','.join(HEADER)}, got {','.join(header)}"
            )
        for row in reader:
            line = reader.line_num
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) != 3:
                raise TraceFormatError(src, line, None, f"expected 3 columns, got {len(row)}")
            try:
                t = np.datetime64(row[0].strip().replace(" ", "T"), "ns")
            except ValueError:
                raise TraceFormatError(src, line, "TIMESTAMP", f"not a date-time: {row[0]!r}") from None
            ts_ns.append(int(t.astype(np.int64)))
            lines.append(line)
            in_len.append(_int_cell(src, line, "ContextTokens", row[1], 1))
            out_len.append(_int_cell(src, line, "GeneratedTokens", row[2], 0))
    if len(lines) == 0:
        raise TraceFormatError(src, None, None, "empty trace: no records")
    t = ts_ns.numpy()
    arrival = (t - t.min()) / 1e9
    lines_a, prompt_len, output_len = lines.numpy(), in_len.numpy(), out_len.numpy()
    order = arrival_order(arrival, src)
    if order is not None:
        arrival, lines_a, prompt_len, output_len = (
            arrival[order],
            lines_a[order],
            prompt_len[order],
            output_len[order],
        )
    n = len(prompt_len)
    offsets = np.arange(n + 1, dtype=np.int64)  # one unique prompt block per request
    parent = np.full(n, -1, dtype=np.int64)
    content = build_sequences(
        offsets,
        np.arange(n, dtype=np.int64),
        prompt_len.astype(np.int64),
        n,
        prompt_len,
        output_len,
        parent,
        np.zeros(n, dtype=bool),
    )
    requests = make_requests(lines_a, arrival, prompt_len, output_len)
    return Trace(requests, content, source=src)
