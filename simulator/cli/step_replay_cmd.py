"""``kvplan step-replay``: kvplan's scheduler on a step clock, with the scheduler oracle's
workload format, knobs (under kvplan's flag names) and output lines (docs/scheduler.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from simulator.cli.common import user_errors_exit
from simulator.engine.step_replay import run_lines
from simulator.engine.step_workload import StepKnobs, read_rows
from simulator.errors import ConfigError
from simulator.sglang_bugs import swa_double_chunk_condition

_D = StepKnobs()


@user_errors_exit
def step_replay(
    workload: Annotated[
        Path,
        typer.Argument(
            help="Workload JSONL: rid, input_ids, output_ids, "
            "session?, arrival_step?, max_new_tokens?, ignore_eos?"
        ),
    ],
    page_size: Annotated[int, typer.Option("--page-size")] = _D.page_size,
    full_tokens: Annotated[
        int, typer.Option("--full-tokens", help="FULL pool (oracle --full-size).")
    ] = _D.full_tokens,
    swa_tokens: Annotated[
        int, typer.Option("--swa-tokens", help="SWA pool (oracle --swa-size).")
    ] = _D.swa_tokens,
    window: Annotated[int, typer.Option("--window")] = _D.window,
    no_swa: Annotated[bool, typer.Option("--no-swa", help="A full-attention model.")] = False,
    chunked_prefill_size: Annotated[int, typer.Option("--chunked-prefill-size")] = _D.chunked_prefill_size,
    max_prefill_tokens: Annotated[int, typer.Option("--max-prefill-tokens")] = _D.max_prefill_tokens,
    max_running_requests: Annotated[int, typer.Option("--max-running-requests")] = _D.max_running_requests,
    schedule_policy: Annotated[str, typer.Option("--schedule-policy")] = _D.schedule_policy,
    schedule_conservativeness: Annotated[float, typer.Option("--schedule-conservativeness")] = 1.0,
    session_gap: Annotated[int, typer.Option("--session-gap")] = _D.session_gap,
    context_length: Annotated[int, typer.Option("--context-length", help="Oracle --max-context-len.")] = 8192,
    waiting_prefix_refresh: Annotated[
        str, typer.Option("--waiting-prefix-refresh", help="on or off.")
    ] = "on",
    disable_overlap_schedule: Annotated[
        bool, typer.Option("--disable-overlap-schedule/--enable-overlap-schedule")
    ] = False,
    ignore_eos: Annotated[bool, typer.Option("--ignore-eos/--no-ignore-eos")] = True,
    eos_id: Annotated[int | None, typer.Option("--eos-id")] = None,
    queue_head: Annotated[int, typer.Option("--queue-head")] = _D.queue_head,
    max_steps: Annotated[
        int,
        typer.Option(
            "--max-steps", min=1, help="Stop with an error at this step, as the oracle's --max-steps does."
        ),
    ] = _D.max_steps,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the oracle's step, request and run lines.")
    ] = False,
) -> None:
    """Replay WORKLOAD one scheduler pass per step, as ``drive_scheduler.py`` replays it in SGLang."""
    if waiting_prefix_refresh not in ("on", "off"):
        raise ConfigError(f"--waiting-prefix-refresh must be on or off, got {waiting_prefix_refresh!r}")
    knobs = StepKnobs(
        page_size=page_size, full_tokens=full_tokens, swa_tokens=swa_tokens, window=window, no_swa=no_swa,
        max_running_requests=max_running_requests, chunked_prefill_size=chunked_prefill_size,
        max_prefill_tokens=max_prefill_tokens, schedule_policy=schedule_policy,
        schedule_conservativeness=schedule_conservativeness, session_gap=session_gap,
        context_length=context_length, waiting_prefix_refresh=waiting_prefix_refresh == "on",
        disable_overlap_schedule=disable_overlap_schedule, ignore_eos=ignore_eos, eos_id=eos_id,
        queue_head=queue_head, max_steps=max_steps,
    )  # fmt: skip
    lines = run_lines(read_rows(workload), knobs)
    run = lines[-1]
    if as_json:
        for line in lines:
            typer.echo(json.dumps(line))
    else:
        c = run["counts"]
        typer.echo(
            f"{run['steps']} steps ({c['prefill_steps']} prefill, {c['decode_steps']} decode, "
            f"{c['idle_steps']} idle), "
            f"{c['finishes']}/{c['arrivals']} finished, {c['retractions']} retractions, {run['loop']}"
        )
    crash = run.get("crashed")
    if crash is not None:  # the oracle exits 1 where SGLang's loop dies
        typer.echo(
            f"kvplan: step-replay stopped at step {crash['step']}: {crash['error']} ({_why(crash, knobs)})",
            err=True,
        )
        raise typer.Exit(1)


def _why(crash: dict, knobs: StepKnobs) -> str:
    """Why the step clock stopped: no progress until ``--max-steps``, SGLang's SWA-allocator
    assertion, or kvplan's own allocator check."""
    if crash["error"].startswith("RuntimeError: --max-steps"):
        return (
            "SGLang 0.5.23 stalls here too: it has no abort for a queue head that can never be admitted, "
            "so its loop passes idle until the oracle's --max-steps"
        )
    if crash["error"].startswith("ValueError: pool memory leak detected"):
        return (
            "SGLang 0.5.23's idle leak check raises there too: "
            "its SWA double-truncation bug breaks the pools' accounting"
        )
    if swa_double_chunk_condition(
        knobs.swa_pool or 0, knobs.chunked_prefill_size, knobs.page_size, not knobs.no_swa
    ):
        return (
            "SGLang 0.5.23's SWA allocator asserts there too: its SWA pool is at most one chunk plus a page"
        )
    return "kvplan's allocator check; SGLang has no known crash for this configuration"
