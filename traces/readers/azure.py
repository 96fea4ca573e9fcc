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
from traces.jsonl import check_max, opened
from traces.readers.azure_chunks import plain_rows, row_chunks
from traces.readers.common import arrival_order
from traces.request_table import RequestTable
from traces.schema import Trace
from traces.source import TraceInput

HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_NAT = int(np.datetime64("NaT", "ns").astype(np.int64))


#: Numeric timestamps are Unix epoch times; the unit is read from the magnitude (below 1e11 seconds,
#: i.e. before the year 5138; then milliseconds, microseconds, nanoseconds), and must not change.
_EPOCH_UNITS: tuple[tuple[float, str, int], ...] = (
    (1e11, "seconds", 10**9),
    (1e14, "milliseconds", 10**6),
    (1e17, "microseconds", 10**3),
    (9.2e18, "nanoseconds", 1),
)


def _int_cell(src: str, line: int, name: str, cell: str) -> int:
    """A token count cell: an integer in [1, MAX_TOKENS]."""
    try:
        value = int(cell)
    except ValueError:
        raise TraceFormatError(src, line, name, f"must be an integer, got {cell[:40]!r}") from None
    if value < 1:
        raise TraceFormatError(src, line, name, f"must be >= 1, got {value}")
    return check_max(src, line, name, value)


def _timestamp_ns(src: str, line: int, cell: str, units: dict[str, int]) -> int:
    """Nanoseconds since the epoch of a TIMESTAMP cell (a date-time, or an epoch number)."""
    text = cell.strip()
    if text.replace(".", "", 1).isdigit():
        return _epoch_ns(src, line, text, units)
    if "date-time" not in units:
        units["date-time"] = line
    if len(units) > 1:
        raise TraceFormatError(src, line, "TIMESTAMP", f"mixes date-times and epoch numbers: {_units(units)}")
    if not (text[:4].isdigit() and text[4:5] == "-" and 1678 <= int(text[:4]) <= 2261):
        # numpy wraps years outside the nanosecond range (1678-2261) silently; refuse them
        raise TraceFormatError(
            src, line, "TIMESTAMP", f"not a date-time 'YYYY-MM-DD hh:mm:ss' in 1678-2261: {cell[:40]!r}"
        )
    if text.endswith(("Z", "z")) or "+" in text or "-" in text[10:]:
        # numpy would shift a zone offset to UTC with a deprecation warning (and may refuse it later)
        raise TraceFormatError(
            src, line, "TIMESTAMP", f"has a time zone: {cell[:40]!r}; give UTC date-times without one"
        )
    try:
        ns = int(np.datetime64(text.replace(" ", "T"), "ns").astype(np.int64))
    except (ValueError, OverflowError):
        raise TraceFormatError(src, line, "TIMESTAMP", f"not a date-time: {cell[:40]!r}") from None
    if ns == _NAT:
        raise TraceFormatError(src, line, "TIMESTAMP", f"not a date-time: {cell[:40]!r} (NaT)")
    return ns


def _epoch_ns(src: str, line: int, text: str, units: dict[str, int]) -> int:
    value = float(text)
    unit, scale = next(((u, s) for bound, u, s in _EPOCH_UNITS if value < bound), (None, 0))
    if unit is None:
        raise TraceFormatError(src, line, "TIMESTAMP", f"epoch number {text[:40]} is out of range")
    units.setdefault(unit, line)
    if len(units) > 1:
        raise TraceFormatError(src, line, "TIMESTAMP", f"epoch unit changes: {_units(units)}")
    return round(value * scale)


def _units(units: dict[str, int]) -> str:
    return ", ".join(f"{u} from line {n}" for u, n in units.items())


def read_azure(path: TraceInput | str | Path, limit: int | None = None) -> Trace:
    """Read an Azure 2023 LLM inference CSV (streaming; the first ``limit`` rows) into a canonical trace."""
    with opened(path) as inp:
        src = inp.name
        bufs = [IntBuffer() for _ in range(4)]  # timestamps (ns), line numbers, input, output
        units: dict[str, int] = {}
        numbered = inp.lines()
        reader = csv.reader(text for _, text in numbered)
        header = next(reader, None)
        if header is None:
            raise TraceFormatError(src, None, None, "empty trace: no header and no records")
        if tuple(h.strip() for h in header) != HEADER:
            raise TraceFormatError(
                src, 1, None, f"expected header {','.join(HEADER)}, got {','.join(header)!r}"
            )
        for rows in row_chunks(reader, lambda: reader.line_num, limit):
            plain = plain_rows(rows, units)
            if plain is None:  # row by row: the same values, or the located error
                for line, row in rows:
                    _row(src, line, row, units, bufs)
            else:
                ns, n_in, n_out = plain
                lines = np.fromiter((line for line, _ in rows), np.int64, len(rows))
                for buf, values in zip(bufs, (ns, lines, n_in, n_out), strict=True):
                    buf.extend_numpy(values)
    if len(bufs[1]) == 0:
        raise TraceFormatError(src, None, None, "empty trace: no records")
    t, lines_a, prompt_len, output_len = (b.numpy() for b in bufs)
    arrival = (t - t.min()) / 1e9
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
    requests = RequestTable(lines_a, arrival, prompt_len, output_len)  # numpy labels: no pandas
    return Trace(requests, content, source=src)


def _row(src: str, line: int, row: list[str], units: dict[str, int], bufs: list[IntBuffer]) -> None:
    """Check one row cell by cell (the located errors) and append it."""
    if len(row) != 3:
        raise TraceFormatError(src, line, None, f"expected 3 columns, got {len(row)}")
    ts_ns, lines, in_len, out_len = bufs
    ts_ns.append(_timestamp_ns(src, line, row[0], units))
    lines.append(line)
    in_len.append(_int_cell(src, line, "ContextTokens", row[1]))
    out_len.append(_int_cell(src, line, "GeneratedTokens", row[2]))
