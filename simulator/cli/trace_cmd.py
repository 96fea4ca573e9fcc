"""``kvplan trace stats | convert | head``: thin wrappers over the ``traces`` package."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from simulator.cli.common import print_json, user_errors_exit
from traces import DEFAULT_PAGE_SIZE, FORMATS, Trace, load_trace, trace_stats, write_parquet
from traces.continuation import CONTINUATION_MODES
from traces.output import check_output_path
from traces.readers.ragpulse import COMPONENT_ORDER, TRACE_FILE

app = typer.Typer(help="Inspect and convert traces.", no_args_is_help=True)

TraceArg = Annotated[
    Path,
    typer.Argument(help="Trace file (or RAGPulse directory; - for stdin; pipes work); format auto-detected."),
]
FormatOpt = Annotated[
    str | None, typer.Option("--format", help=f"Force the format: {', '.join(FORMATS)}.", show_default=False)
]
BlockOpt = Annotated[
    int | None,
    typer.Option("--block-size", min=1, max=2**30, help="Tokens per hash id for Mooncake traces [512]."),
]
ContOpt = Annotated[
    str,
    typer.Option(
        "--continuation",
        help=f"How inferred continuations treat the previous output: {' | '.join(CONTINUATION_MODES)}.",
    ),
]


@contextmanager
def _warnings_to_stderr() -> Iterator[None]:
    """Reader warnings (re-sorted rows, cut content) as one 'kvplan: warning:' line each on stderr."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for w in caught:
        typer.echo(f"kvplan: warning: {w.message}", err=True)


def _load(
    trace: Path, fmt: str | None, block_size: int | None, continuation: str, limit: int | None = None
) -> Trace:
    if fmt is not None and fmt not in FORMATS:
        raise typer.BadParameter(
            f"unknown format {fmt!r}; known: {', '.join(FORMATS)}", param_hint="--format"
        )
    if continuation not in CONTINUATION_MODES:
        raise typer.BadParameter(
            f"must be one of {', '.join(CONTINUATION_MODES)}", param_hint="--continuation"
        )
    with _warnings_to_stderr():
        return load_trace(trace, fmt=fmt, block_size=block_size, continuation=continuation, limit=limit)  # type: ignore[arg-type]


def _input_files(trace: Path) -> list[Path]:
    """The files a trace argument reads (a RAGPulse directory: its trace and its tables)."""
    if trace.is_dir():
        return [trace / TRACE_FILE, *(trace / name for _, name, _ in COMPONENT_ORDER)]
    return [trace]


def _fmt_dist(d: dict[str, float]) -> str:
    return "  ".join(f"{k} {v:,.0f}" for k, v in d.items())


def _print_stats(s: dict[str, Any]) -> None:
    rate = s["request_rate_per_s"]
    span = s["time_span_s"]
    rows = [
        ("trace", f"{s['source']} ({s['content']} content)"),
        (
            "requests",
            f"{s['requests']:,}" + (f"  (closed loop: {s['closed_loop']})" if s["closed_loop"] else ""),
        ),
        (
            "time span",
            "n/a (arrivals resolved by the simulator)"
            if span is None
            else f"{span:,.1f} s, {rate:,.3f} req/s"
            if rate
            else f"{span:,.1f} s",
        ),
        ("input tokens", _fmt_dist(s["input_len"])),
        ("output tokens", _fmt_dist(s["output_len"])),
        (
            "sessions",
            f"{s['sessions']:,} ({s['multi_turn_sessions']:,} multi-turn), "
            f"{s['requests_with_parent']:,} requests with a parent, max turn {s['max_turn']}",
        ),
        ("turns/session", _fmt_dist(s["turns_per_session"])),
        (f"pages ({s['page_size']} tok)", f"{s['distinct_pages']:,} distinct"),
        (
            "infinite-cache hit",
            f"{s['infinite_cache_hit_rate']:.4f} of prompt tokens "
            f"({s['infinite_cache_hit_tokens']:,} / {s['total_input_tokens']:,}); "
            f"{s['requests_with_hit']:,} requests hit",
        ),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        typer.echo(f"{k:<{width}}  {v}")


@app.command("stats")
@user_errors_exit
def stats(
    trace: TraceArg,
    page_size: Annotated[
        int, typer.Option("--page-size", min=1, help="Page size in tokens.")
    ] = DEFAULT_PAGE_SIZE,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    fmt: FormatOpt = None,
    block_size: BlockOpt = None,
    continuation: ContOpt = "reuse-output",
) -> None:
    """Requests, arrivals, lengths, sessions, distinct pages and the infinite-cache prefix hit rate."""
    loaded = _load(trace, fmt, block_size, continuation)
    s = trace_stats(loaded, page_size)
    if as_json:
        from simulator.provenance import provenance

        print_json({**s, "provenance": provenance(loaded)})
    else:
        _print_stats(s)


@app.command("convert")
@user_errors_exit
def convert(
    trace: TraceArg,
    output: Annotated[Path, typer.Option("-o", "--output", help="Output parquet file.")],
    fmt: FormatOpt = None,
    block_size: BlockOpt = None,
    continuation: ContOpt = "reuse-output",
) -> None:
    """Convert any supported trace to the canonical parquet format (never over the input)."""
    check_output_path(output, _input_files(trace))
    t = _load(trace, fmt, block_size, continuation)
    write_parquet(t, output)
    typer.echo(f"wrote {len(t):,} requests to {output}", err=True)


@app.command("head")
@user_errors_exit
def head(
    trace: TraceArg,
    n: Annotated[int, typer.Option("-n", min=0, help="Number of requests to show.")] = 10,
    fmt: FormatOpt = None,
    block_size: BlockOpt = None,
    continuation: ContOpt = "reuse-output",
) -> None:
    """The first N requests of the file (plus block/token counts); reads no further than them."""
    t = _load(trace, fmt, block_size, continuation, limit=max(n, 1)).head(n)
    frame = t.requests.copy()
    counts = t.content.offsets[1:] - t.content.offsets[:-1]
    frame["blocks" if t.content.kind == "blocks" else "tokens"] = counts
    typer.echo(frame.to_string(index=True))
