"""One-launch layer loads (:class:`~gpu_replay.transfer_layers.LayersLoad`) against per-layer
launches: per-layer bandwidth alone and the share of the load hidden behind attention on the
whole GPU, in one device call (issue 13, ninth session).

Workload as in :mod:`gpu_replay.scatter_green` (gpt-oss-120b TP 2, page 64, the full pool's 18
layers, 64 KiB per page and layer, random page ids, layer_first host pool on 2 MiB pages; its
copy peak, its causal-SDPA stand-in). Movers: ``tma132`` (PER_LAYER_TMA, one launch per layer on
one block per SM, the sixth session's per-layer path), ``tma8`` (the same on 8 blocks) and
``layers[GxCkS]`` (one launch, G blocks, S stages of C KiB). The hidden fraction is always against
the compute timed alone on the whole GPU (no partition here). Orders: ``load_first``,
``compute_first``, and ``pipelined`` (H2D: layer i's attention waits for layer i's load: an event
per layer for per-layer launches, ``cuStreamWaitValue32`` on the layer counter for one launch).

    python -m gpu_replay.scatter_persist --out $OUT/persist.json
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import statistics
import time

from gpu_replay.green_plan import hidden, pct


@dataclasses.dataclass
class Mover:
    name: str
    fn: object
    one_launch: bool
    priority: int = 0


def _torch():
    import torch

    return torch


def compose_calls(target_s: float, unit_s: list[float]) -> list[int]:
    """Calls of each unit (longest first) whose summed time comes closest to ``target_s``:
    as many of each unit as fit, the last unit rounded, at least one call in all. Whole SDPA
    calls of one size missed the 1.0 / 1.25 / 1.5x ratios by up to 20% at 4k tokens (this
    session's first run: 0.85x for 1.0x); two or three sizes hit them within a few percent."""
    counts, left = [], target_s
    for i, u in enumerate(unit_s):
        n = round(left / u) if i == len(unit_s) - 1 else int(left // u)
        n = max(0, n)
        counts.append(n)
        left -= n * u
    if sum(counts) == 0:
        counts[-1] = 1
    return counts


class Attn3:
    """Causal SDPA calls (the stand-in of :mod:`gpu_replay.scatter_green`) in several shapes, each
    timed alone on the whole GPU, and work made of them to a target time. ``mixed`` (the first
    runs) composes 4 x 32 heads x 4,096 queries with 2,048- and 1,024-query calls of one sequence;
    ``heads`` keeps 4,096 queries in every call and composes with 32, 16 and 8 heads of one
    sequence (every call at least 256 blocks: fewer short kernels, whose waves a few SMs taken by
    the loads lengthen most); ``gemm`` composes bf16 GEMMs (a diagnostic, not attention-like).
    Per-layer work (the pipelined order) uses the short attention calls."""

    SHAPES = {
        "big": (4, 32, 4096),
        "small": (1, 32, 2048),
        "tiny": (1, 32, 1024),
        "h32": (1, 32, 4096),
        "h16": (1, 16, 4096),
        "h8": (1, 8, 4096),
    }
    # bf16 GEMMs (M, K, N): not attention-like; a diagnostic of whether the slowdown beside the
    # loads is the attention's own (``gemm`` mode)
    GEMMS = {"mm4k": (4096, 4096, 4096), "mm2k": (2048, 4096, 4096), "mm1k": (1024, 4096, 4096)}
    UNITS = {
        "mixed": ("big", "small", "tiny"),
        "heads": ("big", "h32", "h16", "h8"),
        "gemm": ("mm4k", "mm2k", "mm1k"),
        "layer": ("small", "tiny"),
    }

    def __init__(self, mode: str = "mixed") -> None:
        from gpu_replay.scatter_green import _timed

        torch = _torch()
        self.mode = mode
        self.sdpa = torch.nn.functional.scaled_dot_product_attention
        self.qkv = {}
        for name, (b, h, n) in self.SHAPES.items():
            q = torch.randn(b, h, n, 64, device="cuda", dtype=torch.bfloat16)
            self.qkv[name] = (q, torch.randn_like(q), torch.randn_like(q))
        for name, (m, k, n) in self.GEMMS.items():
            a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
            self.qkv[name] = (a, b, torch.empty(m, n, device="cuda", dtype=torch.bfloat16))
        names = (*self.SHAPES, *self.GEMMS)
        self.t = {n: statistics.median(_timed(lambda n=n: self.run({n: 1}), 10)[0]) for n in names}
        self.t_big, self.t_small, self.t_tiny = self.t["big"], self.t["small"], self.t["tiny"]

    def run(self, counts: dict) -> None:
        torch = _torch()
        for name, n in counts.items():
            q, k, v = self.qkv[name]
            for _ in range(n):
                if name in self.GEMMS:
                    torch.mm(q, k, out=v)
                else:
                    self.sdpa(q, k, v, is_causal=True)

    def work(self, target_s: float, per_layer_units: bool = False):
        """A callable of compute close to ``target_s``, and its calls per shape."""
        names = self.UNITS["layer" if per_layer_units else self.mode]
        counts = dict(zip(names, compose_calls(target_s, [self.t[n] for n in names]), strict=True))
        return (lambda: self.run(counts)), counts


def movers(s, names: list[str]) -> dict:
    """The movers named (see the module doc for the names)."""
    from gpu_replay.scatter_green import tma_mover
    from gpu_replay.transfer_layers import LayersLoad

    out = {}
    for name in names:
        base, _, prio = name.partition("@")
        p = -1 if prio == "hi" else 0
        if base.startswith("tma"):
            out[name] = Mover(name, tma_mover(s, int(base[3:])), False, p)
            continue
        g, ck, st, ns = re.fullmatch(r"layers\[(\d+)x(\d+)kx(\d+)\](n?)", base).groups()
        fn = LayersLoad(s.hosts["thp"], s.dev, int(g), int(ck) << 10, int(st), signal=not ns)
        out[name] = Mover(name, fn, True, p)
    return out


def issue_load(stream, m: Mover, hi, di, n: int, d: str, done=None):
    """The whole load on ``stream`` after the caller's work; returns its span's events. ``done``
    (a list) receives one event per layer for per-layer launches."""
    from gpu_replay.scatter_green import _ev, issue_loads

    torch = _torch()
    if not m.one_launch:
        return issue_loads(stream, m.fn, hi, di, n, d, done=done)
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        e0, e1 = _ev(), _ev()
        e0.record(stream)
        m.fn(hi, di, tuple(range(n)), d)
        e1.record(stream)
    return e0, e1


def load_alone(s, m: Mover, stream, hi, di, d: str, reps: int) -> tuple[float, float]:
    from gpu_replay.scatter_green import _timed

    torch = _torch()

    def fn():
        marks = issue_load(stream, m, hi, di, s.geo.layer_num, d)
        torch.cuda.current_stream().wait_stream(stream)
        return marks

    tot, spans = _timed(fn, reps)
    return statistics.median(tot), statistics.median(spans)


def curve(s, m: Mover, stream, prefixes, peak: dict, reps: int) -> list:
    rows = []
    for d in ("h2d", "d2h"):
        for prefix in prefixes:
            n_pages = prefix // s.geo.page_size
            hi, di = s.indices(n_pages, True)
            t, _ = load_alone(s, m, stream, hi, di, d, reps)
            g = n_pages * s.geo.page_layer_bytes * s.geo.layer_num / t / 1e9
            rows.append(
                {"mover": m.name, "direction": d, "prefix": prefix, "gbps": g, "pct": pct(g, peak[d])}
            )
    print(
        f"curve {m.name:22s} "
        + " ".join(f"{r['direction'][0]}{r['prefix'] // 1024}k {r['pct']:.1f}" for r in rows),
        flush=True,
    )
    return rows


def _both(s, m: Mover, ls, cs, hi, di, d: str, order: str, work, per_layer: bool):
    from gpu_replay.scatter_green import _ev, issue_compute

    torch = _torch()
    n = s.geo.layer_num
    c0, c1 = _ev(), _ev()

    def compute():
        cs.wait_stream(torch.cuda.current_stream())
        c0.record(cs)
        issue_compute(cs, work, n, per_layer)
        c1.record(cs)

    if order == "load_first":
        marks = issue_load(ls, m, hi, di, n, d)
        compute()
    elif order == "compute_first":
        compute()
        marks = issue_load(ls, m, hi, di, n, d)
    else:  # pipelined load: layer i's attention waits for layer i
        done: list = []
        marks = issue_load(ls, m, hi, di, n, d, done=done)
        cs.wait_stream(torch.cuda.current_stream())
        c0.record(cs)
        with torch.cuda.stream(cs):
            for i in range(n):
                if m.one_launch:
                    m.fn.wait(i, cs)
                else:
                    cs.wait_event(done[i])
                work()
        c1.record(cs)
    main = torch.cuda.current_stream()
    main.wait_stream(cs)
    main.wait_stream(ls)
    return marks, (c0, c1)


def overlap_cell(s, m: Mover, ls, cs, full, attn, prefix: int, d: str, order: str, ratios, peak) -> list:
    from gpu_replay.scatter_green import _timed, issue_compute

    torch = _torch()
    n_pages = prefix // s.geo.page_size
    hi, di = s.indices(n_pages, True)
    nbytes = n_pages * s.geo.page_layer_bytes * s.geo.layer_num
    t_load, span_alone = load_alone(s, m, ls, hi, di, d, 7)
    rows = []
    for ratio in ratios:
        per_layer = order == "pipelined"
        target = ratio * t_load / (s.geo.layer_num if per_layer else 1)

        def comp(work, per_layer=per_layer):
            issue_compute(full, work, s.geo.layer_num, per_layer)
            torch.cuda.current_stream().wait_stream(full)

        # SDPA calls queued back to back run faster than each timed alone: compose, time the
        # whole compute, and compose once more for the target scaled by the miss
        work, calls = attn.work(target, per_layer)
        t_full = statistics.median(_timed(lambda w=work: comp(w), 5)[0])
        if t_full > 0 and abs(t_full / (ratio * t_load) - 1) > 0.03:
            work, calls = attn.work(target * ratio * t_load / t_full, per_layer)
            t_full = statistics.median(_timed(lambda w=work: comp(w), 5)[0])
        comp_spans: list = []

        def both_fn(w=work, p=per_layer, out=comp_spans):
            marks, cmarks = _both(s, m, ls, cs, hi, di, d, order, w, p)
            out.append(cmarks)
            return marks

        tot, spans = _timed(both_fn, 7)
        comp_ovl = statistics.median(a.elapsed_time(b) / 1e3 for a, b in comp_spans[-7:])
        both, span = statistics.median(tot), statistics.median(spans)
        rows.append(
            {
                "mover": m.name,
                "priority": m.priority,
                "direction": d,
                "order": order,
                "prefix": prefix,
                "ratio": ratio,
                "load_s": t_load,
                "compute_s": t_full,
                "compute_over_load": t_full / t_load,
                "both_s": both,
                "hidden": hidden(t_load, t_full, both),
                "compute_calls": calls,
                "compute_span_overlapped_s": comp_ovl,
                "pct_alone": pct(nbytes / span_alone / 1e9, peak[d]),
                "pct_overlapped": pct(nbytes / span / 1e9, peak[d]),
            }
        )
    print(
        f"overlap {m.name:22s} {prefix // 1024}k {d} {order:13s} load {rows[0]['pct_alone']:.1f}% "
        "c/l "
        + "/".join(f"{r['compute_over_load']:.2f}" for r in rows)
        + " hidden "
        + "/".join(f"{r['hidden']:.2f}" for r in rows)
        + " compute x"
        + "/".join(f"{r['compute_span_overlapped_s'] / r['compute_s']:.2f}" for r in rows),
        flush=True,
    )
    return rows


def check(s, m: Mover, cs, ls, attn) -> dict:
    """Bytes of every layer right in both directions with compute running beside; for a
    signalled one-launch mover also the pipelined read: the compute stream copies out each layer
    right after waiting for it, and every copy must equal the host's rows."""
    from gpu_replay.scatter_green import issue_compute
    from gpu_replay.scatter_setup import _same

    torch = _torch()
    n, host, dev = s.geo.layer_num, s.hosts["thp"], s.dev
    hi, di = s.indices(40, True)
    h = hi.cpu()
    for lay in range(n):
        dev.k[lay][di], dev.v[lay][di] = -7, -7
    issue_compute(cs, lambda: attn.run({"big": 2}), n, False)
    issue_load(ls, m, hi, di, n, "h2d")
    torch.cuda.synchronize()
    out = {
        "h2d": all(_same(dev.k[i][di], host.k[i][h]) and _same(dev.v[i][di], host.v[i][h]) for i in range(n))
    }
    for lay in range(n):
        dev.k[lay][di], dev.v[lay][di] = lay + 1, -(lay + 1)
    issue_load(ls, m, hi, di, n, "d2h")
    torch.cuda.synchronize()
    out["d2h"] = all(
        _same(dev.k[i][di], host.k[i][h]) and _same(dev.v[i][di], host.v[i][h]) for i in range(n)
    )
    if m.one_launch and m.fn.signal:
        hi, di = s.indices(256, True)
        h = hi.cpu()
        for lay in range(n):
            dev.k[lay][di], dev.v[lay][di] = -7, -7
        torch.cuda.synchronize()
        snaps = []
        issue_load(ls, m, hi, di, n, "h2d")
        cs.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(cs):
            for i in range(n):
                m.fn.wait(i, cs)
                snaps.append((dev.k[i][di].clone(), dev.v[i][di].clone()))
        torch.cuda.synchronize()
        out["pipelined"] = all(
            _same(a, host.k[i][h]) and _same(b, host.v[i][h]) for i, (a, b) in enumerate(snaps)
        )
    print("check", m.name, out, flush=True)
    return out


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "persist.json"))
    ap.add_argument(
        "--curve-movers",
        default="tma132,tma8,layers[4x16kx4],layers[4x32kx4],layers[8x16kx4],layers[8x16kx4]n,"
        "layers[16x16kx2],layers[32x16kx2]",
    )
    ap.add_argument(
        "--overlap-movers", default="tma8,layers[8x16kx4]@hi,layers[4x16kx4]@hi,layers[4x32kx4]@hi"
    )
    ap.add_argument("--orders", default="compute_first,load_first,pipelined")
    ap.add_argument("--prefixes", default="1024,2048,4096,8192,16384,32768")
    ap.add_argument("--overlap-prefixes", default="4096,32768")
    ap.add_argument("--ratios", default="1.0,1.25,1.5")
    ap.add_argument("--directions", default="h2d,d2h")
    ap.add_argument("--compute", default="mixed", choices=("mixed", "heads", "gemm"), help="see Attn3")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--budget-s", type=float, default=300.0)
    ap.add_argument("--host-cap-gib", type=float, default=8.0)
    ap.add_argument("--device-cap-gib", type=float, default=8.0)
    return ap.parse_args(argv)


def main(argv=None) -> None:
    from gpu_replay.green_plan import Plan
    from gpu_replay.scatter_green import Run, setup

    args = parse(argv)
    args.reserve_s = 10.0
    run = Run(args, Plan(ks=(), modes=()))
    torch = _torch()
    s, _ = setup(run)
    attn = Attn3(args.compute)
    peak = run.res["peak_gbps"]
    run.res["attn"] = {"mode": attn.mode, "unit_s": attn.t}
    print("peak", peak, "attn", run.res["attn"], flush=True)
    names = list(dict.fromkeys(args.curve_movers.split(",") + args.overlap_movers.split(",")))
    ms = movers(s, names)
    streams = {p: torch.cuda.Stream(priority=p) for p in (0, -1)}
    cs, full = torch.cuda.Stream(), torch.cuda.Stream()
    run.res["check"] = {n: check(s, ms[n], cs, streams[ms[n].priority], attn) for n in names}
    run.save()
    prefixes = [int(x) for x in args.prefixes.split(",")]
    run.res["curve"] = []
    for n in args.curve_movers.split(","):
        run.res["curve"] += curve(s, ms[n], streams[ms[n].priority], prefixes, peak, args.reps)
    run.save()
    run.res["cells"], run.res["skipped"] = [], []
    ratios = [float(x) for x in args.ratios.split(",")]
    for prefix in [int(x) for x in args.overlap_prefixes.split(",")]:
        for d in args.directions.split(","):
            for order in args.orders.split(","):
                for n in args.overlap_movers.split(","):
                    cell = {"mover": n, "prefix": prefix, "direction": d, "order": order}
                    if order == "pipelined" and d == "d2h" or run.left() < args.reserve_s:
                        run.res["skipped"].append(cell)
                        continue
                    m = ms[n]
                    run.res["cells"] += overlap_cell(
                        s, m, streams[m.priority], cs, full, attn, prefix, d, order, ratios, peak
                    )
            run.save()
    run.save()
    print(f"done at {time.monotonic() - run.t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
