"""Shared CLI plumbing: one-line errors instead of tracebacks, JSON output."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer

from simulator.errors import KvplanError
from traces.errors import TraceFormatError

F = TypeVar("F", bound=Callable[..., Any])

# The bundled default workload: the first 800 requests of Mooncake's arXiv trace (traces/data).
DEFAULT_TRACE = Path(__file__).resolve().parents[2] / "traces" / "data" / "mooncake_arxiv_head800.jsonl"

USER_ERRORS = (KvplanError, TraceFormatError, FileNotFoundError, IsADirectoryError, PermissionError)


def user_errors_exit(fn: F) -> F:
    """Turn our user-facing exceptions into one line on stderr and exit status 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except USER_ERRORS as exc:
            typer.echo(f"kvplan: error: {exc}", err=True)
            raise typer.Exit(code=1) from None

    return wrapper  # type: ignore[return-value]


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
