"""``kvplan plan``: the cheapest launch flags that meet SLOs on a trace (docs/planner.md).

A thin shell over :mod:`simulator.planner.plan_run`: it reads the trace (and applies any
``--what-if``), parses the SLOs, lays out the search space, runs the search on the chosen
backend over a result store, and prints the plan (text, or ``--json``); ``-o DIR`` writes
``DIR/plan.json``, keeps the store in ``DIR/store`` and writes the plan's report there
(``index.html``, ``report.md``, ``figures.json``, ``figures/``; docs/reports.md).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer

from simulator.cli.common import DEFAULT_TRACE, JsonOpt, ProgressOpt, print_json, user_errors_exit
from simulator.cli.server_flags import ALL_FLAGS, server_options
from simulator.cli.sweep_cmd import default_jobs
from simulator.cli.trace_options import (
    BlockSizeOpt,
    FormatOpt,
    LimitOpt,
    RequestRateOpt,
    ThinkTimeOpt,
    TimeScaleOpt,
)
from simulator.engine.config import SimConfig
from simulator.errors import FlagError
from simulator.planner.plan_cost import DEFAULT_GPU_PRICE, DEFAULT_HOST_PRICE

_D = SimConfig()
# The plan searches the memory itself: a fixed KV budget or token cap would defeat it.
PLAN_FLAGS = tuple(f for f in ALL_FLAGS if f not in ("log_decode", "kv_budget_gib", "max_total_tokens"))


@user_errors_exit
@server_options(*PLAN_FLAGS)
def plan(
    slo: Annotated[
        str | None,
        typer.Option(
            "--slo",
            help="objectives, comma-separated: PATH OP NUMBER, PATH a number of `kvplan run --json` "
            '(ttft.p90, cache_hit_rate, ...), OP <=, >=, < or >; e.g. "ttft.p90<=1.0,cache_hit_rate>=0.6". '
            "Always implied: no request aborted or rejected (the only objective without --slo).",
        ),
    ] = None,
    trace: Annotated[
        Path, typer.Option("--trace", help="any trace kvplan reads (default: the bundled Mooncake sample)")
    ] = DEFAULT_TRACE,
    what_if: Annotated[
        list[str] | None,
        typer.Option(
            "--what-if",
            help="plan for a changed workload: rate=K (K x the rate), sessions=K (K x the sessions)",
        ),
    ] = None,
    gpu_price: Annotated[
        float, typer.Option("--gpu-price", help="$ per GiB-hour of GPU KV memory")
    ] = DEFAULT_GPU_PRICE,
    host_price: Annotated[
        float, typer.Option("--host-price", help="$ per GiB-hour of host RAM (HiCache)")
    ] = DEFAULT_HOST_PRICE,
    levels: Annotated[
        int, typer.Option("--levels", help="coarse memory levels: KV budgets halving from SGLang's default")
    ] = 8,
    swa_ratios: Annotated[
        str, typer.Option("--swa-ratios", help="coarse --swa-full-tokens-ratio values")
    ] = "0.1,0.3,0.8",
    hicache_ratios: Annotated[
        str, typer.Option("--hicache-ratios", help="coarse --hicache-ratio values ('none' = HiCache off)")
    ] = "none,2,4",
    max_mem_fraction: Annotated[
        float | None,
        typer.Option(
            "--max-mem-fraction", help="the most --mem-fraction-static to consider (default: SGLang's)"
        ),
    ] = None,
    exhaustive: Annotated[
        bool,
        typer.Option(
            "--exhaustive",
            help="run the whole coarse grid, even points that cannot change the plan (same plan, more runs)",
        ),
    ] = False,
    seeds: Annotated[
        int,
        typer.Option(
            "--seeds",
            help="run each configuration at N seeds (--seed ..); it must meet the SLOs at every one",
        ),
    ] = 1,
    jobs: Annotated[
        int | None,
        typer.Option(
            "-j", "--jobs", help="local worker processes (default: one per CPU; 1 = in this process)"
        ),
    ] = None,
    dask: Annotated[
        str | None, typer.Option("--dask", help="run on the Dask cluster at ADDRESS, or 'local'")
    ] = None,
    store: Annotated[
        Path | None, typer.Option("--store", help="result store directory (a rerun resumes)")
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "-o",
            "--output",
            help="write DIR/plan.json and its report (index.html, report.md) and keep the store in DIR/store",
        ),
    ] = None,
    fmt: FormatOpt = None,
    block_size: BlockSizeOpt = None,
    limit: LimitOpt = None,
    time_scale: TimeScaleOpt = _D.time_scale,
    request_rate: RequestRateOpt = _D.request_rate,
    think_time: ThinkTimeOpt = _D.think_time_s,
    seed: Annotated[int, typer.Option("--seed", help="seed of the runs and of --what-if sessions")] = _D.seed,
    as_json: JsonOpt = False,
    progress: ProgressOpt = True,
    *,
    server: dict[str, Any],
) -> None:
    """The cheapest GPU KV memory (and host RAM) meeting every SLO on TRACE: SGLang launch flags and why."""
    from simulator.planner import ResultStore, make_backend
    from simulator.planner.plan_cost import Prices
    from simulator.planner.plan_report import format_text
    from simulator.planner.plan_run import PlanSetup, SweepOracle, make_space, run_plan
    from simulator.planner.slo import parse_slos
    from simulator.planner.what_if import apply_what_if, parse_what_if

    slos = () if slo is None else parse_slos(slo)
    changes = [parse_what_if(w) for w in what_if or []]
    prices = _prices(gpu_price, host_price, Prices)
    if max_mem_fraction is not None and not 0 < max_mem_fraction <= 1:
        raise FlagError(f"--max-mem-fraction must be in (0, 1], got {max_mem_fraction}")
    if seeds < 1:
        raise FlagError(f"--seeds must be >= 1, got {seeds}")
    if output is not None and store is not None:
        raise FlagError("-o DIR keeps the store in DIR/store; give -o or --store, not both")
    workload = dict(time_scale=time_scale, request_rate=request_rate, think_time_s=think_time)
    base = SimConfig(**server, **workload, seed=seed)
    space, hicache_axis, notes = make_space(
        base,
        levels=levels,
        swa_ratios=_ratios("--swa-ratios", swa_ratios, allow_none=False),
        hicache_ratios=_ratios("--hicache-ratios", hicache_ratios, allow_none=True),
        f_max=max_mem_fraction,
        prune=not exhaustive,
    )
    tr = _load(trace, fmt, block_size, limit)
    for change in changes:
        tr = apply_what_if(tr, change, seed=seed)
        notes.append(f"what-if {change.text}: {len(tr)} requests")
    setup = PlanSetup(base, slos, prices, space, hicache_axis, tuple(notes), seeds=seeds)
    store_dir = output / "store" if output is not None else store
    # one pool of workers for the whole plan: its batches share the workers' warm trace
    backend = make_backend(default_jobs() if jobs is None else jobs, dask, persistent=True)
    oracle = SweepOracle(
        tr,
        setup,
        backend=backend,
        store=None if store_dir is None else ResultStore(store_dir),
        progress=progress and not as_json,
    )
    try:
        result = run_plan(tr, setup, oracle)
    finally:
        close = getattr(backend, "close", None)
        if close is not None:
            close()
    result["search"]["what_if"] = [c.text for c in changes]
    if output is not None:
        write_plan(output, result)
        _write_report(output, prices, tr)
    if as_json:
        print_json(result)
    else:
        typer.echo(format_text(result))


def _write_report(output: Path, prices: Any, trace: Any) -> None:
    """The plan's report into ``output`` beside ``plan.json`` and the store (docs/reports.md);
    it replaces only its own files. Priced as the plan was, on the trace it planned on."""
    from simulator.reports import ReportOptions, build_report

    build_report(output, output, ReportOptions(prices=prices, loaded_trace=trace))


def _prices(gpu: float, host: float, cls: Any) -> Any:
    for name, v in (("--gpu-price", gpu), ("--host-price", host)):
        if not (v >= 0 and v < float("inf")):
            raise FlagError(f"{name} must be a finite number >= 0, got {v}")
    return cls(gpu, host)


def _ratios(flag: str, text: str, *, allow_none: bool) -> list[float | None]:
    out: list[float | None] = []
    for item in (s.strip() for s in text.split(",")):
        if allow_none and item.lower() in ("none", "off"):
            out.append(None)
            continue
        try:
            value = float(item)
        except ValueError:
            raise FlagError(f"{flag}: {item!r} is not a number") from None
        if not value > 0 or (flag == "--swa-ratios" and value > 1):
            raise FlagError(f"{flag}: {item} is out of range")
        out.append(value)
    if not out:
        raise FlagError(f"{flag}: no value given")
    return out


def _load(trace: Path, fmt: Any, block_size: Any, limit: int | None) -> Any:
    from traces import load_trace

    if limit is not None and limit < 1:
        raise FlagError(f"--limit must be >= 1, got {limit}")
    tr = load_trace(trace, fmt=fmt, block_size=block_size)
    return tr if limit is None else tr.head(limit)


def write_plan(directory: Path, plan_obj: dict[str, Any]) -> Path:
    """``DIR/plan.json``, written to a temporary file and renamed into place."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "plan.json"
    tmp = directory / f".plan.json.{os.getpid()}.tmp"
    try:
        tmp.write_text(json.dumps(plan_obj, indent=1, default=_default) + "\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _default(o: Any) -> Any:
    import numpy as np

    if isinstance(o, np.integer | np.floating):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
