"""``kvplan ops``: inspect a recorded memory-operation log (docs/op-log.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from simulator.cli.common import print_json, user_errors_exit
from simulator.oplog import read_op_log
from simulator.oplog_stats import op_log_stats

app = typer.Typer(help="Inspect memory-operation logs (kvplan run --record-ops).", no_args_is_help=True)


@app.command("stats")
@user_errors_exit
def stats(
    ops: Annotated[Path, typer.Argument(help="An op log (.npz) written with --record-ops.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Steps, records and pages by kind, page traffic and peak pool usage of one op log."""
    summary = op_log_stats(read_op_log(ops))
    if as_json:
        from simulator.provenance import provenance

        print_json({**summary, "provenance": provenance()})
        return
    table = Table(title=f"op log {ops}", show_header=False)
    for key, value in summary.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items()) or "-"
        table.add_row(key, str(value))
    Console().print(table)
