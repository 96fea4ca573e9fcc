"""Entry point of the ``kvplan`` console script."""

from __future__ import annotations

import atexit
import gc
import os

# No BLAS worker threads in the CLI process (issue 14). numpy's OpenBLAS starts one worker per
# core when numpy is imported, and each spins (sched_yield) for about 2**28 cycles (~0.1 s of CPU)
# before it sleeps; a simulation makes no threaded BLAS call (exec_blas is never reached by
# `kvplan run`), so that start-up spin was pure waste (3.5% of a 12k-request run's samples). Set
# before anything imports numpy; the library itself leaves the environment alone.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# Importing the CLI (typer, click) builds only long-lived objects: the cyclic collector would
# walk them some twenty times for nothing (issue 14). It is off while they import, and the
# group's main() keeps it off until a subcommand is resolved (simulator/cli/lazy.py).
_COLLECTOR_WAS_ON = gc.isenabled()
gc.disable()
try:
    from typing import Any

    import typer

    from simulator.cli.lazy import LazyCommand, LazyGroup
finally:
    if _COLLECTOR_WAS_ON:
        gc.enable()

# At exit the interpreter runs one last full collection over every object the run left (the
# tree, the requests, the recorder's columns): some 5% of a `kvplan run` process (issue 14), to
# free memory the process is about to hand back anyway. Parking everything in the permanent
# generation first makes that walk empty. Registered here, so it runs at the exit of the
# `kvplan` process (atexit handlers run before the interpreter's final collection); every output
# file is already complete then (written to a temporary name and renamed before a command returns).
atexit.register(gc.freeze)

# The subcommands in `kvplan --help` order: name, "module:attribute" (a command function or a
# typer.Typer), and the first paragraph of its help. A module is imported only when its command
# runs (issue 14); to add a command, append one line (tests/test_cli_lazy.py checks the help).
COMMANDS = (
    LazyCommand(
        "pools",
        "simulator.cli.pools_cmd:pools",
        "Print SGLang's full / SWA / host pool sizes for a model, GPU and flags.",
    ),
    LazyCommand(
        "cache-replay",
        "simulator.cli.cache_replay_cmd:cache_replay",
        "Serve WORKLOAD through the hybrid SWA radix cache exactly as SGLang does at batch size 1.",
    ),
    LazyCommand(
        "demo",
        "simulator.cli.demo_cmd:demo",
        "Trace stats, SGLang's pool sizing and the simulated server's cache hit rate on a bundled default.",
    ),
    LazyCommand(
        "run",
        "simulator.cli.run_cmd:run",
        "Serve TRACE through the simulated SGLang server; print bench_multiturn's summary.",
    ),
    LazyCommand(
        "bench-multiturn",
        "simulator.cli.bench_multiturn_cmd:bench_multiturn",
        "Run bench_multiturn.py's workload and sender against the simulated SGLang server.",
    ),
    LazyCommand(
        "sweep",
        "simulator.cli.sweep_cmd:sweep",
        "Run TRACE at every point of a grid of server flags and policies; store and print the results.",
    ),
    LazyCommand(
        "bound",
        "simulator.cli.bound_cmd:bound",
        "An upper bound, often the exact optimum, on the prefix-cache hit rate any eviction policy\n"
        "reaches on --trace (batch 1, file order, device pools).",
    ),
    LazyCommand(
        "plan",
        "simulator.cli.plan_cmd:plan",
        "The cheapest GPU KV memory (and host RAM) meeting every SLO on TRACE: SGLang launch flags and why.",
    ),
    LazyCommand(
        "report",
        "simulator.cli.report_cmd:report",
        "Write SOURCE's report to --out: heatmaps, hit rate against capacity with the optimal bound,\n"
        "token usage over time, Pareto frontiers, the top configurations and the launch flags.",
    ),
    LazyCommand(
        "step-replay",
        "simulator.cli.step_replay_cmd:step_replay",
        "Replay WORKLOAD one scheduler pass per step, as ``drive_scheduler.py`` replays it in SGLang.",
    ),
    LazyCommand(
        "gpu-replay",
        "simulator.cli.gpu_replay_cmd:gpu_replay",
        "Replay OPS step by step on the pools of one TP rank; time each step's memory operations.",
    ),
    LazyCommand("trace", "simulator.cli.trace_cmd:app", "Inspect and convert traces."),
    LazyCommand(
        "ops", "simulator.cli.ops_cmd:app", "Inspect memory-operation logs (kvplan run --record-ops)."
    ),
)


class OneLineErrors(LazyGroup):
    """The ``kvplan`` group, printing a malformed command line (unknown option, bad choice, value
    of the wrong type) as one ``kvplan: error:`` line with the help hint, exit status 2 (click's
    usage error), instead of a multi-line panel: the same shape as every other kvplan error."""

    lazy_commands = COMMANDS

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


@app.callback()
def _kvplan() -> None:
    """The group itself does nothing; its subcommands are in ``COMMANDS``."""


if __name__ == "__main__":  # pragma: no cover
    app()
