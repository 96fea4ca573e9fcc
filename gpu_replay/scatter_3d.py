"""Random-page transfers by 3D batch copies (``cxx_3d``) against the copy peak, in one device call
(issue 13, sixth session).

Same workload as :mod:`gpu_replay.scatter_bench` (gpt-oss-120b TP 2, page 64, the full pool's 18
layers, 64 KiB per page and layer, random page ids), on pools that allow one op per page: a
stacked device pool with K and V in one allocation (``kv_joint``) and host pools of 2 MiB pages
(``thp``): layer_first joint (``lf``), page_first_direct joint (``pfd``), layer_first with K and V
in two buffers (``lf_sep``, the earlier sessions' pool), and a layer_first joint pool twice as
large (``lf_big``: its K-to-V stride is past 4 GiB) and one under 2 GiB (``lf_s``). Parts:

- ``probe``: one op of each shape class on each pool (return codes); where only ops with larger
  pitches fail, the movers get a pitch cap (the largest that passed);
- ``check``: every mover of the run against plain indexing (bulk, one layer, a layer subset);
- ``peak``: best of 10 contiguous 1 GiB copies per direction (``scatter_bench.peak``);
- ``bulk``: 512 random pages x 18 layers, one call, 3D variants and the earlier best paths
  (``ce[s4mb128sorted]`` copy engines, ``split[0.8]``); execution alone (gated) for some;
- ``per_layer``: one layer of one request per call, 18 calls back to back on a load stream, 1k-32k
  tokens, with the host's issue time; the PDL kernels beside them (the H100 PDL curve);
- ``overlap``: per-layer loads of 4k / 32k tokens on a side stream against causal SDPA at 1.0,
  1.25 and 1.5x the load (``scatter_bench._overlap_case``), loads issued first or after the compute;
- ``layered_check``, ``layered``, ``overlap_layered``: the same for copy-engine loads issued by
  background threads (:mod:`gpu_replay.scatter_layered`);
- ``grids``: SM-side per-layer loads (TMA, row kernel; PDL) on few blocks: bandwidth and hiding;
- ``graph``: the copies as the nodes of a reused CUDA graph (:mod:`gpu_replay.transfer_graph`).

    python -m gpu_replay.scatter_3d --out $OUT/s3d.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import time
from pathlib import Path

import torch

from gpu_replay import scatter_layered
from gpu_replay.cuda_build import library
from gpu_replay.geometry import GIB, cap_rank, rank_geometry
from gpu_replay.host_alloc import huge_fraction
from gpu_replay.pools import build_device_pool, build_host_pool
from gpu_replay.scatter_bench import _overlap_case, peak
from gpu_replay.scatter_setup import PREFIXES, _gated, _gbps, _same, _time, environment
from gpu_replay.transfer_batch3d import Batch3DTransfer
from gpu_replay.transfer_cuda import CudaBulkTransfer, CudaConfig, CudaRowsTransfer, CxxCopyTransfer
from gpu_replay.transfer_defaults import PER_LAYER_ROWS, PER_LAYER_TMA
from gpu_replay.transfer_split import SplitTransfer

HOSTS = {  # name: (layout, K and V in one buffer, host cap GiB (full + SWA))
    "lf": ("layer_first", True, 12.0),
    "pfd": ("page_first_direct", True, 12.0),
    "lf_sep": ("layer_first", False, 12.0),
    "lf_big": ("layer_first", True, 24.0),
    "lf_s": ("layer_first", True, 5.0),  # K-to-V stride under 2 GiB
}


class Setup3D:
    """The stacked joint device pool and the host pools of ``HOSTS``, filled with random bits."""

    def __init__(self, args) -> None:
        def geo(host_cap):
            rank = rank_geometry("gpt-oss-120b", 2, page_size=64, gpu="H100")
            rank = cap_rank(
                rank, device_cap_bytes=int(args.device_cap_gib * GIB), host_cap_bytes=int(host_cap * GIB)
            )
            return rank.pool("full")

        self.geo = geo(12.0)
        self.dev = build_device_pool(self.geo, "cuda", stacked=True, kv_joint=True)
        for t in (*self.dev.k, *self.dev.v):
            t.view(torch.int16).random_(-(1 << 14), 1 << 14)
        self.hosts, self.alloc_info = {}, {}
        block = torch.randint(-(1 << 14), 1 << 14, (1 << 24,), dtype=torch.int16)
        for name in args.hosts.split(","):
            layout, joint, cap = HOSTS[name]
            t0 = time.perf_counter()
            host = build_host_pool(geo(cap), layout, pin=True, alloc=args.alloc, kv_joint=joint)
            reg_s = time.perf_counter() - t0
            for buf in host.buffers:
                flat = buf.tensor.view(torch.int16)
                for off in range(0, flat.numel(), block.numel()):
                    n = min(block.numel(), flat.numel() - off)
                    flat[off : off + n].copy_(block[:n])
            self.hosts[name] = host
            self.alloc_info[name] = {
                "layout": layout,
                "kv_joint": joint,
                "used": host.alloc,
                "bytes": sum(b.tensor.numel() for b in host.buffers),
                "host_pages": host.geo.host_pages,
                "k_to_v_bytes": host.v.data_ptr() - host.k.data_ptr(),
                "alloc_register_s": reg_s,
                "huge_fraction": huge_fraction(host.k.data_ptr()),
            }
            print("alloc", name, self.alloc_info[name], flush=True)
        self.gen = torch.Generator().manual_seed(0)
        self.max_pitch: int | None = None  # set by the probe where large pitches fail
        self.only = ""

    def indices(self, n_pages: int, host: str, device: bool):
        g, hg = self.geo, self.hosts[host].geo
        hp = torch.randperm(hg.host_pages - 1, generator=self.gen)[:n_pages] + 1
        dp = torch.randperm(g.device_pages - 1, generator=self.gen)[:n_pages] + 1
        ar = torch.arange(g.page_size)
        hi, di = (hp[:, None] * g.page_size + ar).flatten(), (dp[:, None] * g.page_size + ar).flatten()
        return (hi.cuda(), di.cuda()) if device else (hi, di)


def movers(s: Setup3D, part: str) -> dict:
    """name -> (host pool, mover, indices on the device). Bulk/per-layer/overlap variants, those
    matching ``s.only`` (a regular expression) where it is set."""
    out = _movers(s, part)
    return {k: v for k, v in out.items() if not s.only or re.search(s.only, k)}


def _movers(s: Setup3D, part: str) -> dict:
    out = {}
    for name in s.hosts:
        h = s.hosts[name]
        out[f"{name}:3d[s0]"] = (name, Batch3DTransfer(h, s.dev, max_pitch=s.max_pitch), False)
    lf = s.hosts["lf"]
    if s.max_pitch is not None:  # the uncapped shapes again, to see them fail or not
        out["lf:3d[uncapped]"] = ("lf", Batch3DTransfer(lf, s.dev), False)
    out["lf:3d[s1]"] = ("lf", Batch3DTransfer(lf, s.dev, streams=1, max_pitch=s.max_pitch), False)
    if part == "overlap":
        out["lf:tma_pdl"] = ("lf", CudaBulkTransfer(lf, s.dev, PER_LAYER_TMA), True)
        return out
    out["lf:3d[s2mb64]"] = (
        "lf",
        Batch3DTransfer(lf, s.dev, streams=2, max_batch=64, max_pitch=s.max_pitch),
        False,
    )
    out["lf:3d[nojoint]"] = ("lf", Batch3DTransfer(lf, s.dev, joint=False, max_pitch=s.max_pitch), False)
    out["lf:3d[nohint]"] = ("lf", Batch3DTransfer(lf, s.dev, hint=False, max_pitch=s.max_pitch), False)
    out["lf:ce[s4mb128sorted]"] = (
        "lf",
        CxxCopyTransfer(lf, s.dev, "batch", streams=4, max_batch=128, side=True, sort=True),
        False,
    )
    out["lf:tma_pdl"] = ("lf", CudaBulkTransfer(lf, s.dev, PER_LAYER_TMA), True)
    out["lf:sm_pdl"] = ("lf", CudaRowsTransfer(lf, s.dev, PER_LAYER_ROWS), True)
    if part == "bulk":
        out["lf:split[0.8]"] = (
            "lf",
            SplitTransfer(lf, s.dev, 0.8, streams=4, max_batch=128, sort=True),
            False,
        )
        out["lf:sm"] = ("lf", CudaRowsTransfer(lf, s.dev, CudaConfig()), True)
    return out


def probe(s: Setup3D) -> list[dict]:
    """One op of each shape class through ``kvt_ce_3d`` on the run's pools: which the driver takes
    (return code) and whether the bytes land."""
    import numpy as np

    lib, out = library(), []
    g = s.geo
    pb = g.page_size * g.k_row_bytes
    cur = torch.cuda.current_stream().cuda_stream
    for hn in s.hosts:
        host = s.hosts[hn]
        hk, dk = host.addressing("k"), s.dev.addressing("k")
        hv, dv = host.addressing("v"), s.dev.addressing("v")
        e = s.dev.k[0].element_size()
        h_layer = hk.bases[1] - hk.bases[0]
        d_layer = dk.bases[1] - dk.bases[0]
        h_cs, d_cs = hv.bases[0] - hk.bases[0], dv.bases[0] - dk.bases[0]
        hp, dp = 7, 11  # page ids
        so = np.array([hp * hk.page_stride * e], dtype=np.int64)
        do = np.array([dp * dk.page_stride * e], dtype=np.int64)
        w = np.array([pb], dtype=np.int64)
        cases = {
            "1d_row0": (0, 0, 0, 0, 1, 1),
            "1d_row_w": (pb, 0, pb, 0, 1, 1),
            "2d_layers": (h_layer, 0, d_layer, 0, g.layer_num, 1),
            "2d_layers_lh": (h_layer, g.layer_num, d_layer, g.layer_num, g.layer_num, 1),
            "3d_one_layer": (h_cs, 1, d_cs, 1, 1, 2),
            "3d_all": (h_layer, h_cs // h_layer if h_layer else 0, d_layer, d_cs // d_layer, g.layer_num, 2),
        }
        for name, (hr, hlh, dr, dlh, height, depth) in cases.items():
            if depth == 2 and (h_cs <= 0 or d_cs <= 0):
                continue  # V before K on a side: the transfer takes two ops there
            for flags in (1, 0, 5):  # hint; no hint; hint with packed sides passed as 0
                rc = lib.kvt_ce_3d(
                    hk.bases[0],
                    hr,
                    hlh,
                    dk.bases[0],
                    dr,
                    dlh,
                    so.ctypes.data,
                    do.ctypes.data,
                    w.ctypes.data,
                    1,
                    height,
                    depth,
                    flags,
                    0,
                    0,
                    None,
                    cur,
                )
                torch.cuda.synchronize()
                row = {"host": hn, "case": name, "flags": flags, "rc": rc}
                row |= {"h_row": hr, "h_lh": hlh, "d_row": dr, "d_lh": dlh, "height": height, "depth": depth}
                out.append(row)
                print("probe", row, flush=True)
    ok = [max(r["h_row"] * max(r["h_lh"], 1), r["d_row"] * max(r["d_lh"], 1)) for r in out if r["rc"] == 0]
    bad = [max(r["h_row"] * max(r["h_lh"], 1), r["d_row"] * max(r["d_lh"], 1)) for r in out if r["rc"] != 0]
    if bad and ok and min(bad) > max(ok):  # only ops with larger pitches fail: cap them
        s.max_pitch = max(ok)
    print("probe: max_pitch", s.max_pitch, flush=True)
    return out


def _each(ms: dict, fn, log: list) -> None:
    """``fn(name, host_name, mover, dev_idx)`` per mover; a mover the driver refuses is recorded
    (``{"impl", "error"}``) and the run goes on."""
    for name, (hn, m, dev_idx) in ms.items():
        try:
            fn(name, hn, m, dev_idx)
        except RuntimeError as exc:
            log.append({"impl": name, "error": str(exc)})
            print("error", name, exc, flush=True)
            torch.cuda.synchronize()


def check(s: Setup3D) -> list[str]:
    """Each mover moves exactly the pages' rows (a layer subset, all layers, one layer) H2D, and
    one layer back D2H."""
    out: list = []

    def one(name, host_name, m, dev_idx):
        host, ok = s.hosts[host_name], True
        for layers in ((0, 5, 17), tuple(range(s.geo.layer_num)), (7,)):
            hi, di = s.indices(40, host_name, dev_idx)
            for lay in layers:
                s.dev.k[lay][di] = -7
                s.dev.v[lay][di] = -7
            m(hi, di, layers, "h2d")
            torch.cuda.synchronize()
            h, d = hi.cpu(), di
            hk = lambda i, h=h, host=host: _rows(host, "k", i, h)  # noqa: E731
            hv = lambda i, h=h, host=host: _rows(host, "v", i, h)  # noqa: E731
            ok = ok and all(_same(s.dev.k[i][d], hk(i)) and _same(s.dev.v[i][d], hv(i)) for i in layers)
            s.dev.k[layers[0]][d] = 5
            s.dev.v[layers[0]][d] = 3
            m(hi, di, layers[:1], "d2h")
            torch.cuda.synchronize()
            i = layers[0]
            ok = ok and _same(s.dev.k[i][d], hk(i)) and _same(s.dev.v[i][d], hv(i))
        out.append(f"{name}: {'ok' if ok else 'MISMATCH'}")

    _each(movers(s, "check"), one, out)
    print("check", out, flush=True)
    return out


def _rows(host, comp: str, layer: int, idx: torch.Tensor) -> torch.Tensor:
    buf = host.k if comp == "k" else host.v
    if host.layout == "layer_first":
        return buf[layer][idx]
    page = host.geo.page_size
    return buf[idx // page, layer, idx % page]


def _timed(fn, reps: int) -> tuple[list[float], list[float]]:
    """CUDA-event seconds per call and the host's issue seconds."""
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    ev, host = [], []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        t0 = time.perf_counter()
        fn()
        host.append(time.perf_counter() - t0)
        b.record()
        b.synchronize()
        ev.append(a.elapsed_time(b) / 1e3)
    return ev, host


def bulk(s: Setup3D, reps: int, gate_s: float, res: list) -> None:
    layers = tuple(range(s.geo.layer_num))
    nbytes = 512 * s.geo.layer_num * s.geo.page_layer_bytes
    lib = library()
    gated = {"lf:3d[s0]", "lf:3d[nojoint]", "lf:ce[s4mb128sorted]", "pfd:3d[s0]", "lf_big:3d[s0]"}

    def one(name, hn, m, dev_idx):
        hi, di = s.indices(512, hn, dev_idx)
        for d in ("h2d", "d2h"):
            ev, issue = _timed(lambda m=m, h=hi, g=di, d=d: m(h, g, layers, d), reps)
            row = {"impl": name, "direction": d, "kind": "bulk", "issue_s": statistics.median(issue)}
            res.append(row | _gbps(nbytes, ev))
            if name in gated:
                exe, iss = _gated(lambda m=m, h=hi, g=di, d=d: m(h, g, layers, d), 5, gate_s, lib)
                res.append(row | {"kind": "gated_bulk", "max_issue_s": max(iss)} | _gbps(nbytes, exe))
        mine = [r for r in res if r["impl"] == name and "gbps" in r]
        print(
            f"bulk {name:22s} " + " ".join(f"{r['kind'][:5]}:{r['direction']} {r['gbps']:.2f}" for r in mine),
            flush=True,
        )

    _each(movers(s, "bulk"), one, res)


def per_layer(s: Setup3D, reps: int, res: list) -> None:
    n_layers = s.geo.layer_num

    def one(name, hn, m, dev_idx):
        for prefix in PREFIXES:
            n = prefix // s.geo.page_size
            hi, di = s.indices(n, hn, dev_idx)
            for d in ("h2d", "d2h"):

                def loop(m=m, h=hi, g=di, d=d):
                    for layer in range(n_layers):
                        m(h, g, (layer,), d)

                ev, issue = _timed(loop, reps)
                row = {
                    "impl": name,
                    "direction": d,
                    "prefix": prefix,
                    "issue_s": statistics.median(issue) / n_layers,
                }
                res.append(row | _gbps(n * s.geo.page_layer_bytes, [x / n_layers for x in ev]))
        mine = [r for r in res if r["impl"] == name and "gbps" in r]
        print(
            f"layer {name:22s} "
            + " ".join(f"{r['prefix'] // 1024}k:{r['direction']} {r['gbps']:.2f}" for r in mine),
            flush=True,
        )

    _each(movers(s, "per_layer"), one, res)


def overlap(s: Setup3D, res: list) -> None:
    q = torch.randn(4, 32, 4096, 64, device="cuda", dtype=torch.bfloat16)
    k, v = torch.randn_like(q), torch.randn_like(q)

    def attn():
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    t_attn = statistics.median(_time(attn, 10))

    def one(name, hn, m, dev_idx):
        for prefix in (4096, 32768):
            hi, di = s.indices(prefix // s.geo.page_size, hn, dev_idx)
            for order in ("load_first", "compute_first"):
                row = {"impl": name, "prefix": prefix, "order": order}
                res.append(row | _overlap_case(s, m, hi, di, attn, t_attn, order))
                hidden = {x: round(y["hidden_fraction"], 3) for x, y in res[-1].items() if x.startswith("x")}
                ratio = {x: round(y["compute_over_load"], 2) for x, y in res[-1].items() if x.startswith("x")}
                print("overlap", name, prefix, order, hidden, ratio, flush=True)

    _each(movers(s, "overlap"), one, res)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "scatter3d.json"))
    ap.add_argument("--hosts", default="lf,pfd,lf_sep,lf_big,lf_s")
    ap.add_argument("--alloc", default="thp")
    ap.add_argument("--device-cap-gib", type=float, default=6.0, help="K-to-V stride 1.8 GB")
    ap.add_argument("--parts", default="probe,check,peak,bulk,per_layer,overlap")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument(
        "--only", default="", help="regular expression: the movers of check/bulk/per_layer/overlap"
    )
    ap.add_argument("--gate-ms", type=float, default=40.0)
    args = ap.parse_args()
    t0 = time.perf_counter()
    res: dict = {"env": environment(), "args": vars(args)}
    s = Setup3D(args)
    s.only = args.only
    res["alloc"] = s.alloc_info

    def save():
        res["wall_s"] = time.perf_counter() - t0
        Path(args.out).write_text(json.dumps(res, indent=1))

    load = torch.cuda.Stream()  # a load stream: the 3D call refuses the legacy default stream
    steps = {
        "probe": lambda: res.__setitem__("probe", probe(s)),
        "check": lambda: res.__setitem__("check", check(s)),
        "layered_check": lambda: res.__setitem__("layered_check", scatter_layered.check(s)),
        "layered": lambda: scatter_layered.bandwidth(s, args.reps, res.setdefault("layered", [])),
        "overlap_layered": lambda: scatter_layered.overlap(s, res.setdefault("overlap_layered", [])),
        "grids": lambda: scatter_layered.grids(s, args.reps, res.setdefault("grids", [])),
        "graph": lambda: scatter_layered.graph(s, args.reps, args.gate_ms / 1e3, res.setdefault("graph", [])),
        "peak": lambda: res.__setitem__("peak", peak(s, args.reps)),
        "bulk": lambda: bulk(s, args.reps, args.gate_ms / 1e3, res.setdefault("bulk", [])),
        "per_layer": lambda: per_layer(s, args.reps, res.setdefault("per_layer", [])),
        "overlap": lambda: overlap(s, res.setdefault("overlap", [])),
    }
    for p in args.parts.split(","):
        with torch.cuda.stream(load):
            steps[p]()
        save()
        print(f"-- {p} done at {time.perf_counter() - t0:.1f} s", flush=True)
    if "peak" in res:
        res["peak_gbps"] = {d: max(v[d]["gbps_best"] for v in res["peak"].values()) for d in ("h2d", "d2h")}
    save()
    print("peak_gbps", res.get("peak_gbps"), "wall", round(time.perf_counter() - t0, 1), flush=True)


if __name__ == "__main__":
    main()
