"""A run whose requests failed must not look like a success to a script: the exit status.

Every command that serves requests (``run``, ``bench-multiturn``, ``demo``, ``cache-replay``)
takes ``--max-abort-fraction`` and exits with :data:`FAILED_REQUESTS_EXIT` when more than that
fraction of its requests were aborted or rejected (README: exit statuses).
"""

from __future__ import annotations

import math
from typing import Annotated

import typer

# Not 1 (a user error before any work), 2 (usage) or 70 (a kvplan bug): the run completed and
# its report was printed, but too many of its requests failed.
FAILED_REQUESTS_EXIT = 3


def _fraction(value: float) -> float:
    if math.isnan(value) or not 0.0 <= value <= 1.0:
        raise typer.BadParameter(f"must be between 0 and 1, got {value}", param_hint="--max-abort-fraction")
    return value


MaxAbortFractionOpt = Annotated[
    float,
    typer.Option(
        "--max-abort-fraction",
        help="exit with status 3 when more than this fraction of the requests were aborted or "
        "rejected (0: any failed request fails the run; 1: never)",
        callback=_fraction,
    ),
]


def exit_if_failed(failed: int, total: int, max_fraction: float) -> None:
    """After the report: one line on stderr and exit status 3 when ``failed / total`` is over
    ``max_fraction``."""
    if failed <= 0 or total <= 0 or failed / total <= max_fraction:
        return
    typer.echo(
        f"kvplan: error: {failed} of {total} requests failed (aborted or rejected; "
        f"--max-abort-fraction {max_fraction:g}); see the report for the reasons",
        err=True,
    )
    raise typer.Exit(code=FAILED_REQUESTS_EXIT)
