"""Line-by-line JSON reading with located errors, and the field checks every reader shares."""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from traces.errors import TraceFormatError


def open_text(path: str | Path) -> io.TextIOBase:
    """Open a text file, transparently gunzipping ``.gz`` files (detected by magic bytes)."""
    p = Path(path)
    with open(p, "rb") as fh:
        magic = fh.read(2)
    if magic == b"\x1f\x8b":
        return io.TextIOWrapper(gzip.open(p, "rb"), encoding="utf-8")
    return open(p, encoding="utf-8")


def iter_json_lines(path: str | Path) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, object)`` for every non-blank line; blank lines are not records.

    Raises TraceFormatError for invalid JSON and for a file without any record.
    """
    n = 0
    with open_text(path) as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TraceFormatError(str(path), lineno, None, f"invalid JSON ({exc.msg})") from None
            n += 1
            yield lineno, obj
    if n == 0:
        raise TraceFormatError(str(path), None, None, "empty trace: no records")


def require_object(path: str, line: int, obj: Any) -> dict:
    if not isinstance(obj, dict):
        raise TraceFormatError(path, line, None, f"expected a JSON object, got {type(obj).__name__}")
    return obj


def get_field(path: str, line: int, obj: dict, key: str, where: str | None = None) -> Any:
    """``obj[key]`` or a located 'missing' error (``where`` is the dotted name to report)."""
    if key not in obj:
        raise TraceFormatError(path, line, where or key, "missing")
    return obj[key]


def int_field(path: str, line: int, obj: dict, key: str, minimum: int = 0, where: str | None = None) -> int:
    """A required integer field (bools and floats are refused) that is at least ``minimum``."""
    value = get_field(path, line, obj, key, where)
    return check_int(path, line, where or key, value, minimum)


def check_int(path: str, line: int, name: str, value: Any, minimum: int | None = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceFormatError(path, line, name, f"must be an integer, got {type(value).__name__} {value!r}")
    if minimum is not None and value < minimum:
        raise TraceFormatError(path, line, name, f"must be >= {minimum}, got {value}")
    return value


def locate_bad_int(path: str, line: int, name: str, values: Any, minimum: int | None = None) -> None:
    """Find and report the first element of ``values`` that is not an acceptable integer."""
    if not isinstance(values, list):
        raise TraceFormatError(path, line, name, f"must be a list of integers, got {type(values).__name__}")
    for k, v in enumerate(values):
        check_int(path, line, f"{name}[{k}]", v, minimum)
    raise TraceFormatError(path, line, name, "integer out of range")


def number_field(path: str, line: int, obj: dict, key: str, where: str | None = None) -> float:
    """A required finite number, or a string holding one (RAGPulse writes timestamps as strings)."""
    value = get_field(path, line, obj, key, where)
    if isinstance(value, bool):
        raise TraceFormatError(path, line, where or key, f"must be a number, got bool {value!r}")
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise TraceFormatError(path, line, where or key, f"must be a number, got {value!r}") from None
    if not isinstance(value, (int, float)) or value != value or value in (float("inf"), float("-inf")):
        raise TraceFormatError(path, line, where or key, f"must be a finite number, got {value!r}")
    return float(value)
