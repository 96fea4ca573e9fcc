"""Records in lists, for the chunked readers (issue 14): one batching loop for JSON lines and CSV rows.

A reader checks a chunk with a few C-level passes and falls back to record-by-record checks for
a chunk that is not plain. An input error (bad JSON, undecodable bytes, a CSV quirk) must not
hide an earlier bad record, so the records read before it are handed over first.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import islice
from typing import TypeVar

T = TypeVar("T")


def record_chunks(records: Iterable[T], size: int) -> Iterator[list[T]]:
    """Lists of ``size`` (>= 1) consecutive records, the last one shorter, none lost or repeated;
    a full chunk is handed over before the next record is read.

    When reading ``records`` raises an ``Exception``, the records read before it are yielded as
    one last (partial) chunk and then the error is raised, so a reader checking that chunk still
    reports the first bad record first. Other ``BaseException``\\ s (Ctrl-C) pass straight through.
    """
    it = iter(records)
    while True:
        chunk: list[T] = []
        try:
            # list.extend appends one item at a time in C (no per-record Python loop) and keeps
            # what it appended when the iterator raises: that is the partial chunk
            chunk.extend(islice(it, size))
        except Exception:
            if chunk:
                yield chunk
            raise
        if chunk:
            yield chunk
        if len(chunk) < size:  # the records ran out: ask no further
            return
