"""Canonical traces, readers for public trace formats, generators and statistics.

Main entry points: :func:`load_trace` (any supported file), :func:`generate_bench_multiturn`,
:func:`write_parquet` / :func:`read_parquet`, :func:`trace_stats`. A :class:`Trace` has a request
table (``trace.requests``) and content; ``trace.sequence_pages(page_size)`` gives exact page ids.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import simulator  # noqa: F401  (installs the compiled-module finder: traces.page_fill is compiled)

# Each public name and the module that defines it; imported on first use (PEP 562), so that
# ``traces.errors`` and the CLI's start-up do not pay for pandas and pyarrow (issue 14).
_EXPORTS = {
    "BenchMultiturnLoop": "traces.closed_loop",
    "ClosedLoop": "traces.closed_loop",
    "SequentialReplay": "traces.closed_loop",
    "TraceFormatError": "traces.errors",
    "TraceWarning": "traces.errors",
    "BenchMultiturnArgs": "traces.generators.bench_multiturn",
    "generate_bench_multiturn": "traces.generators.bench_multiturn",
    "FORMATS": "traces.load",
    "detect_format": "traces.load",
    "load_trace": "traces.load",
    "read_parquet": "traces.parquet",
    "write_parquet": "traces.parquet",
    "REQUEST_COLUMNS": "traces.schema",
    "BlockContent": "traces.schema",
    "Content": "traces.schema",
    "TokenContent": "traces.schema",
    "Trace": "traces.schema",
    "DEFAULT_PAGE_SIZE": "traces.stats",
    "infinite_cache_matched": "traces.stats",
    "trace_stats": "traces.stats",
}

if TYPE_CHECKING:
    from traces.closed_loop import BenchMultiturnLoop, ClosedLoop, SequentialReplay
    from traces.errors import TraceFormatError, TraceWarning
    from traces.generators.bench_multiturn import BenchMultiturnArgs, generate_bench_multiturn
    from traces.load import FORMATS, detect_format, load_trace
    from traces.parquet import read_parquet, write_parquet
    from traces.schema import REQUEST_COLUMNS, BlockContent, Content, TokenContent, Trace
    from traces.stats import DEFAULT_PAGE_SIZE, infinite_cache_matched, trace_stats


def __getattr__(name: str) -> Any:
    """A public name (imported from its module now), or a submodule not yet imported."""
    module = _EXPORTS.get(name)
    if module is None:
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "BenchMultiturnArgs",
    "BenchMultiturnLoop",
    "BlockContent",
    "ClosedLoop",
    "Content",
    "DEFAULT_PAGE_SIZE",
    "FORMATS",
    "REQUEST_COLUMNS",
    "SequentialReplay",
    "TokenContent",
    "Trace",
    "TraceFormatError",
    "TraceWarning",
    "detect_format",
    "generate_bench_multiturn",
    "infinite_cache_matched",
    "load_trace",
    "read_parquet",
    "trace_stats",
    "write_parquet",
]
