"""Shared CLI plumbing: one-line user errors, tracebacks for kvplan's own bugs, JSON output."""

from __future__ import annotations

import functools
import json
import sys
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from simulator.errors import InternalError, KvplanError
from traces.errors import TraceFormatError

F = TypeVar("F", bound=Callable[..., Any])

# The bundled default workload: the first 800 requests of Mooncake's arXiv trace (traces/data).
DEFAULT_TRACE = Path(__file__).resolve().parents[2] / "traces" / "data" / "mooncake_arxiv_head800.jsonl"

USER_ERRORS = (KvplanError, TraceFormatError, FileNotFoundError, IsADirectoryError, PermissionError)
# sysexits.h EX_SOFTWARE: an internal software error (a kvplan bug), told apart from exit 1.
INTERNAL_ERROR_EXIT = 70


def _show_warning(
    message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None
) -> None:
    """``warnings.showwarning`` for the CLI: one ``kvplan: warning: ...`` line, no source path."""
    typer.echo(f"kvplan: warning: {message}", err=True)


def user_errors_exit(fn: F) -> F:
    """Turn our user-facing exceptions (a refused flag value included) into one line on stderr and
    exit status 1; show kvplan's own bugs (``InternalError``) with their traceback and exit status 70.
    Python warnings raised meanwhile print as ``kvplan: warning: ...`` lines."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with warnings.catch_warnings():
                warnings.showwarning = _show_warning
                return fn(*args, **kwargs)
        except InternalError as exc:
            typer.echo(traceback.format_exc(), err=True, nl=False)
            typer.echo(
                f"kvplan: internal error: {type(exc).__name__}: this is a bug in kvplan, not in your "
                "input; please report it with the command line and the traceback above",
                err=True,
            )
            raise typer.Exit(code=INTERNAL_ERROR_EXIT) from None
        except USER_ERRORS as exc:
            typer.echo(f"kvplan: error: {exc}", err=True)
            raise typer.Exit(code=1) from None
        except MemoryError as exc:  # e.g. page ids of a 2**30-token sequence at page size 1 (8 GiB)
            typer.echo(
                f"kvplan: error: out of memory ({exc or 'MemoryError'}); the input needs more memory "
                "than this machine allows: use a larger --page-size, fewer or shorter requests",
                err=True,
            )
            raise typer.Exit(code=1) from None

    return wrapper  # type: ignore[return-value]


# --- output options shared by the commands that run the server ---------------------------------
OutOpt = Annotated[
    Path | None,
    typer.Option("--out", help="write requests/decode_steps/prefill_batches parquet+CSV and summary.json"),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="print one JSON object (the summary) instead of text")]
ProgressOpt = Annotated[
    bool, typer.Option("--progress/--no-progress", help="progress bar on stderr (only on a terminal)")
]


def print_json(obj: Any) -> None:
    """One JSON object on one line of stdout."""
    sys.stdout.write(json.dumps(obj, sort_keys=False, default=_json_default) + "\n")


def _json_default(o: Any) -> Any:
    import numpy as np

    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
