"""``load_trace``: pick the reader from the path and the first record, or from ``fmt=``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from traces.continuation import ContinuationMode
from traces.errors import TraceFormatError
from traces.jsonl import open_text
from traces.readers.azure import read_azure
from traces.readers.dynamo import read_dynamo_events
from traces.readers.mooncake import DEFAULT_BLOCK_SIZE, read_mooncake
from traces.readers.ragpulse import TRACE_FILE, read_ragpulse
from traces.readers.tokens import read_token_jsonl
from traces.schema import Trace

#: Format names accepted by ``fmt=`` and ``--format``.
FORMATS: tuple[str, ...] = ("mooncake", "ragpulse", "azure", "dynamo-events", "tokens", "parquet")


def detect_format(path: str | Path) -> str:
    """Name the format of ``path`` from its first bytes / first record."""
    p = Path(path)
    if p.is_dir():
        if (p / TRACE_FILE).exists():
            return "ragpulse"
        raise TraceFormatError(str(p), None, None, f"a directory, but no RAGPulse {TRACE_FILE} inside")
    with open(p, "rb") as fh:
        if fh.read(4) == b"PAR1":
            return "parquet"
    first = ""
    with open_text(p) as fh:
        for line in fh:
            if line.strip():
                first = line.strip()
                break
    if not first:
        raise TraceFormatError(str(p), None, None, "empty trace: no records")
    if first.replace(" ", "").startswith("TIMESTAMP,ContextTokens"):
        return "azure"
    try:
        obj = json.loads(first)
    except json.JSONDecodeError:
        raise TraceFormatError(
            str(p),
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
    raise TraceFormatError(str(p), None, None, f"unknown trace format; pass one of {', '.join(FORMATS)}")


def load_trace(
    path: str | Path,
    fmt: str | None = None,
    block_size: int | None = None,
    continuation: ContinuationMode = "reuse-output",
) -> Trace:
    """Read any supported trace. ``block_size`` applies to Mooncake hash ids (default 512)."""
    from traces.parquet import read_parquet

    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such file or directory")
    fmt = fmt or detect_format(p)
    readers: dict[str, Callable[[], Trace]] = {
        "mooncake": lambda: read_mooncake(p, block_size or DEFAULT_BLOCK_SIZE, continuation),
        "ragpulse": lambda: read_ragpulse(p),
        "azure": lambda: read_azure(p),
        "dynamo-events": lambda: read_dynamo_events(p, continuation),
        "tokens": lambda: read_token_jsonl(p),
        "parquet": lambda: read_parquet(p),
    }
    if fmt not in readers:
        raise ValueError(f"unknown trace format {fmt!r}; known: {', '.join(FORMATS)}")
    return readers[fmt]()
