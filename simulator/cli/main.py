"""Entry point of the ``kvplan`` console script."""

from __future__ import annotations

from typing import Any

import typer
import typer.core

from simulator.cli import (
    bench_multiturn_cmd,
    bound_cmd,
    cache_replay_cmd,
    demo_cmd,
    gpu_replay_cmd,
    ops_cmd,
    pools_cmd,
    report_cmd,
    run_cmd,
    step_replay_cmd,
    sweep_cmd,
    trace_cmd,
)


class OneLineErrors(typer.core.TyperGroup):
    """The ``kvplan`` group, printing a malformed command line (unknown option, bad choice, value
    of the wrong type) as one ``kvplan: error:`` line with the help hint, exit status 2 (click's
    usage error), instead of a multi-line panel: the same shape as every other kvplan error."""

    def invoke(self, ctx: typer.Context) -> Any:
        try:
            return super().invoke(ctx)
        except typer.TyperException as exc:
            # click's UsageError family (typer re-exports only BadParameter): exit status 2.
            if getattr(exc, "exit_code", None) != 2 or not hasattr(exc, "format_message"):
                raise
            exc_ctx = getattr(exc, "ctx", None)
            where = exc_ctx.command_path if exc_ctx is not None else "kvplan"
            typer.echo(f"kvplan: error: {exc.format_message()} (see '{where} --help')", err=True)
            raise typer.Exit(code=2) from None


app = typer.Typer(
    cls=OneLineErrors,
    name="kvplan",
    help="Trace-driven KV-cache simulator and capacity planner for SGLang (hybrid SWA + HiCache).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(trace_cmd.app, name="trace")
app.add_typer(ops_cmd.app, name="ops")
app.command("pools")(pools_cmd.pools)
app.command("cache-replay")(cache_replay_cmd.cache_replay)
app.command("demo")(demo_cmd.demo)
app.command("run")(run_cmd.run)
app.command("bench-multiturn")(bench_multiturn_cmd.bench_multiturn)
app.command("sweep")(sweep_cmd.sweep)
app.command("bound")(bound_cmd.bound)
app.command("step-replay")(step_replay_cmd.step_replay)
app.command("gpu-replay")(gpu_replay_cmd.gpu_replay)
app.command("report")(report_cmd.report)

if __name__ == "__main__":  # pragma: no cover
    app()
