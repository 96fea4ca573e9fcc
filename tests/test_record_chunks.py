"""The one batching loop of the chunked readers (traces.record_chunks): exact chunks, nothing lost,
and the records read before an input error handed over before that error."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import traces.readers.azure_chunks
from traces import load_trace
from traces.errors import TraceFormatError
from traces.record_chunks import record_chunks


class _Source:
    """``n`` records, then ``error`` (if any); counts how many records were taken."""

    def __init__(self, n: int, error: BaseException | None = None) -> None:
        self.n, self.error, self.taken = n, error, 0

    def __iter__(self) -> Iterator[int]:
        for i in range(self.n):
            self.taken += 1
            yield i
        if self.error is not None:
            raise self.error


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 6, 7])
def test_chunks_keep_every_record_in_order(n: int) -> None:
    chunks = list(record_chunks(_Source(n), 3))
    assert [r for c in chunks for r in c] == list(range(n))
    assert all(len(c) == 3 for c in chunks[:-1]) and all(1 <= len(c) <= 3 for c in chunks)


def test_a_full_chunk_is_handed_over_before_the_next_record_is_read() -> None:
    """``trace head`` reads no further than it needs: the reader sees a chunk as soon as it is full."""
    src = _Source(10)
    chunks = record_chunks(src, 4)
    assert next(chunks) == [0, 1, 2, 3] and src.taken == 4
    assert next(chunks) == [4, 5, 6, 7] and src.taken == 8


class _Once:
    """An iterator that may not be asked again once it has said it is exhausted."""

    def __init__(self, n: int) -> None:
        self.n, self.asked, self.done = n, 0, False

    def __iter__(self) -> _Once:
        return self

    def __next__(self) -> int:
        assert not self.done, "asked again after StopIteration"
        self.asked += 1
        if self.asked > self.n:
            self.done = True
            raise StopIteration
        return self.asked - 1


@pytest.mark.parametrize("n", [0, 2, 3, 5, 6])
def test_the_records_are_asked_for_once_each_and_once_more(n: int) -> None:
    src = _Once(n)
    assert [r for c in record_chunks(src, 3) for r in c] == list(range(n))
    assert src.asked == n + 1


@pytest.mark.parametrize(("n", "expected"), [(5, [[0, 1, 2], [3, 4]]), (6, [[0, 1, 2], [3, 4, 5]]), (0, [])])
def test_the_partial_chunk_comes_before_the_error(n: int, expected: list[list[int]]) -> None:
    error = TraceFormatError("t.jsonl", n + 1, None, "invalid JSON (x)")
    got = []
    with pytest.raises(TraceFormatError) as info:
        for chunk in record_chunks(_Source(n, error), 3):
            got.append(chunk)
    assert got == expected  # no empty chunk, nothing lost, nothing repeated
    assert info.value is error  # the same error, its file, line and field intact


def test_an_interrupt_is_not_delayed_by_a_partial_chunk() -> None:
    got = []
    with pytest.raises(KeyboardInterrupt):
        for chunk in record_chunks(_Source(5, KeyboardInterrupt()), 3):
            got.append(chunk)
    assert got == [[0, 1, 2]]


def test_azure_reports_a_bad_row_before_bad_bytes_later_in_its_chunk(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Undecodable bytes at line 5 come after rows 2-4 reach the row checks: line 3's error wins."""
    monkeypatch.setattr(traces.readers.azure_chunks, "CHUNK", 8)
    path = tmp_path / "t.csv"
    rows = [
        b"2023-11-16 18:00:00,5,5",
        b"2023-11-16 18:00:01,0,5",
        b"2023-11-16 18:00:02,5,5",
        b"\xff\xfe,5,5",
    ]
    path.write_bytes(b"TIMESTAMP,ContextTokens,GeneratedTokens\n" + b"\n".join(rows) + b"\n")
    with pytest.raises(TraceFormatError, match=r"t\.csv:3: field 'ContextTokens': must be >= 1"):
        load_trace(path, fmt="azure")
    rows[1] = b"2023-11-16 18:00:01,5,5"
    path.write_bytes(b"TIMESTAMP,ContextTokens,GeneratedTokens\n" + b"\n".join(rows) + b"\n")
    with pytest.raises(TraceFormatError, match=r"t\.csv:5"):
        load_trace(path, fmt="azure")
