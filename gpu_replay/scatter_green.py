"""Per-layer loads on an SM partition (CUDA green contexts) beside attention on the other SMs, in
one device call (issue 13, seventh session).

The sixth session's TMA + PDL loads reach the per-layer bandwidth even on 8 blocks but hide only
0-43% behind attention: the attention kernels take every SM and the load kernels wait for free
slots. Here the attention stand-in (causal torch SDPA, as in :mod:`gpu_replay.scatter_bench`) runs
on a green-context stream of the SMs left after ``k`` are set apart, and the loads (the TMA kernel,
one block per SM of its side) on a stream of a green context of those ``k`` SMs (mode ``split``) or
on an ordinary stream (``plain_load``). Workload as before: gpt-oss-120b TP 2, page 64, the full
pool's 18 layers, 64 KiB per page and layer, random page ids, layer_first host pool on 2 MiB pages.

Parts, in order, saved after each: the torch / driver support record, the copy peak
(``scatter_bench.peak``), the unpartitioned baseline (PER_LAYER_TMA on the whole GPU), then per
``k``: a byte check under the partition (both directions, with compute running), the per-layer
curve 1k-32k alone, and the overlap cells (4k and 32k; compute 1.0 / 1.25 / 1.5x the load on the
whole GPU; orders load_first, compute_first, pipelined; H2D loads and D2H backups). The hidden
fraction is computed against the compute timed on the whole GPU and on its partition
(:mod:`gpu_replay.green_plan`).

    python -m gpu_replay.scatter_green --out $OUT/green.json
    python -m gpu_replay.scatter_green --dry-run --out /tmp/green.json   # CPU: plan and tables
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import time
from pathlib import Path
from types import SimpleNamespace

from gpu_replay.green_plan import (
    Plan,
    curve_table,
    overlap_row,
    overlap_table,
    pct,
    synthetic_result,
    verdict_lines,
    verdicts,
)


def _torch():
    import torch

    return torch


def _ev():
    return _torch().cuda.Event(enable_timing=True)


def _timed(fn, reps: int, warmup: int = 2) -> tuple[list[float], list[float]]:
    """Seconds per call between events on the caller's stream, and the load span of each call
    (``fn`` returns the load's start and end events, or None); ``fn`` leaves the caller's stream
    waiting for everything it issued."""
    torch = _torch()
    main = torch.cuda.current_stream()
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    tot, spans = [], []
    for _ in range(reps):
        a, b = _ev(), _ev()
        a.record(main)
        marks = fn()
        b.record(main)
        b.synchronize()
        tot.append(a.elapsed_time(b) / 1e3)
        if marks is not None:
            spans.append(marks[0].elapsed_time(marks[1]) / 1e3)
    return tot, spans


def issue_loads(stream, mover, hi, di, n_layers: int, direction: str, after=None, done=None):
    """One call per layer on ``stream`` after the caller's prior work; layer i waits for
    ``after[i]`` (backup after that layer's compute) and records into ``done`` (the pipelined
    load SGLang's forward waits for, ``LayerDoneCounter``). Returns the span's events."""
    torch = _torch()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        e0 = _ev()
        e0.record(stream)
        for i in range(n_layers):
            if after is not None:
                stream.wait_event(after[i])
            mover(hi, di, (i,), direction)
            if done is not None:
                ev = torch.cuda.Event()
                ev.record(stream)
                done.append(ev)
        e1 = _ev()
        e1.record(stream)
    return e0, e1


def issue_compute(stream, work, n_layers: int, per_layer: bool, wait=None, emit=None) -> None:
    """The attention stand-in on ``stream``: ``work`` once, or once per layer (waiting for
    ``wait[i]`` / recording into ``emit``) in the pipelined shape."""
    torch = _torch()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        if not per_layer:
            work()
            return
        for i in range(n_layers):
            if wait is not None:
                stream.wait_event(wait[i])
            work()
            if emit is not None:
                ev = torch.cuda.Event()
                ev.record(stream)
                emit.append(ev)


class Attn:
    """Causal SDPA of two sizes (a big call for whole-compute orders, a small one per layer for
    the pipelined order), timed once on the whole GPU."""

    def __init__(self) -> None:
        torch = _torch()
        self.sdpa = torch.nn.functional.scaled_dot_product_attention
        self.q = torch.randn(4, 32, 4096, 64, device="cuda", dtype=torch.bfloat16)
        self.k, self.v = torch.randn_like(self.q), torch.randn_like(self.q)
        self.qs = torch.randn(1, 32, 2048, 64, device="cuda", dtype=torch.bfloat16)
        self.ks, self.vs = torch.randn_like(self.qs), torch.randn_like(self.qs)
        self.t_big = statistics.median(_timed(lambda: self.big(1), 10)[0])
        self.t_small = statistics.median(_timed(lambda: self.small(1), 10)[0])

    def big(self, n: int) -> None:
        for _ in range(n):
            self.sdpa(self.q, self.k, self.v, is_causal=True)

    def small(self, n: int) -> None:
        for _ in range(n):
            self.sdpa(self.qs, self.ks, self.vs, is_causal=True)


@dataclasses.dataclass
class Side:
    """One cell's streams and mover: the load side and the compute side."""

    mode: str
    k: int
    load_stream: object
    compute_stream: object
    mover: object
    load_sms: int
    compute_sms: int


def tma_mover(s, grid: int):
    """PER_LAYER_TMA (16 KiB ops, two stages, PDL) with ``grid`` blocks (0: one per SM), capped
    and reshaped by ``s.load_shape`` where set (fewer host reads in flight)."""
    from gpu_replay.transfer_cuda import CudaBulkTransfer
    from gpu_replay.transfer_defaults import PER_LAYER_TMA

    cfg = load_config(PER_LAYER_TMA, grid, getattr(s, "load_shape", {}))
    return CudaBulkTransfer(s.hosts["thp"], s.dev, cfg)


def load_config(base, grid: int, shape: dict):
    """``base`` with ``grid`` blocks (0: one per SM), the block count capped by ``shape["blocks"]``
    and the ring by ``shape["chunk"]`` / ``shape["stages"]`` where those are set (non-zero)."""
    cap = shape.get("blocks", 0)
    grid = min(grid, cap) if cap and grid else cap or grid
    chunk, stages = shape.get("chunk") or base.chunk, shape.get("stages") or base.stages
    return dataclasses.replace(base, grid=grid, chunk=chunk, stages=stages)


def load_alone(s, side: Side, hi, di, direction: str, reps: int) -> tuple[float, float]:
    """(median seconds of the 18 per-layer calls, median load span), loads alone on their side."""
    torch = _torch()
    n = s.geo.layer_num

    def fn():
        marks = issue_loads(side.load_stream, side.mover, hi, di, n, direction)
        torch.cuda.current_stream().wait_stream(side.load_stream)
        return marks

    tot, spans = _timed(fn, reps)
    return statistics.median(tot), statistics.median(spans)


def curve(s, side: Side, plan: Plan, peak: dict, reps: int, res: list) -> None:
    """Per-layer bandwidth alone, 1k-32k, both directions."""
    for d in plan.directions:
        for prefix in plan.prefixes:
            n_pages = prefix // s.geo.page_size
            hi, di = s.indices(n_pages, True)
            t, _ = load_alone(s, side, hi, di, d, reps)
            g = n_pages * s.geo.page_layer_bytes * s.geo.layer_num / t / 1e9
            row = {
                "mode": side.mode,
                "k": side.k,
                "load_sms": side.load_sms,
                "load_blocks": getattr(side.mover, "grid", None),
                "direction": d,
                "prefix": prefix,
            }
            res.append(row | {"median_s": t / s.geo.layer_num, "gbps": g, "pct": pct(g, peak[d])})
    mine = [r for r in res if r["mode"] == side.mode and r["k"] == side.k]
    print(
        f"curve {side.mode} k={side.k} sms={side.load_sms} "
        + " ".join(f"{r['direction'][0]}{r['prefix'] // 1024}k {r['pct']:.1f}" for r in mine),
        flush=True,
    )


def _both(s, side: Side, hi, di, d: str, order: str, work, per_layer: bool):
    """Issue one overlap of ``order``; the caller's stream waits for both sides."""
    torch = _torch()
    n, cs, ls = s.geo.layer_num, side.compute_stream, side.load_stream
    if order == "load_first":
        marks = issue_loads(ls, side.mover, hi, di, n, d)
        issue_compute(cs, work, n, per_layer)
    elif order == "compute_first":
        issue_compute(cs, work, n, per_layer)
        marks = issue_loads(ls, side.mover, hi, di, n, d)
    elif d == "h2d":  # pipelined load: layer i's attention waits for layer i's load
        done: list = []
        marks = issue_loads(ls, side.mover, hi, di, n, d, done=done)
        issue_compute(cs, work, n, per_layer, wait=done)
    else:  # pipelined backup: layer i's backup waits for layer i's attention
        emit: list = []
        issue_compute(cs, work, n, per_layer, emit=emit)
        marks = issue_loads(ls, side.mover, hi, di, n, d, after=emit)
    main = torch.cuda.current_stream()
    main.wait_stream(cs)
    main.wait_stream(ls)
    return marks


def overlap_cell(
    s, side: Side, full_stream, attn: Attn, plan: Plan, prefix: int, d: str, order: str, peak
) -> list:
    """One (mode, k, prefix, direction, order) cell at each compute ratio."""
    torch = _torch()
    n_pages = prefix // s.geo.page_size
    hi, di = s.indices(n_pages, True)
    nbytes = n_pages * s.geo.page_layer_bytes * s.geo.layer_num
    t_load, span_alone = load_alone(s, side, hi, di, d, 7)
    rows = []
    for ratio in plan.ratios:
        per_layer = order == "pipelined"
        if per_layer:
            calls = max(1, round(ratio * t_load / s.geo.layer_num / attn.t_small))
            work = lambda c=calls: attn.small(c)  # noqa: E731
        else:
            calls = max(1, round(ratio * t_load / attn.t_big))
            work = lambda c=calls: attn.big(c)  # noqa: E731

        def comp(stream, work=work, per_layer=per_layer):
            issue_compute(stream, work, s.geo.layer_num, per_layer)
            torch.cuda.current_stream().wait_stream(stream)

        t_full = statistics.median(_timed(lambda: comp(full_stream), 5)[0])
        t_part = statistics.median(_timed(lambda: comp(side.compute_stream), 5)[0])
        tot, spans = _timed(lambda w=work, p=per_layer: _both(s, side, hi, di, d, order, w, p), 7)
        both, span = statistics.median(tot), statistics.median(spans)
        row = overlap_row(side.mode, side.k, d, order, prefix, ratio, t_load, t_full, t_part, both)
        rows.append(
            row
            | {
                "load_sms": side.load_sms,
                "load_blocks": getattr(side.mover, "grid", None),
                "compute_sms": side.compute_sms,
                "compute_calls": calls,
                "load_span_alone_s": span_alone,
                "load_span_overlapped_s": span,
                "pct_alone": pct(nbytes / span_alone / 1e9, peak[d]),
                "pct_overlapped": pct(nbytes / span / 1e9, peak[d]),
            }
        )
    print(
        f"overlap {side.mode} k={side.k} {prefix // 1024}k {d} {order}: load {rows[0]['pct_alone']:.1f}% "
        f"ovl {min(r['pct_overlapped'] for r in rows):.1f}% hidden_full "
        + "/".join(f"{r['hidden_full']:.2f}" for r in rows)
        + " part "
        + "/".join(f"{r['hidden_part']:.2f}" for r in rows),
        flush=True,
    )
    return rows


def check(s, side: Side, attn: Attn) -> str:
    """Both directions land every row of every layer with compute running beside the loads
    (H2D into poisoned device rows; D2H from freshly written device rows)."""
    from gpu_replay.scatter_setup import _same

    torch = _torch()
    n = s.geo.layer_num
    hi, di = s.indices(48, True)
    host, h = s.hosts["thp"], hi.cpu()
    for lay in range(n):
        s.dev.k[lay][di] = -7
        s.dev.v[lay][di] = -7
    issue_compute(side.compute_stream, lambda: attn.big(2), n, False)
    issue_loads(side.load_stream, side.mover, hi, di, n, "h2d")
    torch.cuda.synchronize()
    ok = all(_same(s.dev.k[i][di], host.k[i][h]) and _same(s.dev.v[i][di], host.v[i][h]) for i in range(n))
    for lay in range(n):
        s.dev.k[lay][di] = lay + 1
        s.dev.v[lay][di] = -(lay + 1)
    issue_compute(side.compute_stream, lambda: attn.big(2), n, False)
    issue_loads(side.load_stream, side.mover, hi, di, n, "d2h")
    torch.cuda.synchronize()
    ok = ok and all(
        _same(s.dev.k[i][di], host.k[i][h]) and _same(s.dev.v[i][di], host.v[i][h]) for i in range(n)
    )
    out = f"{side.mode} k={side.k} sms={side.load_sms}/{side.compute_sms}: {'ok' if ok else 'MISMATCH'}"
    print("check", out, flush=True)
    return out


class Run:
    """The run's state: the pools, the peak, the result dict saved after every part, a deadline."""

    def __init__(self, args, plan: Plan) -> None:
        self.args, self.plan = args, plan
        self.t0 = time.monotonic()
        self.deadline = self.t0 + args.budget_s
        self.res: dict = {"args": vars(args), "plan": dataclasses.asdict(plan), "skipped": [], "errors": []}

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def save(self) -> None:
        self.res["wall_s"] = time.monotonic() - self.t0
        if "overlap" in self.res:
            self.res["verdicts"] = verdicts(self.res)
        Path(self.args.out).write_text(json.dumps(self.res, indent=1, default=str))


def setup(run: Run):
    """Pools (scatter_setup.Setup, one THP host pool), the copy peak, the attention stand-in."""
    from gpu_replay.scatter_bench import peak
    from gpu_replay.scatter_setup import Setup, environment

    a = run.args
    run.res["env"] = environment()
    s = Setup(SimpleNamespace(allocs="thp", device_cap_gib=a.device_cap_gib, host_cap_gib=a.host_cap_gib))
    run.res["alloc"] = s.alloc_info
    if "thp" not in s.hosts:
        raise RuntimeError(f"no THP host pool: {s.alloc_info}")
    run.res["peak"] = peak(s, a.reps)
    run.res["peak_gbps"] = {
        d: max(v[d]["gbps_best"] for v in run.res["peak"].values()) for d in ("h2d", "d2h")
    }
    run.save()
    return s, Attn()


def overlaps(run: Run, s, side: Side, full_stream, attn: Attn) -> None:
    """Every overlap cell of one side, while the budget lasts (the rest is listed as skipped)."""
    plan, peak = run.plan, run.res["peak_gbps"]
    for prefix in plan.overlap_prefixes:
        for d in plan.directions:
            for order in plan.orders:
                cell = {"mode": side.mode, "k": side.k, "prefix": prefix, "direction": d, "order": order}
                if run.left() < run.args.reserve_s:
                    run.res["skipped"].append(cell)
                    continue
                rows = overlap_cell(s, side, full_stream, attn, plan, prefix, d, order, peak)
                run.res.setdefault("overlap", []).extend(rows)
        run.save()


def baseline(run: Run, s, attn: Attn) -> None:
    """No partition: PER_LAYER_TMA (one block per SM) on one ordinary stream, compute on another."""
    torch = _torch()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    side = Side("none", 0, torch.cuda.Stream(), torch.cuda.Stream(), tma_mover(s, 0), sms, sms)
    curve(s, side, run.plan, run.res["peak_gbps"], run.args.reps, run.res.setdefault("curve", []))
    run.save()
    overlaps(run, s, side, torch.cuda.Stream(), attn)


def one_k(run: Run, s, attn: Attn, k: int) -> None:
    """A partition of ``k`` SMs for loads: check, curve, overlap cells (split and plain_load)."""
    from gpu_replay.green_ctx import make_partition

    torch = _torch()
    backends = tuple(run.args.backends.split(","))
    part, errors = make_partition(k, 0, backends)
    run.res.setdefault("partitions", []).append({"k": k, "errors": errors} | (part.record() if part else {}))
    print("partition", k, part.record() if part else "unsupported", errors or "", flush=True)
    if part is None:
        return
    full = torch.cuda.Stream()
    try:
        sides = {
            "split": Side(
                "split",
                k,
                part.load_stream,
                part.compute_stream,
                tma_mover(s, part.load_sms),
                part.load_sms,
                part.compute_sms,
            ),
            "plain_load": Side(
                "plain_load",
                k,
                torch.cuda.Stream(),
                part.compute_stream,
                tma_mover(s, part.load_sms),
                part.load_sms,
                part.compute_sms,
            ),
        }
        run.res.setdefault("check", []).append(check(s, sides["split"], attn))
        curve(
            s, sides["split"], run.plan, run.res["peak_gbps"], run.args.reps, run.res.setdefault("curve", [])
        )
        run.save()
        for mode in run.plan.modes:
            overlaps(run, s, sides[mode], full, attn)
    finally:
        part.close()


def dry_run(args, plan: Plan) -> dict:
    """The plan's tables from synthetic numbers (no CUDA): what a run's JSON and log look like."""
    from gpu_replay.green_ctx import torch_support

    res = synthetic_result(plan)
    res |= {"args": vars(args), "plan": dataclasses.asdict(plan), "support": torch_support()}
    Path(args.out).write_text(json.dumps(res, indent=1, default=str))
    return res


def report(res: dict) -> str:
    return "\n\n".join((curve_table(res), overlap_table(res), verdict_lines(res)))


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "green.json"))
    ap.add_argument("--ks", default="4,8,16,24,32", help="SMs set apart for the loads")
    ap.add_argument("--modes", default="split,plain_load")
    ap.add_argument("--backends", default="driver,torch", help="green-context paths, in order of preference")
    ap.add_argument("--budget-s", type=float, default=330.0, help="overlap cells stop when this runs out")
    ap.add_argument("--reserve-s", type=float, default=15.0, help="the last seconds are left to saving")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--host-cap-gib", type=float, default=8.0)
    ap.add_argument("--device-cap-gib", type=float, default=8.0)
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--load-blocks", type=int, default=0, help="cap on the load blocks (0: one per SM)")
    ap.add_argument("--chunk-kib", type=int, default=0, help="bytes per bulk op (0: PER_LAYER_TMA's 16)")
    ap.add_argument("--stages", type=int, default=0, help="ring depth (0: PER_LAYER_TMA's 2)")
    ap.add_argument("--dry-run", action="store_true", help="no CUDA: synthetic numbers through the tables")
    return ap.parse_args(argv)


def main(argv=None) -> None:
    args = parse(argv)
    plan = Plan(ks=tuple(int(x) for x in args.ks.split(",") if x), modes=tuple(args.modes.split(",")))
    if args.dry_run:
        print(report(dry_run(args, plan)), flush=True)
        return
    from gpu_replay.green_ctx import torch_support

    run = Run(args, plan)
    run.res["support"] = torch_support()
    print("support", run.res["support"], flush=True)
    s, attn = setup(run)
    s.load_shape = {"blocks": args.load_blocks, "chunk": args.chunk_kib << 10, "stages": args.stages}
    run.res["load_shape"] = s.load_shape
    run.res["attn"] = {"t_big_s": attn.t_big, "t_small_s": attn.t_small}
    print(
        "peak",
        run.res["peak_gbps"],
        "attn",
        run.res["attn"],
        f"at {time.monotonic() - run.t0:.1f} s",
        flush=True,
    )
    steps = [] if args.no_baseline else [("baseline", lambda: baseline(run, s, attn))]
    steps += [(f"k{k}", lambda k=k: one_k(run, s, attn, k)) for k in plan.ks]
    for name, step in steps:
        try:
            step()
        except RuntimeError as exc:  # a refused partition or launch: recorded, the rest goes on
            run.res["errors"].append({"step": name, "error": f"{type(exc).__name__}: {exc}"})
            print("error", name, exc, flush=True)
        run.save()
        print(f"-- {name} done at {time.monotonic() - run.t0:.1f} s", flush=True)
    print(report(run.res), flush=True)


if __name__ == "__main__":
    main()
