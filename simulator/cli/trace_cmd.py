"""``kvplan trace ...`` (owned by the traces work; replaced by the real commands)."""

import typer

app = typer.Typer(help="Inspect and convert traces.", no_args_is_help=True)
