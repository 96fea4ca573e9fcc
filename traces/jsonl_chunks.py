"""JSON lines in chunks, parsed by the json module's C scanner without its Python wrappers.

The per-record readers spend a third of their time in ``json.loads``'s two Python frames and in
their per-field checks (issue 14). :func:`iter_json_chunks` yields the records of
:func:`traces.jsonl.iter_json_lines` in lists, so a reader can check a chunk's fields with a few
C-level passes and fall back to its record-by-record checks (and their located errors) only for
a chunk that is not plain. :func:`iter_line_chunks` yields the same records' text unparsed, for a
reader that scans plain lines itself and parses the others with :func:`parse_records`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from traces.errors import TraceFormatError
from traces.jsonl import opened
from traces.record_chunks import record_chunks
from traces.source import TraceInput

#: ``json.loads(s)`` is ``_default_decoder.decode(s)``, which calls this scanner at the first
#: non-whitespace character; a line that starts with ``{`` needs no whitespace skip.
_SCAN = json.JSONDecoder().scan_once
#: What ``json.loads`` accepts after the value (JSON whitespace); the common line endings.
_LINE_ENDS = ("", "\n", "\r\n")
#: Records per chunk.
CHUNK = 2048


def _loads(path: str, lineno: int, line: str) -> Any:
    """``json.loads(line)`` with the located errors of :func:`traces.jsonl.iter_json_lines`."""
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise TraceFormatError(path, lineno, None, f"invalid JSON ({exc.msg})") from None
    except RecursionError:
        raise TraceFormatError(path, lineno, None, "invalid JSON (nested too deeply)") from None


def iter_json_chunks(
    source: TraceInput | str | Path, limit: int | None = None, size: int | None = None
) -> Iterator[list[tuple[int, Any]]]:
    """Lists of up to ``size`` ``(line_number, object)`` pairs: the records
    :func:`~traces.jsonl.iter_json_lines` yields, the same objects and the same errors.

    An error in the input (bad JSON, undecodable bytes) comes after the records before it have
    been handed over, so a reader checking those still reports the first bad line first.
    """
    with opened(source) as inp:
        if limit is not None and limit <= 0:
            return
        yield from record_chunks(_records(inp, limit), size or CHUNK)


def iter_line_chunks(
    source: TraceInput | str | Path, limit: int | None = None, size: int | None = None
) -> Iterator[list[tuple[int, str]]]:
    """:func:`iter_json_chunks`' chunks with each record's line text instead of its object:
    ``(line_number, text)`` of every line that is not blank, the same errors of the input
    (undecodable bytes, corrupt gzip, no record at all) raised after the lines before them.
    :func:`parse_records` turns a chunk into :func:`iter_json_chunks`' records."""
    with opened(source) as inp:
        if limit is not None and limit <= 0:
            return
        yield from record_chunks(_record_lines(inp, limit), size or CHUNK)


def _record_lines(inp: TraceInput, limit: int | None) -> Iterator[tuple[int, str]]:
    """:func:`_records` without the parsing: the lines that hold a record."""
    n = 0
    for lineno, line in inp.lines():
        if line[:1] != "{" and not line.strip():
            continue
        n += 1
        yield lineno, line
        if limit is not None and n >= limit:
            return
    if n == 0:
        raise TraceFormatError(inp.name, None, None, "empty trace: no records")


def parse_records(path: str, lines: list[tuple[int, str]]) -> tuple[list[tuple[int, Any]], Exception | None]:
    """The ``(line_number, object)`` records of :func:`iter_line_chunks`' ``lines``, up to the
    first line that is not JSON, and that line's located error (None when every line parses):
    the caller checks the records before the bad line first, as :func:`iter_json_chunks` has them."""
    records: list[tuple[int, Any]] = []
    for lineno, line in lines:
        obj: Any = None
        end = -1
        if line[:1] == "{":
            try:
                obj, end = _SCAN(line, 0)
            except (StopIteration, ValueError, RecursionError):
                end = -1
        if end < 0 or line[end:] not in _LINE_ENDS:
            try:
                obj = _loads(path, lineno, line)
            except TraceFormatError as exc:
                return records, exc
        records.append((lineno, obj))
    return records, None


def _records(inp: TraceInput, limit: int | None) -> Iterator[tuple[int, Any]]:
    """:func:`~traces.jsonl.iter_json_lines`'s loop, with the scanner called directly."""
    n = 0
    for lineno, line in inp.lines():
        obj: Any = None
        end = -1
        if line[:1] == "{":
            try:
                obj, end = _SCAN(line, 0)
            except (StopIteration, ValueError, RecursionError):
                end = -1
        if end < 0 or line[end:] not in _LINE_ENDS:
            if not line.strip():
                continue
            obj = _loads(inp.name, lineno, line)
        n += 1
        yield lineno, obj
        if limit is not None and n >= limit:
            return
    if n == 0:
        raise TraceFormatError(inp.name, None, None, "empty trace: no records")
