"""``kvplan run --trace T``: serve a trace through the simulated SGLang server and print the results.

The server options carry SGLang's launch-flag names and land in :class:`SimConfig`; the option
aliases and :func:`execute` are shared with ``kvplan bench-multiturn`` (bench_multiturn_cmd.py).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from policies.eviction_order import EVICTION_ORDERS
from policies.registry import Registry
from policies.swa_eviction import SWA_EVICTION
from policies.tombstone import TOMBSTONING
from simulator.cli.common import DEFAULT_TRACE, print_json, user_errors_exit
from simulator.engine.config import SimConfig

_D = SimConfig()  # option defaults come from the config, so there is one list of defaults


def _registry_check(registry: Registry, flag: str) -> Callable[[str], str]:
    """An option callback accepting exactly the registry's names (the registry is the only list)."""

    def check(value: str) -> str:
        if value not in registry.names():
            raise typer.BadParameter(
                f"{value!r} is not one of: {', '.join(registry.names())}", param_hint=flag
            )
        return value

    return check


# --- shared option aliases (SGLang's server flag names) -----------------------------------------
ModelOpt = Annotated[str, typer.Option("--model", help="model preset name or config path")]
GpuOpt = Annotated[str, typer.Option("--gpu", help="GPU preset")]
TpOpt = Annotated[int, typer.Option("--tp", "--tp-size", help="tensor parallel size")]
PageSizeOpt = Annotated[
    int | None, typer.Option("--page-size", help="SGLang --page-size (default: SGLang's)")
]
SwaRatioOpt = Annotated[
    float | None, typer.Option("--swa-full-tokens-ratio", help="SGLang --swa-full-tokens-ratio")
]
MemFracOpt = Annotated[
    float | None, typer.Option("--mem-fraction-static", help="SGLang --mem-fraction-static")
]
MaxTotalOpt = Annotated[
    int | None, typer.Option("--max-total-tokens", help="SGLang --max-total-tokens (full pool)")
]
MaxRunningOpt = Annotated[
    int | None, typer.Option("--max-running-requests", help="SGLang --max-running-requests")
]
ChunkedOpt = Annotated[
    int | None, typer.Option("--chunked-prefill-size", help="SGLang --chunked-prefill-size")
]
MaxPrefillOpt = Annotated[int, typer.Option("--max-prefill-tokens", help="SGLang --max-prefill-tokens")]
SchedPolicyOpt = Annotated[
    str, typer.Option("--schedule-policy", help="SGLang --schedule-policy (fcfs, lpm)")
]
DisableRadixOpt = Annotated[bool, typer.Option("--disable-radix-cache", help="SGLang --disable-radix-cache")]
RadixEvictOpt = Annotated[
    str,
    typer.Option(
        "--radix-eviction-policy",
        help=f"SGLang --radix-eviction-policy: {', '.join(EVICTION_ORDERS.names())}",
        callback=_registry_check(EVICTION_ORDERS, "--radix-eviction-policy"),
    ),
]
OverlapOpt = Annotated[
    bool,
    typer.Option(
        "--disable-overlap-schedule/--enable-overlap-schedule",
        help=(
            "SGLang's scheduler without (default here) or with overlap: with it, results are "
            "processed one step late (SGLang's own default; runs without decode fast-forward)"
        ),
    ),
]
SwaEvictOpt = Annotated[
    str,
    typer.Option(
        "--swa-eviction",
        help=f"decode-time SWA eviction: {', '.join(SWA_EVICTION.names())}",
        callback=_registry_check(SWA_EVICTION, "--swa-eviction"),
    ),
]
TombstoneOpt = Annotated[
    str,
    typer.Option(
        "--tombstone",
        help=f"SWA radix tree generation: {', '.join(TOMBSTONING.names())}",
        callback=_registry_check(TOMBSTONING, "--tombstone"),
    ),
]
ProfileOpt = Annotated[str | None, typer.Option("--profile", help="cost-model calibration profile JSON")]
LogDecodeOpt = Annotated[
    bool, typer.Option("--log-decode", help="print SGLang's 'Decode batch, ...' line every 40 decode steps")
]
CheckInvOpt = Annotated[
    bool, typer.Option("--check-invariants", help="run the cache invariant checker after every step (slow)")
]
OutOpt = Annotated[
    Path | None,
    typer.Option("--out", help="write requests/decode_steps/prefill_batches parquet+CSV and summary.json"),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="print one JSON object (the summary) instead of text")]
ProgressOpt = Annotated[
    bool, typer.Option("--progress/--no-progress", help="progress bar on stderr (only on a terminal)")
]


def server_config(**kwargs: Any) -> SimConfig:
    """A :class:`SimConfig` from CLI values (keyword names = SimConfig fields)."""
    return SimConfig(**kwargs)


def _load_simulate() -> Callable[..., None]:
    from simulator.engine.simulate import simulate

    return simulate


@contextmanager
def _progress(total: int, enabled: bool) -> Iterator[Callable[[int], None] | None]:
    """A transient rich progress bar on stderr, updated at most ~200 times per run."""
    if not enabled or total <= 0:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    step = max(1, total // 200)
    with Progress(
        TextColumn("simulating"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
        redirect_stdout=False,
        redirect_stderr=False,
    ) as bar:
        task = bar.add_task("simulating", total=total)

        def update(n: int) -> None:
            if n % step == 0 or n == total:
                bar.update(task, completed=n)

        yield update


def execute(
    trace: Any,
    cfg: SimConfig,
    *,
    out: Path | None,
    as_json: bool,
    per_round: bool,
    progress: bool = True,
) -> dict:
    """Simulate ``trace`` under ``cfg``, write ``--out`` files, print the report or the JSON summary.

    Decode log lines go to stdout, or to stderr with ``--json`` (stdout then holds one JSON object).
    The progress bar shows only on an interactive stderr, and not with ``--json`` or ``--log-decode``
    (the log lines already show progress and would tear the bar).
    """
    from simulator.engine.clients import offered_request_rate
    from simulator.engine.metrics import Recorder
    from simulator.engine.report import format_report

    simulate = _load_simulate()
    recorder = Recorder.from_config(
        cfg,
        request_rate=offered_request_rate(trace, cfg),
        log_stream=sys.stderr if as_json else None,
    )
    show = progress and not as_json and not cfg.log_decode and sys.stderr.isatty()
    with _progress(len(trace), show) as update:
        recorder.progress = update
        simulate(trace, cfg, recorder)
    summary = recorder.summary()
    if out is not None:
        recorder.write_outputs(out)
    if as_json:
        print_json(summary)
    else:
        typer.echo(format_report(summary, per_round=per_round))
    return summary


def shows_per_round(trace: Any) -> bool:
    """bench_multiturn prints per-round metrics only with its round barrier; so does kvplan's text."""
    from traces.closed_loop import BenchMultiturnLoop

    loop = trace.closed_loop
    return isinstance(loop, BenchMultiturnLoop) and loop.enable_round_barrier


@user_errors_exit
def run(
    trace: Annotated[
        Path, typer.Option("--trace", help="any trace kvplan reads (default: the bundled Mooncake sample)")
    ] = DEFAULT_TRACE,
    fmt: Annotated[str | None, typer.Option("--format", help="trace format (default: detected)")] = None,
    block_size: Annotated[
        int | None, typer.Option("--block-size", help="Mooncake hash-id block size")
    ] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="serve only the first N requests")] = None,
    model: ModelOpt = _D.model,
    gpu: GpuOpt = _D.gpu,
    tp: TpOpt = _D.tp,
    page_size: PageSizeOpt = _D.page_size,
    swa_full_tokens_ratio: SwaRatioOpt = _D.swa_full_tokens_ratio,
    mem_fraction_static: MemFracOpt = _D.mem_fraction_static,
    max_total_tokens: MaxTotalOpt = _D.max_total_tokens,
    max_running_requests: MaxRunningOpt = _D.max_running_requests,
    chunked_prefill_size: ChunkedOpt = _D.chunked_prefill_size,
    max_prefill_tokens: MaxPrefillOpt = _D.max_prefill_tokens,
    schedule_policy: SchedPolicyOpt = _D.schedule_policy,
    disable_radix_cache: DisableRadixOpt = _D.disable_radix_cache,
    radix_eviction_policy: RadixEvictOpt = _D.radix_eviction_policy,
    disable_overlap_schedule: OverlapOpt = _D.disable_overlap_schedule,
    swa_eviction: SwaEvictOpt = _D.swa_eviction,
    tombstone: TombstoneOpt = _D.tombstone,
    profile: ProfileOpt = _D.profile,
    time_scale: Annotated[
        float, typer.Option("--time-scale", help="multiply the trace's inter-arrival times")
    ] = _D.time_scale,
    request_rate: Annotated[
        float | None,
        typer.Option(
            "--request-rate", help="Poisson arrivals at this rate (req/s) instead of the trace's times"
        ),
    ] = _D.request_rate,
    think_time: Annotated[
        float, typer.Option("--think-time", help="seconds between a turn's finish and its next turn")
    ] = _D.think_time_s,
    seed: Annotated[int, typer.Option("--seed", help="seed of every random draw of the run")] = _D.seed,
    log_decode: LogDecodeOpt = False,
    check_invariants: CheckInvOpt = False,
    out: OutOpt = None,
    as_json: JsonOpt = False,
    progress: ProgressOpt = True,
) -> None:
    """Serve TRACE through the simulated SGLang server; print bench_multiturn's summary."""
    from traces import load_trace

    if limit is not None and limit < 1:
        raise typer.BadParameter(f"must be >= 1, got {limit}", param_hint="--limit")
    tr = load_trace(trace, fmt=fmt, block_size=block_size)
    if limit is not None:
        tr = tr.head(limit)
    cfg = server_config(
        model=model,
        gpu=gpu,
        tp=tp,
        page_size=page_size,
        swa_full_tokens_ratio=swa_full_tokens_ratio,
        mem_fraction_static=mem_fraction_static,
        max_total_tokens=max_total_tokens,
        max_running_requests=max_running_requests,
        chunked_prefill_size=chunked_prefill_size,
        max_prefill_tokens=max_prefill_tokens,
        schedule_policy=schedule_policy,
        disable_radix_cache=disable_radix_cache,
        radix_eviction_policy=radix_eviction_policy,
        disable_overlap_schedule=disable_overlap_schedule,
        swa_eviction=swa_eviction,
        tombstone=tombstone,
        profile=profile,
        time_scale=time_scale,
        request_rate=request_rate,
        think_time_s=think_time,
        seed=seed,
        log_decode=log_decode,
        check_invariants=check_invariants,
    )
    execute(tr, cfg, out=out, as_json=as_json, per_round=shows_per_round(tr), progress=progress)
