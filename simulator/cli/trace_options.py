"""The trace-reading options that every command serving a trace takes, declared once."""

from __future__ import annotations

from typing import Annotated

import typer

from simulator.cli.server_flags import choice_check
from traces.load import FORMATS

FormatOpt = Annotated[
    str | None,
    typer.Option(
        "--format",
        help=f"trace format (default: detected): {', '.join(FORMATS)}",
        callback=choice_check(lambda: FORMATS, "--format"),
    ),
]
BlockSizeOpt = Annotated[int | None, typer.Option("--block-size", help="Mooncake hash-id block size")]
LimitOpt = Annotated[int | None, typer.Option("--limit", help="serve only the first N requests")]
TimeScaleOpt = Annotated[float, typer.Option("--time-scale", help="multiply the trace's inter-arrival times")]
RequestRateOpt = Annotated[
    float | None, typer.Option("--request-rate", help="Poisson arrivals at this rate (req/s)")
]
ThinkTimeOpt = Annotated[
    float, typer.Option("--think-time", help="seconds between a turn's finish and its next turn")
]
