"""``kvplan bench-multiturn``: SGLang's ``benchmark/hicache/bench_multiturn.py`` against the simulator.

The workload flags are the script's (same names, same defaults); the server flags are SGLang's
launch flags, shared with ``kvplan run``. The script's ``--disable-auto-run`` is accepted and
changes nothing: kvplan always runs the single ``--request-rate`` (the script's default sweep
over 16 ... 1 req/s is one kvplan run per rate).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from simulator.cli.common import JsonOpt, OutOpt, ProgressOpt, user_errors_exit
from simulator.cli.failed_runs import MaxAbortFractionOpt
from simulator.cli.run_cmd import RecordOpsOpt, execute
from simulator.cli.server_flags import ALL_FLAGS, server_options
from simulator.engine.config import SimConfig
from simulator.errors import ConfigError
from traces import Trace
from traces.generators.bench_multiturn import BenchMultiturnArgs, generate_bench_multiturn

_B = BenchMultiturnArgs()  # the script's defaults, from the generator (one list of defaults)


@user_errors_exit
@server_options(*ALL_FLAGS)
def bench_multiturn(
    num_clients: Annotated[int, typer.Option("--num-clients", help="number of clients")] = _B.num_clients,
    num_rounds: Annotated[int, typer.Option("--num-rounds", help="rounds per client")] = _B.num_rounds,
    min_rounds: Annotated[
        int, typer.Option("--min-rounds", help="min rounds per client (0 = --num-rounds)")
    ] = _B.min_rounds,
    max_rounds: Annotated[
        int, typer.Option("--max-rounds", help="max rounds per client (0 = --num-rounds)")
    ] = _B.max_rounds,
    request_length: Annotated[
        int, typer.Option("--request-length", help="tokens of each first-round prompt")
    ] = _B.request_length,
    output_length: Annotated[
        int, typer.Option("--output-length", help="output tokens of each request")
    ] = _B.output_length,
    sub_question_input_length: Annotated[
        int,
        typer.Option(
            "--sub-question-input-length", help="tokens of each later question (0 = request length)"
        ),
    ] = _B.sub_question_input_length,
    range_ratio: Annotated[
        float, typer.Option("--range-ratio", help="lengths drawn in [L * ratio, L] (1.0 = fixed)")
    ] = _B.range_ratio,
    request_rate: Annotated[
        float, typer.Option("--request-rate", help="sender rate in requests per second")
    ] = _B.request_rate,
    distribution: Annotated[
        str, typer.Option("--distribution", help="sender sleeps: poisson or uniform")
    ] = _B.distribution,
    max_parallel: Annotated[
        int, typer.Option("--max-parallel", help="most requests in flight")
    ] = _B.max_parallel,
    ready_queue_policy: Annotated[
        str, typer.Option("--ready-queue-policy", help="random or fifo")
    ] = _B.ready_queue_policy,
    enable_round_barrier: Annotated[
        bool,
        typer.Option(
            "--enable-round-barrier", help="send round r+1 after all of round r, a heartbeat and 10 s"
        ),
    ] = False,
    disable_random_sample: Annotated[
        bool, typer.Option("--disable-random-sample", help="synthetic token prompts instead of ShareGPT")
    ] = False,
    disable_auto_run: Annotated[
        bool, typer.Option("--disable-auto-run", help="accepted for compatibility; kvplan runs one rate")
    ] = False,
    seed: Annotated[int, typer.Option("--seed", help="the script's --seed (random and numpy)")] = _B.seed,
    out: OutOpt = None,
    as_json: JsonOpt = False,
    progress: ProgressOpt = True,
    record_ops: RecordOpsOpt = None,
    max_abort_fraction: MaxAbortFractionOpt = 0.0,
    *,
    server: dict[str, Any],
) -> None:
    """Run bench_multiturn.py's workload and sender against the simulated SGLang server."""
    args = BenchMultiturnArgs(
        num_clients=num_clients,
        max_parallel=max_parallel,
        request_length=request_length,
        output_length=output_length,
        num_rounds=num_rounds,
        min_rounds=min_rounds,
        max_rounds=max_rounds,
        distribution=distribution,
        request_rate=request_rate,
        sub_question_input_length=sub_question_input_length,
        ready_queue_policy=ready_queue_policy,
        range_ratio=range_ratio,
        enable_round_barrier=enable_round_barrier,
        disable_random_sample=disable_random_sample,
        seed=seed,
    )
    cfg = SimConfig(**server, seed=seed)
    execute(
        _generate(args),
        cfg,
        out=out,
        as_json=as_json,
        per_round=enable_round_barrier,
        progress=progress,
        record_ops=record_ops,
        max_abort_fraction=max_abort_fraction,
    )


def _generate(args: BenchMultiturnArgs) -> Trace:
    """The script's workload; its own argument checks become one-line user errors."""
    try:
        return generate_bench_multiturn(args)
    except ConfigError:
        raise
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
