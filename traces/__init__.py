"""Canonical traces, readers for public trace formats, generators and statistics.

Main entry points: :func:`load_trace` (any supported file), :func:`generate_bench_multiturn`,
:func:`write_parquet` / :func:`read_parquet`, :func:`trace_stats`. A :class:`Trace` has a request
table (``trace.requests``) and content; ``trace.sequence_pages(page_size)`` gives exact page ids.
"""

from traces.closed_loop import BenchMultiturnLoop, ClosedLoop, SequentialReplay
from traces.errors import TraceFormatError, TraceWarning
from traces.generators.bench_multiturn import BenchMultiturnArgs, generate_bench_multiturn
from traces.load import FORMATS, detect_format, load_trace
from traces.parquet import read_parquet, write_parquet
from traces.schema import REQUEST_COLUMNS, BlockContent, Content, TokenContent, Trace
from traces.stats import DEFAULT_PAGE_SIZE, infinite_cache_matched, trace_stats

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
