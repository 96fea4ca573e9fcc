"""Azure CSV rows a chunk at a time: a plain chunk is checked and parsed with C-level passes.

A chunk is *plain* when every row has three cells, its TIMESTAMP is a date-time
``YYYY-MM-DD hh:mm:ss[.fffffffff]`` (ASCII digits, no surrounding spaces, years 1678-2261) and
both token counts are what ``int`` reads as integers in [1, MAX_TOKENS]: rows the row-by-row
checks of :func:`traces.readers.azure.read_azure` accept, parsed by the same numpy date-time
parser. Any other chunk goes through those checks (the same values, or the located error), so a
trace reads the same and every error message stays (issue 14).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator

import numpy as np

from traces.jsonl import MAX_TOKENS
from traces.record_chunks import record_chunks

#: Rows per chunk.
CHUNK = 4096
_DATE_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?")


def row_chunks(reader: Iterable[list[str]], line_num: Callable[[], int], limit: int | None) -> Iterator[list]:
    """Lists of up to :data:`CHUNK` ``(line number, row)`` pairs of the non-blank rows, the
    first ``limit`` of them. An error reading the input comes after the rows before it."""
    return record_chunks(_rows(reader, line_num, limit), CHUNK)


def _rows(
    reader: Iterable[list[str]], line_num: Callable[[], int], limit: int | None
) -> Iterator[tuple[int, list[str]]]:
    """``(line number, row)`` of the non-blank rows; after the ``limit``-th no row is read
    (a ``limit`` below 1 still gives the first row)."""
    n = 0
    for row in reader:
        if not row or not "".join(row).strip():  # blank: every cell is whitespace
            continue
        yield line_num(), row
        n += 1
        if limit is not None and n >= limit:
            return


def plain_rows(rows: list[tuple[int, list[str]]], units: dict[str, int]) -> tuple[np.ndarray, ...] | None:
    """(timestamps in ns since the epoch, input lengths, output lengths) of a plain chunk; None
    when a row may not be plain, or when earlier rows gave epoch numbers (a mix is an error)."""
    if any(u != "date-time" for u in units):
        return None
    cells = [row for _, row in rows]
    if set(map(len, cells)) != {3}:
        return None
    stamps, n_in, n_out = zip(*cells, strict=True)
    if not all(map(_DATE_TIME.fullmatch, stamps)):
        return None
    years = np.array([s[:4] for s in stamps], dtype=np.int64)
    if not 1678 <= int(years.min()) <= int(years.max()) <= 2261:
        return None
    try:
        ns = np.array([s.replace(" ", "T") for s in stamps], dtype="datetime64[ns]").view(np.int64)
        lengths = [np.array(list(map(int, col)), dtype=np.int64) for col in (n_in, n_out)]
    except (ValueError, OverflowError):
        return None
    for a in lengths:
        if not 1 <= int(a.min()) <= int(a.max()) <= MAX_TOKENS:
            return None
    if (ns == np.iinfo(np.int64).min).any():  # NaT
        return None
    units.setdefault("date-time", rows[0][0])
    return ns, lengths[0], lengths[1]
