"""Entry point of the ``kvplan`` console script."""

from __future__ import annotations

import typer

from simulator.cli import (
    bench_multiturn_cmd,
    cache_replay_cmd,
    demo_cmd,
    ops_cmd,
    pools_cmd,
    run_cmd,
    trace_cmd,
)

app = typer.Typer(
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

if __name__ == "__main__":  # pragma: no cover
    app()
