"""``kvplan gpu-replay``: execute a recorded op log on SGLang-shaped pools and time its memory ops.

The work lives in ``gpu_replay/`` (torch); this module imports it only when the command runs, so
the simulator and the rest of the CLI never import torch.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from simulator.cli.common import print_json, user_errors_exit
from simulator.cli.output_files import check_out_file
from simulator.errors import ConfigError, FlagError

_IMPLS = (
    "kernel: reference, triton, triton_tma, cuda, cuda_bulk; "
    "direct: reference, batch, loop, pitched, cxx_loop, cxx_batch, cxx_pitched"
)


def _check_geometry(header: dict, model: str, tp: int) -> None:
    """The log must have been recorded for ``model`` at TP ``tp`` (same per-rank geometry)."""
    from simulator.models import load_model
    from simulator.oplog import model_geometry

    want = model_geometry(load_model(model), tp)
    got = header.get("geometry")
    if got is None:
        header["geometry"] = want
        return
    keys = [k for k in want if k != "tp_rank" and got.get(k) != want[k]]
    if keys:
        raise ConfigError(
            f"op log was recorded for {got.get('model')} at TP {got.get('tp_size')}, not {model} at TP {tp} "
            f"(differs in {', '.join(keys)})"
        )


@user_errors_exit
def gpu_replay(
    ops: Annotated[Path, typer.Argument(help="An op log (.npz) written by kvplan run --record-ops.")],
    model: Annotated[
        str, typer.Option("--model", help="model preset the log was recorded for")
    ] = "gpt-oss-120b",
    tp: Annotated[
        int, typer.Option("--tp", help="TP size the log was recorded at (one rank is replayed)")
    ] = 1,
    device: Annotated[str, typer.Option("--device", help="cuda or cpu")] = "cuda",
    io_backend: Annotated[
        str, typer.Option("--io-backend", help="host transfers (HiCache, write-back): kernel or direct")
    ] = "kernel",
    impl: Annotated[str, typer.Option("--impl", help=f"transfer implementation ({_IMPLS})")] = "reference",
    layout: Annotated[
        str, typer.Option("--layout", help="host layout: layer_first, page_first, page_first_direct")
    ] = "layer_first",
    layers: Annotated[
        int | None, typer.Option("--layers", help="replay only the first N layers of each pool")
    ] = None,
    verify: Annotated[
        str, typer.Option("--verify", help="check page state and page data: every (step), end, none")
    ] = "end",
    check_every: Annotated[
        int, typer.Option("--check-every", help="with --verify every: every N-th step that changed pages")
    ] = 1,
    write_back: Annotated[
        bool, typer.Option("--write-back", help="back evicted pages up to a host pool (HiCache write_back)")
    ] = False,
    host_pages: Annotated[int | None, typer.Option("--host-pages", help="host pool pages per pool")] = None,
    isolate_calls: Annotated[
        bool,
        typer.Option(
            "--isolate-calls", help="synchronize before each write-back call (times each call on an idle GPU)"
        ),
    ] = False,
    repeats: Annotated[
        int,
        typer.Option(
            "--repeats",
            help="timed replays of the log (N > 1: one untimed warm-up first, tables OUT-r0..r{N-1})",
        ),
    ] = 1,
    out: Annotated[
        Path | None, typer.Option("--out", help="per-step table (CSV); default: OPS with .gpu-replay.csv")
    ] = None,
    summary_out: Annotated[
        Path | None, typer.Option("--summary", help="also write the summary (JSON) here")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the summary as one JSON object")] = False,
) -> None:
    """Replay OPS step by step on the pools of one TP rank; time each step's memory operations."""
    from gpu_replay.geometry import resolve_layout_io

    if device not in ("cuda", "cpu") and not device.startswith("cuda:"):
        raise FlagError(f"--device {device!r}: must be cuda or cpu")
    if check_every < 1:
        raise FlagError(f"--check-every {check_every}: must be >= 1")
    if repeats < 1:
        raise FlagError(f"--repeats {repeats}: must be >= 1")
    if layers is not None and layers < 1:
        raise FlagError(f"--layers {layers}: must be >= 1")
    resolved = resolve_layout_io(layout, io_backend)
    if resolved != (layout, io_backend):
        raise FlagError(
            f"--layout {layout} with --io-backend {io_backend}: "
            f"SGLang would run {resolved[0]} / {resolved[1]}"
        )
    out = out or ops.with_suffix(".gpu-replay.csv")
    check_out_file(out, "--out")
    if summary_out is not None:
        check_out_file(summary_out, "--summary")
    options = dict(
        device=device,
        io_backend=io_backend,
        impl=impl,
        layout=layout,
        layers=layers,
        verify=verify,
        check_every=check_every,
        write_back=write_back,
        host_pages=host_pages,
        isolate_calls=isolate_calls,
    )
    summary = _run(ops, model, tp, options, out, repeats)
    if summary_out is not None:
        from gpu_replay.replay_report import write_json

        write_json(summary_out, summary)
    if as_json:
        from simulator.provenance import provenance

        print_json({**summary, "provenance": provenance()})
        return
    _print(summary, out)


def _run(ops: Path, model: str, tp: int, options: dict, out: Path, repeats: int = 1) -> dict:
    """One replay (``repeats`` 1, the table at ``out``), or a warm-up replay with the chosen checks
    then ``repeats`` timed ones without (tables ``OUT-r{i}``, as
    ``gpu_replay.transfer_model.compact_calls`` reads them): one replay is not a measurement to a
    few percent (docs/gpu-replay.md, "Fourth session")."""
    import dataclasses

    import torch

    from gpu_replay.oplog_replay import ReplayOptions
    from gpu_replay.transfer import IMPLS
    from simulator.oplog import read_op_log

    device, io_backend, impl = options["device"], options["io_backend"], options["impl"]
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise FlagError("--device cuda: torch sees no CUDA device (use --device cpu)")
    if impl not in IMPLS[io_backend]:
        raise FlagError(f"--impl {impl!r}: the {io_backend} backend has {', '.join(IMPLS[io_backend])}")
    log = read_op_log(ops)
    _check_geometry(log.header, model, tp)
    opts = ReplayOptions(**options)
    if repeats == 1:
        return _replay_once(log, opts, out)
    summary = _replay_once(log, opts, None)
    timed = dataclasses.replace(opts, verify="none")
    runs = [_replay_once(log, timed, out.with_name(f"{out.stem}-r{i}{out.suffix}")) for i in range(repeats)]
    keys = ("table", "wall_s", "write_s", "write_gbps", "backup_s", "backup_gbps", "load_s", "mem_s")
    summary["repeats"] = [{k: r.get(k) for k in keys} for r in runs]
    summary["table"] = None
    return summary


def _replay_once(log, options, out: Path | None) -> dict:
    """One replay of ``log``; its summary, and its table written to ``out`` unless None."""
    from gpu_replay.oplog_replay import OpLogReplay
    from gpu_replay.replay_report import summarize, write_table

    t0 = time.perf_counter()
    replay = OpLogReplay(log, options)
    try:
        rows = replay.run()
    finally:
        replay.release()
    summary = summarize(replay, rows, time.perf_counter() - t0)
    if out is not None:
        write_table(out, rows)
    summary["table"] = str(out) if out is not None else None
    return summary


def _print(s: dict, out: Path) -> None:
    gb = 1e9
    typer.echo(f"gpu-replay on {s['environment'].get('name')} ({s['options']['device']}): {s['steps']} steps")
    typer.echo(f"  records replayed: {s['records_replayed']}")
    if s["records_not_replayed"]:
        typer.echo(f"  records NOT replayed (HiCache, no data moved): {s['records_not_replayed']}")
    typer.echo(
        f"  KV writes: {s['written_bytes'] / gb:.3f} GB in {s['write_s'] * 1e3:.2f} ms"
        + (f" ({s['write_gbps']:.1f} GB/s)" if s["write_gbps"] else "")
    )
    if s["options"]["write_back"] or s["load_pages"]:
        label = "write-back" if s["options"]["write_back"] else "HiCache backups (D->H)"
        typer.echo(
            f"  {label}: {s['backup_pages']} pages, {s['backup_bytes'] / gb:.3f} GB "
            f"in {s['backup_s'] * 1e3:.2f} ms"
            + (f" ({s['backup_gbps']:.1f} GB/s)" if s["backup_gbps"] else "")
        )
    if s["load_pages"]:
        typer.echo(
            f"  HiCache loads (H->D): {s['load_pages']} pages, {s['load_bytes'] / gb:.3f} GB "
            f"in {s['load_s'] * 1e3:.2f} ms" + (f" ({s['load_gbps']:.1f} GB/s)" if s["load_gbps"] else "")
        )
    per = s["mem_s_per_step"]
    if per:
        typer.echo(
            f"  per step (ms): p50 {per['p50'] * 1e3:.3f}  p99 {per['p99'] * 1e3:.3f}  "
            f"max {per['max'] * 1e3:.3f}"
        )
    where = "warm-up replay, tables per repeat below" if s.get("repeats") else f"table: {out}"
    typer.echo(f"  checks passed: {s['checks']} (verify={s['verify']}); {where}")
    for i, r in enumerate(s.get("repeats", [])):
        typer.echo(
            f"  repeat {i}: write-back {r['backup_s'] * 1e3:.2f} ms, writes {r['write_s'] * 1e3:.2f} ms; "
            f"table: {r['table']}"
        )
