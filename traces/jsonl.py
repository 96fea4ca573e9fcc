"""Line-by-line JSON reading with located errors, and the field checks every reader shares."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from traces.errors import TraceFormatError
from traces.source import TraceInput

#: The most tokens one prompt or one output may have (2**30 = 1,073,741,824), far beyond any model's
#: context, so that a whole sequence (prompt + output) still fits the 32-bit counters downstream.
MAX_TOKENS = 2**30


@contextmanager
def opened(source: TraceInput | str | Path) -> Iterator[TraceInput]:
    """``source`` itself if it is already open (the caller closes it), else a fresh input closed on exit."""
    if isinstance(source, TraceInput):
        yield source
        return
    with TraceInput(source) as inp:
        yield inp


def iter_json_lines(source: TraceInput | str | Path, limit: int | None = None) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, object)`` for every non-blank line; blank lines are not records.

    Stops after ``limit`` records (``trace head`` reads no further). Raises TraceFormatError for
    invalid JSON, undecodable or corrupt input, and for an input without any record.
    """
    n = 0
    with opened(source) as inp:
        if limit is not None and limit <= 0:
            return
        for lineno, line in inp.lines():
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TraceFormatError(inp.name, lineno, None, f"invalid JSON ({exc.msg})") from None
            except RecursionError:
                raise TraceFormatError(inp.name, lineno, None, "invalid JSON (nested too deeply)") from None
            n += 1
            yield lineno, obj
            if limit is not None and n >= limit:
                return
        if n == 0:
            raise TraceFormatError(inp.name, None, None, "empty trace: no records")


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


def length_field(path: str, line: int, obj: dict, key: str, where: str | None = None) -> int:
    """A token count: an integer in [1, MAX_TOKENS] (empty prompts and outputs cannot be served)."""
    value = obj.get(key)
    if type(value) is int and 1 <= value <= MAX_TOKENS:  # the common case, without further calls
        return value
    value = int_field(path, line, obj, key, 1, where)
    return check_max(path, line, where or key, value)


def check_max(path: str, line: int | None, name: str, value: int, maximum: int = MAX_TOKENS) -> int:
    if value > maximum:
        raise TraceFormatError(path, line, name, f"must be <= {maximum:,} (2**30 tokens), got {value:,}")
    return value


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
    value = obj.get(key)
    if type(value) is float and value - value == 0.0:  # finite (inf - inf and nan - nan are nan)
        return value
    value = get_field(path, line, obj, key, where)
    if isinstance(value, bool):
        raise TraceFormatError(path, line, where or key, f"must be a number, got bool {value!r}")
    if not isinstance(value, (int, float, str)):
        raise TraceFormatError(path, line, where or key, f"must be a number, got {type(value).__name__}")
    try:
        number = float(value)
    except ValueError:
        raise TraceFormatError(path, line, where or key, f"must be a number, got {value!r}") from None
    except OverflowError:
        number = float("inf")
    if not math.isfinite(number):
        raise TraceFormatError(path, line, where or key, f"must be a finite number, got {_short(value)}")
    return number


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"


def hash_id_list(
    path: str, line: int, obj: dict, key: str, n_in: int, block_size: int, where: str | None = None
) -> list:
    """The list of block hash ids of one record: one per started block, no booleans among them."""
    name = where or key
    ids = get_field(path, line, obj, key, where)
    if not isinstance(ids, list):
        raise TraceFormatError(path, line, name, f"must be a list of integers, got {type(ids).__name__}")
    want = -(-n_in // block_size)
    if len(ids) != want:
        raise TraceFormatError(
            path,
            line,
            name,
            f"has {len(ids)} ids but the input length {n_in} needs ceil({n_in}/{block_size}) = {want}",
        )
    # ``True in ids`` is a C-level scan that also matches the integer 1; only then look per element
    if (True in ids or False in ids) and any(type(x) is bool for x in ids):
        k = next(k for k, x in enumerate(ids) if type(x) is bool)
        raise TraceFormatError(path, line, f"{name}[{k}]", f"must be an integer, got bool {ids[k]!r}")
    return ids
