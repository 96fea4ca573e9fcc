"""The ceilings of a bulk transfer of random pages, measured in one device call (issue 13, ninth
session): the copy engines' execution rate and the driver's issue time per copy for copies of
32 KiB (one page of one layer and component, gpt-oss-120b TP 2, page 64) up to 1 MiB, random or
adjacent, against the same run's 1 GiB copy peak; the SM kernels' rate on random and on
sequential pages; the bulk movers themselves (engines alone, splits); and the bound
:func:`gpu_replay.ceiling_plan.split_bound` puts on any split of the engines and the SMs.

    python -m gpu_replay.scatter_ceiling --out $OUT/ceiling.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from gpu_replay.ceiling_plan import split_bound


def _pct(gbps: float, peak: float) -> float:
    return 100.0 * gbps / peak


def ce_sizes(
    s, sizes, streams, reps: int, gate_s: float, peak: dict, total: int, region_gib: float = 2.0
) -> list:
    """Copies of ``size`` bytes (``total`` bytes in all) between the host pool and a device buffer
    by the engines (kvt_ce_fan: sorted, batches of 128, one issuing thread per side stream),
    random distinct slots or adjacent ones, gated (execution) and as issued."""
    from gpu_replay.cuda_build import library
    from gpu_replay.scatter_setup import _gated, _gbps, _time
    from gpu_replay.transfer_cuda import side_streams

    lib = library()
    host = s.hosts["thp"].k.view(-1).view(torch.uint8)
    region = min(host.numel(), int(region_gib * (1 << 30)))
    dev = torch.empty(region, dtype=torch.uint8, device="cuda")
    rng = np.random.default_rng(1)
    rows = []
    for size in sizes:
        n = min(total // size, region // size // 2)
        for layout in ("random", "adjacent"):
            if layout == "random":
                hp = rng.choice(region // size, n, replace=False).astype(np.int64)
                dp = rng.choice(region // size, n, replace=False).astype(np.int64)
            else:
                hp = dp = np.arange(n, dtype=np.int64)
            for ns in streams:
                st = side_streams(dev.device, ns)
                handles = np.array([x.cuda_stream for x in st], dtype=np.uint64)
                for d in ("h2d", "d2h"):
                    sb, db = (
                        (host.data_ptr(), dev.data_ptr()) if d == "h2d" else (dev.data_ptr(), host.data_ptr())
                    )
                    sp, dpp = (hp, dp) if d == "h2d" else (dp, hp)
                    src_b, dst_b = np.array([sb], np.int64), np.array([db], np.int64)

                    def fn(sp=sp, dpp=dpp, src_b=src_b, dst_b=dst_b, handles=handles, ns=ns, n=n, size=size):
                        rc = lib.kvt_ce_fan(
                            src_b.ctypes.data,
                            dst_b.ctypes.data,
                            1,
                            sp.ctypes.data,
                            dpp.ctypes.data,
                            n,
                            size,
                            size,
                            size,
                            0,
                            1,
                            1,
                            128,
                            ns,
                            handles.ctypes.data,
                            torch.cuda.current_stream().cuda_stream,
                        )
                        if rc:
                            raise RuntimeError(f"kvt_ce_fan {rc}")

                    exe, issue = _gated(fn, reps, gate_s, lib)
                    plain = _time(fn, reps)
                    g, p = _gbps(n * size, exe), _gbps(n * size, plain)
                    rows.append(
                        {
                            "size": size,
                            "layout": layout,
                            "streams": ns,
                            "direction": d,
                            "copies": n,
                            "gated_gbps": g["gbps"],
                            "gated_pct": _pct(g["gbps"], peak[d]),
                            "gated_best_pct": _pct(g["gbps_best"], peak[d]),
                            "issued_gbps": p["gbps"],
                            "issued_pct": _pct(p["gbps"], peak[d]),
                            "issue_s_per_copy": statistics.median(issue) / n,
                            "max_issue_s": max(issue),
                            "gate_s": gate_s,
                            "region_bytes": region,
                        }
                    )
                    r = rows[-1]
                    print(
                        f"ce {region >> 20}MiB {size >> 10:5d}KiB {layout:8s} s{ns} {d}: "
                        f"gated {r['gated_pct']:.1f}% "
                        f"issued {r['issued_pct']:.1f}% issue {r['issue_s_per_copy'] * 1e6:.2f} us/copy",
                        flush=True,
                    )
    del dev
    return rows


def sm_kernels(s, reps: int, gate_s: float, peak: dict) -> list:
    """The TMA page kernel and the row kernel (one launch for 18 layers of 512 pages) on random
    and on sequential page ids, gated and as issued."""
    from gpu_replay.cuda_build import library
    from gpu_replay.scatter_setup import _gated, _gbps, _time
    from gpu_replay.transfer_cuda import CudaBulkTransfer, CudaConfig, CudaRowsTransfer

    lib, g = library(), s.geo
    layers = tuple(range(g.layer_num))
    nbytes = 512 * g.layer_num * g.page_layer_bytes
    ar = torch.arange(g.page_size)
    seq = (torch.arange(1, 513)[:, None] * g.page_size + ar).flatten().cuda()
    kernels = {
        "tma[1x32k4]": CudaBulkTransfer(
            s.hosts["thp"], s.dev, CudaConfig(blocks_per_sm=1, chunk=32 << 10, stages=4)
        ),
        "tma[2x16k4]": CudaBulkTransfer(
            s.hosts["thp"], s.dev, CudaConfig(blocks_per_sm=2, chunk=16 << 10, stages=4)
        ),
        "rows[2x256u8]": CudaRowsTransfer(s.hosts["thp"], s.dev, CudaConfig()),
        "rows[1x512u16]": CudaRowsTransfer(
            s.hosts["thp"], s.dev, CudaConfig(blocks_per_sm=1, block=512, unroll=16)
        ),
    }
    rows = []
    for name, m in kernels.items():
        for layout in ("random", "sequential"):
            hi, di = s.indices(512, True) if layout == "random" else (seq, seq)
            for d in ("h2d", "d2h"):
                fn = lambda m=m, h=hi, x=di, d=d: m(h, x, layers, d)  # noqa: E731
                exe, _ = _gated(fn, reps, gate_s, lib)
                ge, gp = _gbps(nbytes, exe), _gbps(nbytes, _time(fn, reps))
                rows.append(
                    {
                        "kernel": name,
                        "layout": layout,
                        "direction": d,
                        "gated_pct": _pct(ge["gbps"], peak[d]),
                        "gated_best_pct": _pct(ge["gbps_best"], peak[d]),
                        "issued_pct": _pct(gp["gbps"], peak[d]),
                    }
                )
        print(
            "sm",
            name,
            " ".join(
                f"{r['layout'][:3]}:{r['direction']} {r['gated_pct']:.1f}/{r['issued_pct']:.1f}"
                for r in rows[-4:]
            ),
            flush=True,
        )
    return rows


def bulk_movers(s, reps: int, peak: dict) -> list:
    """The bulk movers on 512 random pages x 18 layers: engines alone and splits."""
    from gpu_replay.scatter_setup import _ce, _gbps, _split, _time
    from gpu_replay.transfer_cuda import CudaConfig
    from gpu_replay.transfer_split import SplitTransfer

    g = s.geo
    layers, nbytes = tuple(range(g.layer_num)), 512 * g.layer_num * g.page_layer_bytes
    movers = {
        "ce[s4mb128sorted]": _ce(s, "thp", 4, True, 128),
        "ce[s2mb128sorted]": _ce(s, "thp", 2, True, 128),
    }
    for frac in (0.8, 0.85, 0.9):
        movers[f"split[{frac}]"] = _split(s, "thp", frac)
        movers[f"split[{frac}]sm16"] = SplitTransfer(
            s.hosts["thp"],
            s.dev,
            frac,
            streams=4,
            max_batch=128,
            config=CudaConfig(grid=16, block=512, unroll=16),
        )
    rows = []
    for name, m in movers.items():
        hi, di = s.indices(512, False)
        for d in ("h2d", "d2h"):
            r = _gbps(nbytes, _time(lambda m=m, h=hi, x=di, d=d: m(h, x, layers, d), reps))
            rows.append(
                {
                    "mover": name,
                    "direction": d,
                    "pct": _pct(r["gbps"], peak[d]),
                    "best_pct": _pct(r["gbps_best"], peak[d]),
                }
            )
        print(
            "bulk",
            name,
            " ".join(f"{r['direction']} {r['pct']:.1f} (best {r['best_pct']:.1f})" for r in rows[-2:]),
            flush=True,
        )
    return rows


def batch_attrs(s, reps: int, gate_s: float, peak: dict, total: int) -> list:
    """The engines' issue cost and the bulk movers under each cudaMemcpyBatchAsync attribute knob
    (kvt_set_batch_attr: bit 0 drops PreferOverlapWithCompute, bit 1 reads the source in any
    order); knob 0 is what every mover uses. Rows with bit 1 in the D2H direction are marked: a
    write-back's source is written by earlier work in its stream, so "any order" is not valid
    there (the measurement itself moves static data)."""
    import ctypes

    from gpu_replay.cuda_build import library
    from gpu_replay.scatter_setup import _ce, _gbps, _split, _time
    from gpu_replay.transfer_cuda import CudaConfig
    from gpu_replay.transfer_split import SplitTransfer

    lib = library()
    lib.kvt_set_batch_attr.argtypes = [ctypes.c_int]
    lib.kvt_set_batch_attr.restype = ctypes.c_int
    g = s.geo
    layers, nbytes = tuple(range(g.layer_num)), 512 * g.layer_num * g.page_layer_bytes
    movers = {
        "ce[s4mb128sorted]": _ce(s, "thp", 4, True, 128),
        "ce[s2mb128sorted]": _ce(s, "thp", 2, True, 128),
        "split[0.85]": _split(s, "thp", 0.85),
        "split[0.9]sm16": SplitTransfer(
            s.hosts["thp"], s.dev, 0.9, streams=4, max_batch=128, config=CudaConfig(16, block=512, unroll=16)
        ),
    }
    rows = []
    try:
        for knob in (0, 1, 2, 3):
            if lib.kvt_set_batch_attr(knob):
                raise RuntimeError(f"kvt_set_batch_attr({knob})")
            for r in ce_sizes(s, [32 << 10], [4], reps, gate_s, peak, total, 0.25):
                ordered = not (knob & 2 and r["direction"] == "d2h")
                rows.append(r | {"part": "ce", "knob": knob, "stream_ordered": ordered})
            for name, m in movers.items():
                hi, di = s.indices(512, False)
                for d in ("h2d", "d2h"):
                    r = _gbps(nbytes, _time(lambda m=m, h=hi, x=di, d=d: m(h, x, layers, d), reps))
                    rows.append(
                        {
                            "part": "bulk",
                            "knob": knob,
                            "mover": name,
                            "direction": d,
                            "pct": _pct(r["gbps"], peak[d]),
                            "best_pct": _pct(r["gbps_best"], peak[d]),
                            "stream_ordered": not (knob & 2 and d == "d2h"),
                        }
                    )
            print(
                f"knob {knob} bulk "
                + " ".join(f"{r['mover']}:{r['direction']} {r['pct']:.1f}" for r in rows[-2 * len(movers) :]),
                flush=True,
            )
    finally:
        lib.kvt_set_batch_attr(0)
    return rows


def bounds(res: dict, s) -> list:
    """split_bound per direction from this run's 32 KiB random copies (4 streams) and SM rows."""
    g = s.geo
    n_copies = 512 * g.layer_num * 2
    nbytes = 512 * g.layer_num * g.page_layer_bytes
    out = []
    for d in ("h2d", "d2h"):
        ce = [
            r for r in res["ce"] if r["size"] == 32 << 10 and r["layout"] == "random" and r["direction"] == d
        ]
        sm = [r for r in res["sm"] if r["layout"] == "random" and r["direction"] == d]
        if not ce or not sm:
            continue
        best_ce = max(ce, key=lambda r: r["gated_pct"])
        issue = min(r["issue_s_per_copy"] for r in ce)
        e_sm = max(r["gated_pct"] for r in sm) / 100
        b = split_bound(nbytes, n_copies, res["peak_gbps"][d] * 1e9, best_ce["gated_pct"] / 100, e_sm, issue)
        out.append({"direction": d, "e_ce": best_ce["gated_pct"] / 100, "e_sm": e_sm, "issue_s": issue} | b)
        print(
            f"bound {d}: e_ce {best_ce['gated_pct']:.1f}% e_sm {e_sm * 100:.1f}% "
            f"issue {issue * 1e6:.2f} us/copy "
            f"-> split bound {b['bound'] * 100:.1f}% at f={b['engine_fraction']:.2f} "
            f"(engines alone {b['engines_alone'] * 100:.1f}%, SMs alone {b['sms_alone'] * 100:.1f}%)",
            flush=True,
        )
    return out


def main(argv=None) -> None:
    from gpu_replay.scatter_bench import peak
    from gpu_replay.scatter_setup import Setup, environment

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "ceiling.json"))
    ap.add_argument("--sizes-kib", default="32,64,256,1024")
    ap.add_argument("--streams", default="1,4")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--gate-ms", type=float, default=80.0)
    ap.add_argument("--host-cap-gib", type=float, default=8.0)
    ap.add_argument(
        "--parts",
        default="ce,sm,bulk",
        help="also: gated (the bulk movers' copies, gated), attrs (batch knobs)",
    )
    ap.add_argument("--regions-gib", default="2", help="span of the random slots on each side")
    a = ap.parse_args(argv)
    t0 = time.monotonic()
    res: dict = {"args": vars(a), "env": environment()}
    s = Setup(SimpleNamespace(allocs="thp", device_cap_gib=8.0, host_cap_gib=a.host_cap_gib))
    res["alloc"] = s.alloc_info
    res["peak"] = peak(s, 10)
    res["peak_gbps"] = {d: max(v[d]["gbps_best"] for v in res["peak"].values()) for d in ("h2d", "d2h")}

    def save():
        res["wall_s"] = time.monotonic() - t0
        Path(a.out).write_text(json.dumps(res, indent=1, default=str))

    save()
    total = 512 * s.geo.layer_num * s.geo.page_layer_bytes
    parts = a.parts.split(",")
    if "ce" in parts:
        sizes = [int(x) << 10 for x in a.sizes_kib.split(",")]
        res["ce"] = []
        for region in a.regions_gib.split(","):
            res["ce"] += ce_sizes(
                s,
                sizes,
                [int(x) for x in a.streams.split(",")],
                a.reps,
                a.gate_ms / 1e3,
                res["peak_gbps"],
                total,
                float(region),
            )
            save()
    if "sm" in parts:
        res["sm"] = sm_kernels(s, a.reps, a.gate_ms / 1e3, res["peak_gbps"])
        save()
    if "ce" in parts and "sm" in parts:
        res["bounds"] = bounds(res, s)
        save()
    if "gated" in parts:  # the bulk movers' own copy lists (512 random pool pages x 18 layers), gated
        from gpu_replay.scatter_bench import gated

        res["gated"] = []
        gated(s, a.reps, a.gate_ms / 1e3, res["gated"])
        for r in res["gated"]:
            r["pct"] = _pct(r["gbps"], res["peak_gbps"][r["direction"]])
        save()
    if "bulk" in parts:
        res["bulk"] = bulk_movers(s, 11, res["peak_gbps"])
        save()
    if "attrs" in parts:
        res["attrs"] = batch_attrs(s, 11, a.gate_ms / 1e3, res["peak_gbps"], total)
        save()
    print(f"done at {time.monotonic() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
