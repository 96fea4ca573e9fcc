"""Transfer-model training points and bandwidth probes in one device call (issue 13, session 4).

Parts (``--parts``, comma-separated):

- ``grid``: the time of one isolated transfer call (synchronized before it, as a replay step's
  first call finds the GPU) against its page count, 1-1024 random distinct pages, for the three
  implementations the op-log replay times (``cuda`` kernel/layer_first, ``triton``
  kernel/page_first, ``cxx_batch`` direct/page_first_direct, each with the replay's default
  options): D2H all 18 layers (HiCache's write-back), H2D one layer (load-back, per layer) and
  H2D all layers. Training data for the transfer model (gpu_replay/transfer_model.py); no
  held-out log is involved.
- ``runs``: bandwidth against the length of contiguous page runs (1 = random pages; 2-64 pages
  adjacent on both sides, as freshly sorted free lists give), bulk (512 pages, all layers) and
  per-layer (4k and 32k prefix, 18 layers back to back), copy engines (``cxx_batch``: adjacent
  pages merged into one copy) and the ``cuda`` row kernel; and the per-layer curve 1k-32k of the
  row kernel issued on two streams in turn (layer i on stream i % 2, so one layer's launch ramp
  overlaps the previous layer's tail).
- ``replay``: ``kvplan gpu-replay`` of the four calibration logs (fit and held-out, fixed in
  gpu_replay/calibration/split.json) with write-back, ``--repeats`` timed replays each after one
  warm-up, per-call pages and seconds in the CSV.

    python benchmarks/gpu_transfer_calib.py --out $OUT/tcal --parts grid,runs,replay
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

import gpu_calibrate as cal  # noqa: E402  (stubs the trace readers where pandas is missing)
import gpu_transfer as base  # noqa: E402
import torch  # noqa: E402

from gpu_replay.transfer import KVTransfer  # noqa: E402

GRID_PAGES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
RUNS = (1, 2, 4, 8, 16, 64)


def _args(ns: argparse.Namespace) -> argparse.Namespace:
    """The Bench's pool options (gpt-oss-120b TP 2, page 64, capped pools)."""
    return argparse.Namespace(
        model="gpt-oss-120b",
        tp=2,
        page_size=64,
        gpu_preset="H100",
        device_cap_gib=ns.device_cap_gib,
        host_cap_gib=ns.host_cap_gib,
        hybrid_fractions="",
        tma_programs="",
        tma_toks="",
    )


def _run_pages(n: int, run: int, total: int, gen: torch.Generator) -> torch.Tensor:
    """``n`` distinct pages in runs of ``run`` adjacent ids (random run starts)."""
    if run <= 1:
        return base._pages(n, total, gen)
    starts = torch.randperm((total - 1) // run, generator=gen)[: -(-n // run)] * run + 1
    return (starts[:, None] + torch.arange(run)).flatten()[:n]


def _indices(b, n: int, backend: str, run: int = 1):
    hp = _run_pages(n, run, b.geo.host_pages, b.gen)
    dp = _run_pages(n, run, b.geo.device_pages, b.gen)
    hi, di = base._slots(hp, b.geo.page_size), base._slots(dp, b.geo.page_size)
    return (hi.cuda(), di.cuda()) if backend == "kernel" else (hi, di)


def _isolated(fn, reps: int) -> list[float]:
    """Seconds of single calls, each after a synchronize (CUDA events; host issue time counts)."""
    fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        out.append(s.elapsed_time(e) / 1e3)
    return out


def grid(b, reps: int, res: dict) -> None:
    n_layers = b.geo.layer_num
    for name, (backend, impl, layout) in cal.IMPLS.items():
        mover = KVTransfer(b.hosts[layout], b.dev, backend, impl)
        for p in GRID_PAGES:
            hi, di = _indices(b, p, backend)
            for mode, layers, d in (
                ("d2h_all", tuple(range(n_layers)), "d2h"),
                ("h2d_layer", (0,), "h2d"),
                ("h2d_all", tuple(range(n_layers)), "h2d"),
            ):
                secs = _isolated(lambda m=mover, h=hi, g=di, ls=layers, d=d: m.transfer(h, g, ls, d), reps)
                res["grid"].append(
                    {
                        "impl": name,
                        "mode": mode,
                        "pages": p,
                        "layers": len(layers),
                        "bytes": p * len(layers) * b.geo.page_layer_bytes,
                        "median_s": statistics.median(secs),
                        "secs": secs,
                    }
                )
            print(
                f"grid {name:9s} {p:5d} pages d2h_all {1e6 * res['grid'][-3]['median_s']:9.1f} us", flush=True
            )


def _two_stream(mover, hi, di, n_layers: int, d: str, streams) -> None:
    cur = torch.cuda.current_stream()
    for s in streams:
        s.wait_stream(cur)
    for layer in range(n_layers):
        with torch.cuda.stream(streams[layer % 2]):
            mover.transfer(hi, di, (layer,), d)
    for s in streams:
        cur.wait_stream(s)


def runs(b, reps: int, res: dict) -> None:
    n_layers, plb = b.geo.layer_num, b.geo.page_layer_bytes
    movers = {
        "cuda": ("kernel", KVTransfer(b.hosts["layer_first"], b.dev, "kernel", "cuda")),
        "cxx_batch[s1]": ("direct", KVTransfer(b.hosts["layer_first"], b.dev, "direct", "cxx_batch")),
        "cxx_batch[s2mb256]": (
            "direct",
            KVTransfer(b.hosts["layer_first"], b.dev, "direct", "cxx_batch", streams=2, max_batch=256),
        ),
    }
    for run in RUNS:
        for name, (backend, m) in movers.items():
            hi, di = _indices(b, 512, backend, run)
            for d in ("h2d", "d2h"):
                secs = base._time(
                    lambda m=m, h=hi, g=di, d=d: m.transfer(h, g, tuple(range(n_layers)), d), reps
                )
                row = {"kind": "bulk", "impl": name, "run": run, "direction": d, "pages": 512}
                res["runs"].append(row | base._stats(512 * n_layers * plb, secs))
            for prefix in (4096, 32768):
                n = prefix // b.geo.page_size
                hi, di = _indices(b, n, backend, run)
                for d in ("h2d", "d2h"):

                    def loop(m=m, h=hi, g=di, d=d):
                        for layer in range(n_layers):
                            m.transfer(h, g, (layer,), d)

                    secs = [s / n_layers for s in base._time(loop, reps)]
                    row = {"kind": "per_layer", "impl": name, "run": run, "direction": d, "prefix": prefix}
                    res["runs"].append(row | base._stats(n * plb, secs))
            last = [r for r in res["runs"] if r["impl"] == name and r["run"] == run]
            print(
                f"runs {name:18s} run {run:3d} "
                + " ".join(
                    f"{r['kind'][:4]}{r.get('prefix', '')}:{r['direction']} {r['gbps_median']:.1f}"
                    for r in last
                ),
                flush=True,
            )
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    m = movers["cuda"][1]
    for prefix in base.PREFIXES:
        n = prefix // b.geo.page_size
        hi, di = _indices(b, n, "kernel")
        for d in ("h2d", "d2h"):
            for mode in ("one_stream", "two_streams"):
                if mode == "one_stream":

                    def fn(h=hi, g=di, d=d):
                        for layer in range(n_layers):
                            m.transfer(h, g, (layer,), d)
                else:
                    fn = lambda h=hi, g=di, d=d: _two_stream(m, h, g, n_layers, d, streams)  # noqa: E731
                secs = [s / n_layers for s in base._time(fn, reps)]
                row = {"kind": "per_layer_curve", "impl": f"cuda[{mode}]", "direction": d, "prefix": prefix}
                res["runs"].append(row | base._stats(n * b.geo.page_layer_bytes, secs))
        print(
            f"curve {prefix:6d} "
            + " ".join(f"{r['impl']}:{r['direction']} {r['gbps_median']:.1f}" for r in res["runs"][-4:]),
            flush=True,
        )


def _log_pages(n: int, lens: list[int], total: int, gen: torch.Generator) -> torch.Tensor:
    """``n`` distinct pages whose runs of adjacent ids follow ``lens`` (run lengths drawn from a
    log's evictions), the runs in random order with random gaps."""
    pick = torch.randint(len(lens), (4 * n,), generator=gen).tolist()
    runs, got = [], 0
    for i in pick:
        r = min(lens[i], n - got)
        runs.append(r)
        got += r
        if got == n:
            break
    free = total - 1 - n - len(runs)
    cuts = torch.sort(torch.randint(free + 1, (len(runs),), generator=gen)).values
    gaps = torch.diff(cuts, prepend=torch.zeros(1, dtype=cuts.dtype)).tolist()
    out, pos = [], 1
    for r, g in zip(runs, gaps, strict=True):
        pos += g
        out.append(torch.arange(pos, pos + r))
        pos += r + 1
    return torch.cat(out)


def runs2(b, reps: int, res: dict) -> None:
    """Copy engines with merged page runs: bulk by run length and by the logs' run lengths, and
    the per-layer curve 1k-32k; the ``cuda`` kernel beside them (same pages)."""
    n_layers, plb, page = b.geo.layer_num, b.geo.page_layer_bytes, b.geo.page_size
    host = b.hosts["layer_first"]
    movers = {
        "cuda": ("kernel", KVTransfer(host, b.dev, "kernel", "cuda")),
        "cxx_batch[s1]": ("direct", KVTransfer(host, b.dev, "direct", "cxx_batch")),
        "cxx_batch[s1mb128]": ("direct", KVTransfer(host, b.dev, "direct", "cxx_batch", max_batch=128)),
        "cxx_batch[s2mb128]": (
            "direct",
            KVTransfer(host, b.dev, "direct", "cxx_batch", streams=2, max_batch=128),
        ),
        "cxx_batch[s2mb256]": (
            "direct",
            KVTransfer(host, b.dev, "direct", "cxx_batch", streams=2, max_batch=256),
        ),
    }
    shapes = [(f"run{r}", r) for r in (1, 2, 4, 8, 16, 32, 64)]
    shapes += [(f"log:{k}", v) for k, v in sorted(b.run_lengths.items()) if isinstance(v, list)]

    def pages(n, shape):
        """(host, device) pages; a log shape's host side gets the device side's run breaks
        (HiCache's host allocator hands out free pages in order, so a run stays a run)."""
        if isinstance(shape, int):
            return _run_pages(n, shape, b.geo.host_pages, b.gen), _run_pages(
                n, shape, b.geo.device_pages, b.gen
            )
        dp = _log_pages(n, shape, b.geo.device_pages, b.gen)
        br = torch.nonzero(torch.diff(dp) != 1).flatten() + 1
        lens = torch.diff(torch.cat([torch.tensor([0]), br, torch.tensor([len(dp)])])).tolist()
        return _place(lens, b.geo.host_pages, b.gen), dp

    for label, shape in shapes:
        hp, dp = pages(512, shape)
        for name, (backend, m) in movers.items():
            hi, di = base._slots(hp, page), base._slots(dp, page)
            if backend == "kernel":
                hi, di = hi.cuda(), di.cuda()
            for d in ("h2d", "d2h"):
                secs = base._time(
                    lambda m=m, h=hi, g=di, d=d: m.transfer(h, g, tuple(range(n_layers)), d), reps
                )
                row = {"kind": "bulk", "impl": name, "pages_shape": label, "direction": d, "pages": 512}
                res["runs2"].append(row | base._stats(512 * n_layers * plb, secs))
        last = [r for r in res["runs2"] if r["pages_shape"] == label and r["kind"] == "bulk"]
        print(
            f"bulk {label:12s} "
            + " ".join(f"{r['impl']}:{r['direction']} {r['gbps_median']:.1f}" for r in last),
            flush=True,
        )
    for label, shape in shapes:
        if label not in ("run1", "run2", "run4", "run16") and not label.startswith("log:"):
            continue
        for prefix in base.PREFIXES:
            n = prefix // page
            hp, dp = pages(n, shape)
            for name in ("cuda", "cxx_batch[s1]"):
                backend, m = movers[name]
                hi, di = base._slots(hp, page), base._slots(dp, page)
                if backend == "kernel":
                    hi, di = hi.cuda(), di.cuda()
                for d in ("h2d", "d2h"):

                    def loop(m=m, h=hi, g=di, d=d):
                        for layer in range(n_layers):
                            m.transfer(h, g, (layer,), d)

                    secs = [s / n_layers for s in base._time(loop, reps)]
                    row = {"kind": "per_layer", "impl": name, "pages_shape": label, "direction": d}
                    res["runs2"].append(row | {"prefix": prefix} | base._stats(n * plb, secs))
        last = [r for r in res["runs2"] if r["pages_shape"] == label and r["kind"] == "per_layer"]
        print(
            f"per-layer {label:12s} "
            + " ".join(
                f"{r['prefix'] // 1024}k:{r['impl'][:6]}:{r['direction']} {r['gbps_median']:.1f}"
                for r in last
            ),
            flush=True,
        )


def _check_moves(mover, host, dev, hp, dp, layers, direction: str) -> None:
    """Poison the destination rows, move, compare every moved row with its source (token rows by
    plain indexing, both components, every layer)."""
    page = host.geo.page_size
    hi, di = base._slots(hp, page), base._slots(dp, page)
    for comp in ("k", "v"):
        for lay in layers:
            dst = dev.k[lay] if comp == "k" else dev.v[lay]
            hv = host.layer_view(comp, lay)
            if direction == "h2d":
                dst.view(torch.int16)[di.cuda()] = -7
            else:
                hv.view(torch.int16)[hi] = -7
    mover.transfer(hi, di, layers, direction)
    torch.cuda.synchronize()
    for comp in ("k", "v"):
        for lay in layers:
            d = (dev.k[lay] if comp == "k" else dev.v[lay])[di.cuda()].cpu()
            h = host.layer_view(comp, lay)[hi]
            if not torch.equal(d.view(torch.int16), h.view(torch.int16)):
                raise AssertionError(f"{direction} layer {lay} {comp}: moved rows differ")


def runs3_own_stream(b, reps: int, res: dict) -> None:
    """``runs3`` issued and timed on a stream of its own, as SGLang's load/write streams are (no
    side-stream hand-off per call: the batch call refuses only the legacy default stream)."""
    first = len(res["runs3"])
    with torch.cuda.stream(torch.cuda.Stream()):
        runs3(b, reps, res, check=False)
    for r in res["runs3"][first:]:
        r["stream"] = "own"


def runs3(b, reps: int, res: dict, check: bool = True) -> None:
    """Copy engines, one cudaMemcpy2DAsync per merged page run covering all layers (layer_first
    host against a stacked device pool): checked on run-structured pages, then bulk and per-layer
    bandwidth beside the batch copies of the same pages."""
    n_layers, plb, page = b.geo.layer_num, b.geo.page_layer_bytes, b.geo.page_size
    host = b.hosts["layer_first"]
    pitched = KVTransfer(host, b.dev_stacked, "direct", "cxx_pitched")
    movers = {
        "cxx_pitched[merged]": (pitched, b.dev_stacked),
        "cxx_batch[s1mb128]": (KVTransfer(host, b.dev, "direct", "cxx_batch", max_batch=128), b.dev),
        "cxx_batch[s2mb128]": (
            KVTransfer(host, b.dev, "direct", "cxx_batch", streams=2, max_batch=128),
            b.dev,
        ),
    }
    shapes = [(f"run{r}", r) for r in (1, 4, 16, 64)]
    shapes += [(f"log:{k}", v) for k, v in sorted(b.run_lengths.items()) if isinstance(v, list)]

    def pages(n, shape):
        if isinstance(shape, int):
            return _run_pages(n, shape, b.geo.host_pages, b.gen), _run_pages(
                n, shape, b.geo.device_pages, b.gen
            )
        dp = _log_pages(n, shape, b.geo.device_pages, b.gen)
        br = torch.nonzero(torch.diff(dp) != 1).flatten() + 1
        lens = torch.diff(torch.cat([torch.tensor([0]), br, torch.tensor([len(dp)])])).tolist()
        return _place(lens, b.geo.host_pages, b.gen), dp

    for label, shape in (shapes[1:3] + shapes[4:5]) if check else []:
        hp, dp = pages(96, shape)
        for d in ("h2d", "d2h"):
            _check_moves(pitched, host, b.dev_stacked, hp, dp, tuple(range(n_layers)), d)
            _check_moves(pitched, host, b.dev_stacked, hp, dp, (3,), d)
        res["checks"].append(f"cxx_pitched merged {label}: h2d and d2h, all layers and one layer, rows equal")
        print(res["checks"][-1], flush=True)
    for label, shape in shapes:
        hp, dp = pages(512, shape)
        hi, di = base._slots(hp, page), base._slots(dp, page)
        for name, (m, _) in movers.items():
            for d in ("h2d", "d2h"):
                secs = base._time(
                    lambda m=m, d=d, h=hi, g=di: m.transfer(h, g, tuple(range(n_layers)), d), reps
                )
                row = {"kind": "bulk", "impl": name, "pages_shape": label, "direction": d, "pages": 512}
                res["runs3"].append(row | base._stats(512 * n_layers * plb, secs))
        last = [r for r in res["runs3"] if r["pages_shape"] == label and r["kind"] == "bulk"]
        print(
            f"bulk {label:12s} "
            + " ".join(f"{r['impl']}:{r['direction']} {r['gbps_median']:.1f}" for r in last),
            flush=True,
        )
    for label, shape in shapes[4:]:
        for prefix in base.PREFIXES:
            n = prefix // page
            hp, dp = pages(n, shape)
            hi, di = base._slots(hp, page), base._slots(dp, page)
            for name in ("cxx_pitched[merged]", "cxx_batch[s1mb128]"):
                m = movers[name][0]
                for d in ("h2d", "d2h"):

                    def loop(m=m, d=d, h=hi, g=di):
                        for layer in range(n_layers):
                            m.transfer(h, g, (layer,), d)

                    secs = [s / n_layers for s in base._time(loop, reps)]
                    row = {"kind": "per_layer", "impl": name, "pages_shape": label, "direction": d}
                    res["runs3"].append(row | {"prefix": prefix} | base._stats(n * plb, secs))
        last = [r for r in res["runs3"] if r["pages_shape"] == label and r["kind"] == "per_layer"]
        print(
            f"per-layer {label:12s} "
            + " ".join(
                f"{r['prefix'] // 1024}k:{r['impl'][:9]}:{r['direction']} {r['gbps_median']:.1f}"
                for r in last
            ),
            flush=True,
        )


def _place(lens: list[int], total: int, gen: torch.Generator) -> torch.Tensor:
    n = sum(lens)
    free = total - 1 - n - len(lens)
    cuts = torch.sort(torch.randint(free + 1, (len(lens),), generator=gen)).values
    gaps = torch.diff(cuts, prepend=torch.zeros(1, dtype=cuts.dtype)).tolist()
    order = torch.randperm(len(lens), generator=gen).tolist()
    starts = [0] * len(lens)
    pos = 1
    for k, g in zip(order, gaps, strict=True):
        pos += g
        starts[k] = pos
        pos += lens[k] + 1
    return torch.cat([torch.arange(s, s + r) for s, r in zip(starts, lens, strict=True)])


def replay(out: Path, impls: list[str], repeats: int, isolate: bool = False, first_rep: int = 0) -> None:
    from dataclasses import replace

    from gpu_replay.oplog_replay import OpLogReplay, ReplayOptions
    from gpu_replay.replay_report import summarize, write_json, write_table
    from simulator.oplog import read_op_log

    split = json.loads((ROOT / "gpu_replay" / "calibration" / "split.json").read_text())
    calib = ROOT / "gpu_replay" / "calibration"
    (out / "replay").mkdir(parents=True, exist_ok=True)
    logs = [*split["oplogs"]["fit"], *split["oplogs"]["heldout"]]
    for name in impls:
        backend, impl, layout = cal.IMPLS[name]
        opts = ReplayOptions(
            device="cuda",
            io_backend=backend,
            impl=impl,
            layout=layout,
            write_back=True,
            isolate_calls=isolate,
        )
        tag = f"{name}-iso" if isolate else name
        for i, rel in enumerate([logs[0], *[x for x in logs for _ in range(repeats)]]):
            log = read_op_log(calib / rel)
            t0 = time.perf_counter()
            rp = OpLogReplay(log, replace(opts, verify="none") if i else opts)
            try:
                rows = rp.run()
            finally:
                rp.release()
            s = summarize(rp, rows, time.perf_counter() - t0)
            print(
                f"replay {tag:13s} {Path(rel).stem:30s} {'warmup' if i == 0 else '':6s} "
                f"backup {s['backup_gbps'] or 0:6.1f} GB/s wall {s['wall_s']:.1f} s",
                flush=True,
            )
            if i:
                rep = first_rep + (i - 1) % repeats
                stem = f"{Path(rel).stem}-{tag}-r{rep}"
                write_table(out / "replay" / f"{stem}.csv", rows)
                write_json(out / "replay" / f"{stem}.json", s)
            del rp
            torch.cuda.empty_cache()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")) / "tcal")
    ap.add_argument("--parts", default="grid,runs,replay")
    ap.add_argument("--reps", type=int, default=11)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--impls", default="cuda,triton,cxx_batch")
    ap.add_argument("--isolate", action="store_true", help="replay: synchronize before each write-back call")
    ap.add_argument("--first-rep", type=int, default=0, help="replay: number of the first repeat's files")
    ap.add_argument(
        "--run-lengths", type=Path, default=None, help="runs2: JSON of the logs' page-run lengths"
    )
    ap.add_argument("--device-cap-gib", type=float, default=8.0)
    ap.add_argument("--host-cap-gib", type=float, default=8.0)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    parts = args.parts.split(",")
    res: dict = {
        "environment": {},
        "grid": [],
        "runs": [],
        "runs2": [],
        "runs3": [],
        "checks": [],
        "peak": None,
    }
    from gpu_replay.replay_report import device_info

    res["environment"] = device_info("cuda")
    t0 = time.perf_counter()
    if {"grid", "runs", "runs2", "runs3", "runs3s"} & set(parts):
        res["peak"] = base.copy_peak()
        print("peak", {k: round(v["gbps_best"], 2) for k, v in res["peak"].items()}, flush=True)
        b = base.Bench(_args(args))
        b.run_lengths = json.loads(args.run_lengths.read_text()) if args.run_lengths else {}
        for part, fn in (
            ("grid", grid),
            ("runs", runs),
            ("runs2", runs2),
            ("runs3", runs3),
            ("runs3s", runs3_own_stream),
        ):
            if part in parts:
                try:
                    fn(b, args.reps, res)
                except Exception as exc:  # noqa: BLE001 - keep what the other parts measured
                    res.setdefault("errors", []).append(f"{part}: {type(exc).__name__}: {exc}")
                    print("ERROR", res["errors"][-1], flush=True)
                (args.out / "transfer_calib.json").write_text(json.dumps(res, indent=1))
        del b
        torch.cuda.empty_cache()
    if "replay" in parts:
        replay(args.out, args.impls.split(","), args.repeats, args.isolate, args.first_rep)
    print(f"wall {time.perf_counter() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
