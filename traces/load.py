"""``load_trace``: pick the reader from the path and the first record, or from ``fmt=``."""

from __future__ import annotations

import ctypes
import json
from pathlib import Path

from traces.continuation import ContinuationMode
from traces.errors import TraceFormatError
from traces.gc_pause import collector_paused
from traces.readers.mooncake import DEFAULT_BLOCK_SIZE, read_mooncake
from traces.schema import Trace
from traces.source import TraceInput, is_stdin

#: Format names accepted by ``fmt=`` and ``--format``.
FORMATS: tuple[str, ...] = ("mooncake", "ragpulse", "azure", "dynamo-events", "tokens", "parquet")


def detect_format(path: str | Path) -> str:
    """Name the format of ``path`` from its first bytes / first record."""
    p = Path(path)
    if p.is_dir():
        return _directory_format(p)
    with TraceInput(p) as inp:
        return _detect(inp)


def _directory_format(p: Path) -> str:
    from traces.readers.ragpulse import TRACE_FILE  # the other formats' readers load on use (issue 14)

    if (p / TRACE_FILE).exists():
        return "ragpulse"
    raise TraceFormatError(str(p), None, None, f"a directory, but no RAGPulse {TRACE_FILE} inside")


def _detect(inp: TraceInput) -> str:
    """The format of an open input, from its magic bytes or its first record (nothing is consumed)."""
    if inp.kind == "parquet":
        return "parquet"
    first = inp.first_record()
    if not first:
        raise TraceFormatError(inp.name, None, None, "empty trace: no records")
    if first.replace(" ", "").startswith("TIMESTAMP,ContextTokens"):
        return "azure"
    try:
        obj = json.loads(first)
    except (json.JSONDecodeError, RecursionError):
        raise TraceFormatError(
            inp.name,
            None,
            None,
            "unknown trace format (first record is not JSON or an Azure CSV header); pass --format",
        ) from None
    if isinstance(obj, dict):
        if isinstance(obj.get("event"), dict):
            return "dynamo-events"
        if "input_ids" in obj:
            return "tokens"
        if isinstance(obj.get("hash_ids"), dict):
            return "ragpulse"
        if "hash_ids" in obj:
            return "mooncake"
    raise TraceFormatError(inp.name, None, None, f"unknown trace format; pass one of {', '.join(FORMATS)}")


def load_trace(
    path: str | Path,
    fmt: str | None = None,
    block_size: int | None = None,
    continuation: ContinuationMode = "reuse-output",
    limit: int | None = None,
) -> Trace:
    """Read any supported trace, opening it once (``-`` is stdin; pipes and FIFOs work).

    ``block_size`` applies to Mooncake hash ids (None: 512). ``limit`` reads only the first records
    of the file (in file order; ``trace head``), so the rest of the input is never read.
    """
    if fmt is not None and fmt not in FORMATS:
        raise ValueError(f"unknown trace format {fmt!r}; known: {', '.join(FORMATS)}")
    with collector_paused():  # parsing builds no reference cycles (traces/gc_pause.py)
        return _load(path, fmt, block_size, continuation, limit)


def _load(
    path: str | Path,
    fmt: str | None,
    block_size: int | None,
    continuation: ContinuationMode,
    limit: int | None,
) -> Trace:
    p = Path(path)
    if not is_stdin(path) and not p.exists():
        raise FileNotFoundError(f"{p}: no such file or directory")
    if p.is_dir():
        if (fmt or "ragpulse") != "ragpulse":
            raise TraceFormatError(
                str(p), None, None, f"a directory (a RAGPulse trace), so --format {fmt} does not apply"
            )
        _directory_format(p)
        from traces.readers.ragpulse import read_ragpulse

        return read_ragpulse(p, limit)
    with TraceInput(path) as inp:
        trace = _read(inp, fmt or _detect(inp), block_size, continuation, limit)
    if len(trace) >= _TRIM_ABOVE:
        return_freed_memory()
    return trace


#: Traces of at least this many requests give the memory their reading freed back to the OS.
_TRIM_ABOVE = 1 << 16


def return_freed_memory() -> None:
    """Hand the heap pages that parsing freed back to the OS (glibc's ``malloc_trim``).

    Parsing a big file allocates and frees millions of small objects and mid-sized buffers;
    without this their pages stay in the process (hundreds of MB on a 1M-request trace) for the
    whole run. Elsewhere than glibc this does nothing.
    """
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _read_parquet(inp: TraceInput, limit: int | None) -> Trace:
    from traces.parquet import read_parquet  # pyarrow.parquet only for parquet input (issue 14)

    return read_parquet(inp, limit)


def _read(
    inp: TraceInput, fmt: str, block_size: int | None, continuation: ContinuationMode, limit: int | None
) -> Trace:
    if fmt != "parquet" and inp.kind == "parquet":
        raise TraceFormatError(
            inp.name, None, None, f"a parquet file, not {fmt}; pass --format parquet or no --format"
        )
    if fmt == "mooncake":
        return read_mooncake(
            inp, DEFAULT_BLOCK_SIZE if block_size is None else block_size, continuation, limit
        )
    # the other readers load with their first trace (issue 14: start-up)
    if fmt == "ragpulse":
        from traces.readers.ragpulse import read_ragpulse

        return read_ragpulse(inp, limit)
    if fmt == "azure":
        from traces.readers.azure import read_azure

        return read_azure(inp, limit)
    if fmt == "dynamo-events":
        from traces.readers.dynamo import read_dynamo_events

        return read_dynamo_events(inp, continuation, limit)
    if fmt == "tokens":
        from traces.readers.tokens import read_token_jsonl

        return read_token_jsonl(inp, limit)
    return _read_parquet(inp, limit)
