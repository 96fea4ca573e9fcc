"""Trace input errors that name the file, the line and the field."""

from __future__ import annotations


class TraceFormatError(ValueError):
    """A malformed trace record. The message names file, line (1-based) or row (0-based), and field."""

    def __init__(self, path: str, line: int | None, field: str | None, problem: str, row: int | None = None):
        self.path = str(path)
        self.line = line
        self.row = row  # 0-based row of a columnar file (parquet), which has no lines
        self.field = field
        self.problem = problem
        where = self.path if line is None else f"{self.path}:{line}"
        where = where if row is None else f"{where} row {row}"
        what = f"field '{field}': " if field else ""
        super().__init__(f"{where}: {what}{problem}")


class TraceWarning(UserWarning):
    """Something a reader changed on purpose (re-sorted rows, truncated content); never a silent drop."""


class TraceOutputError(TraceFormatError):
    """An output path kvplan will not write: the input itself, a link, a device, a FIFO, a directory."""

    def __init__(self, path: str, problem: str):
        super().__init__(path, None, None, problem)
