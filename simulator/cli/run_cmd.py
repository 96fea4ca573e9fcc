"""``kvplan run --trace T``: serve a trace through the simulated SGLang server and print the results.

The server flags are declared once, in ``server_flags.py``; :func:`execute` (a wrapper over
:func:`simulator.run.run_config` that prints and writes the results) is shared with
``kvplan bench-multiturn`` and ``kvplan demo``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from simulator.cli.common import DEFAULT_TRACE, JsonOpt, OutOpt, ProgressOpt, print_json, user_errors_exit
from simulator.cli.failed_runs import MaxAbortFractionOpt, exit_if_failed
from simulator.cli.server_flags import ALL_FLAGS, server_options
from simulator.cli.trace_options import BlockSizeOpt, FormatOpt, LimitOpt, TimeScaleOpt
from simulator.engine.config import SimConfig
from simulator.run import RunResult

_D = SimConfig()  # the workload options' defaults come from the config too

RecordOpsOpt = Annotated[
    Path | None,
    typer.Option(
        "--record-ops",
        help="write every memory operation (page ids, per step) to this op log (.npz; "
        "docs/op-log.md, `kvplan ops stats`); needs --tombstone unified",
    ),
]


@contextmanager
def _progress(total: int, enabled: bool) -> Iterator[Callable[[int], None] | None]:
    """A transient rich progress bar on stderr, updated at most ~200 times per run."""
    if not enabled or total <= 0:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    step = max(1, total // 200)
    with Progress(
        TextColumn("simulating"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
        redirect_stdout=False,
        redirect_stderr=False,
    ) as bar:
        task = bar.add_task("simulating", total=total)

        def update(n: int) -> None:
            if n % step == 0 or n == total:
                bar.update(task, completed=n)

        yield update


def execute(
    trace: Any,
    cfg: SimConfig,
    *,
    out: Path | None,
    as_json: bool,
    per_round: bool,
    progress: bool = True,
    record_ops: Path | None = None,
    max_abort_fraction: float = 1.0,
) -> RunResult:
    """:func:`run_config` with the CLI around it: progress bar, ``--out`` files, then the report
    or the JSON summary.

    Decode log lines go to stdout, or to stderr with ``--json`` (stdout then holds one JSON object).
    The progress bar shows only on an interactive stderr, and not with ``--json`` or ``--log-decode``
    (the log lines already show progress and would tear the bar). ``record_ops``: the op log
    to write (:func:`run_config`'s). After the report, exits with status 3 when more than
    ``max_abort_fraction`` of the requests failed (:func:`exit_if_failed`).
    """
    from simulator.run import run_config

    show = progress and not as_json and not cfg.log_decode and sys.stderr.isatty()
    with _progress(len(trace), show) as update:
        result = run_config(
            trace, cfg, log_stream=sys.stderr if as_json else None, progress=update, record_ops=record_ops
        )
    if out is not None:
        result.write_outputs(out)
    if as_json:
        from simulator.provenance import provenance

        print_json({**result.summary, "provenance": provenance(trace, cfg.profile)})
    else:
        from simulator.engine.report import format_report  # the text report only (issue 14)

        typer.echo(format_report(result.summary, per_round=per_round))
    summary = result.summary
    exit_if_failed(summary["failed"], summary["requests_submitted"], max_abort_fraction)
    return result


def shows_per_round(trace: Any) -> bool:
    """bench_multiturn prints per-round metrics only with its round barrier; so does kvplan's text."""
    loop = trace.closed_loop
    if loop is None:  # an open trace: traces.closed_loop need not load (issue 14)
        return False
    from traces.closed_loop import BenchMultiturnLoop

    return isinstance(loop, BenchMultiturnLoop) and loop.enable_round_barrier


@user_errors_exit
@server_options(*ALL_FLAGS)
def run(
    trace: Annotated[
        Path, typer.Option("--trace", help="any trace kvplan reads (default: the bundled Mooncake sample)")
    ] = DEFAULT_TRACE,
    fmt: FormatOpt = None,
    block_size: BlockSizeOpt = None,
    limit: LimitOpt = None,
    time_scale: TimeScaleOpt = _D.time_scale,
    request_rate: Annotated[
        float | None,
        typer.Option(
            "--request-rate", help="Poisson arrivals at this rate (req/s) instead of the trace's times"
        ),
    ] = _D.request_rate,
    think_time: Annotated[
        float, typer.Option("--think-time", help="seconds between a turn's finish and its next turn")
    ] = _D.think_time_s,
    seed: Annotated[int, typer.Option("--seed", help="seed of every random draw of the run")] = _D.seed,
    out: OutOpt = None,
    as_json: JsonOpt = False,
    progress: ProgressOpt = True,
    record_ops: RecordOpsOpt = None,
    max_abort_fraction: MaxAbortFractionOpt = 0.0,
    *,
    server: dict[str, Any],
) -> None:
    """Serve TRACE through the simulated SGLang server; print bench_multiturn's summary."""
    from traces import load_trace

    if limit is not None and limit < 1:
        raise typer.BadParameter(f"must be >= 1, got {limit}", param_hint="--limit")
    tr = load_trace(trace, fmt=fmt, block_size=block_size)
    if limit is not None:
        tr = tr.head(limit)
    cfg = SimConfig(
        **server, time_scale=time_scale, request_rate=request_rate, think_time_s=think_time, seed=seed
    )
    execute(
        tr,
        cfg,
        out=out,
        as_json=as_json,
        per_round=shows_per_round(tr),
        progress=progress,
        record_ops=record_ops,
        max_abort_fraction=max_abort_fraction,
    )
