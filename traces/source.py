"""One open trace input, read once: a regular file, ``-`` (stdin), a pipe or a FIFO, plain or gzip.

A pipe can be read only once, so nothing here reopens the input: the first bytes are peeked to
recognise gzip, parquet and the formats kvplan cannot read (bz2, zstd, xz, zip, UTF-16), the first
record is peeked for format detection, and the same stream is then handed to the reader. Lines are
decoded one by one, so a decode or decompression error names the line where it happened.
"""

from __future__ import annotations

import gzip
import io
import os
import stat
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from traces.errors import TraceFormatError

STDIN = "-"
_BOM = "\ufeff"
#: Leading bytes of inputs kvplan does not read, and what they are.
_REFUSED_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"BZh", "bz2-compressed; decompress it first (kvplan reads plain text or gzip)"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed; decompress it first (kvplan reads plain text or gzip)"),
    (b"\xfd7zXZ\x00", "xz-compressed; decompress it first (kvplan reads plain text or gzip)"),
    (b"PK\x03\x04", "a zip archive; extract the trace first"),
    (b"\xff\xfe\x00\x00", "UTF-32 text; convert it to UTF-8"),  # before UTF-16: same first 2 bytes
    (b"\x00\x00\xfe\xff", "UTF-32 text; convert it to UTF-8"),
    (b"\xff\xfe", "UTF-16 text; convert it to UTF-8"),
    (b"\xfe\xff", "UTF-16 text; convert it to UTF-8"),
)
_GZIP_ERRORS = (OSError, EOFError, zlib.error)


class _Prefixed(io.RawIOBase):
    """Bytes already read (the peek) followed by the rest of the underlying stream."""

    def __init__(self, head: bytes, rest: BinaryIO):
        self._head = head
        self._rest = rest

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:  # type: ignore[override]
        if self._head:
            n = min(len(buf), len(self._head))
            buf[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._rest.read1(len(buf)) if hasattr(self._rest, "read1") else self._rest.read(len(buf))
        buf[: len(data)] = data
        return len(data)


def is_stdin(path: str | Path) -> bool:
    return str(path) == STDIN


class TraceInput:
    """An input opened once. ``kind`` is "parquet" or "text"; text inputs stream decoded lines."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.name = "<stdin>" if is_stdin(path) else str(path)
        if is_stdin(path):
            self._file: BinaryIO = sys.stdin.buffer
            self._owned = False
        else:
            self._file = open(self.path, "rb")  # noqa: SIM115 - closed by close()
            self._owned = True
        self.regular = not is_stdin(path) and stat.S_ISREG(os.fstat(self._file.fileno()).st_mode)
        head = self._file.read(8)
        for magic, what in _REFUSED_MAGIC:
            if head.startswith(magic):
                self.close()
                raise TraceFormatError(self.name, None, None, f"the input is {what}")
        self.kind = "parquet" if head.startswith(b"PAR1") else "text"
        self.gzip = head.startswith(b"\x1f\x8b")
        self._head = head
        self._lines: Iterator[bytes] | None = None
        self._pending: list[tuple[int, str]] = []
        self._lineno = 0

    def __enter__(self) -> TraceInput:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._owned:
            self._file.close()

    def binary(self) -> BinaryIO:
        """A seekable binary file of the whole input (parquet needs its footer)."""
        if self.regular:
            self._file.seek(0)
            return self._file
        return io.BytesIO(self._head + self._file.read())

    def _raw_lines(self) -> Iterator[bytes]:
        if self.regular:
            self._file.seek(0)
            stream: BinaryIO = self._file
        else:
            stream = io.BufferedReader(_Prefixed(self._head, self._file), 1 << 16)  # type: ignore[assignment]
        return iter(gzip.GzipFile(fileobj=stream, mode="rb") if self.gzip else stream)

    def _gzip_error(self, exc: BaseException) -> TraceFormatError:
        return TraceFormatError(
            self.name, self._lineno + 1, None, f"corrupt gzip data ({exc}); the trace is cut here"
        )

    def _decode(self, raw: bytes) -> str:
        """``raw`` as UTF-8 text (NUL bytes refused); ``self._lineno`` is already its number."""
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            bad = raw[exc.start : exc.start + 1]
            raise TraceFormatError(
                self.name, self._lineno, None, f"not UTF-8 text (byte {exc.start}: {bad!r})"
            ) from None
        if "\x00" in text:
            raise TraceFormatError(self.name, self._lineno, None, "binary data (NUL bytes), not a text trace")
        return text

    def _next_line(self) -> str | None:
        """The next decoded line (the BOM of line 1 skipped), or None at the end."""
        if self._lines is None:
            self._lines = self._raw_lines()
        try:
            raw = next(self._lines, None)
        except _GZIP_ERRORS as exc:
            raise self._gzip_error(exc) from None
        if raw is None:
            return None
        self._lineno += 1
        text = self._decode(raw)
        if self._lineno == 1 and text.startswith(_BOM):
            text = text[1:]
        return text

    def first_record(self) -> str | None:
        """The first non-blank line, stripped, without consuming it (for format detection)."""
        for _, text in self._pending:
            if text.strip():
                return text.strip()
        while True:
            text = self._next_line()
            if text is None:
                return None
            self._pending.append((self._lineno, text))
            if text.strip():
                return text.strip()

    def lines(self) -> Iterator[tuple[int, str]]:
        """``(line_number, text)`` for every line, blank ones included, from the start."""
        if self.kind == "parquet":
            raise TraceFormatError(
                self.name,
                None,
                None,
                "a parquet file, not a text trace; pass --format parquet or no --format",
            )
        while self._pending:
            yield self._pending.pop(0)
        if self._lineno == 0 and (text := self._next_line()) is not None:  # line 1: the BOM check
            yield self._lineno, text
        if self._lines is None:
            return
        lines = self._lines
        while True:  # _next_line inlined for speed: the BOM check only concerns line 1
            try:
                raw = next(lines, None)
            except _GZIP_ERRORS as exc:
                raise self._gzip_error(exc) from None
            if raw is None:
                return
            self._lineno += 1
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                text = self._decode(raw)  # raises the located error
            if "\x00" in text:
                self._decode(raw)
            yield self._lineno, text
