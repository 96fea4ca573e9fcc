"""Bandwidth of the nvcc-built transfers against the Triton kernel, in one run (issue 13, item 2).

Same pools, peak and targets as ``benchmarks/gpu_transfer.py`` (gpt-oss-120b TP 2, page 64,
64 KiB per page and layer): bulk (all 18 full layers, 512 random pages), per-layer loads (one
request's pages for one layer, prefixes 1k-32k, 18 layers back to back, per-layer = total / 18)
and overlap with causal SDPA at 1.0-1.5x the load. Variants: the 16-byte row kernel ("cuda") over
a launch sweep, the bulk-async ring ("cuda_bulk") over chunk x stages x blocks, the copy engines
issued from C++ ("cxx_loop", "cxx_batch", "cxx_pitched"), and the Triton kernel as the baseline.

    python benchmarks/gpu_cuda_transfer.py --out $OUT/gpu_cuda_transfer.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gpu_transfer as base  # noqa: E402

from gpu_replay.transfer import KVTransfer  # noqa: E402
from gpu_replay.transfer_cuda import CudaConfig  # noqa: E402
from gpu_replay.transfer_triton import KernelConfig  # noqa: E402

PAIRS = base.PAIRS
FAMILIES = ("triton", "cuda", "cuda_bulk", "cxx_loop", "cxx_batch", "cxx_pitched", "cxx", "staged")


def _family(name: str) -> str:
    return name.split("[")[0]


class CudaBench(base.Bench):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.results = {"bulk": [], "per_layer": [], "overlap": [], "errors": []}
        self.rows_cfgs = {
            f"cuda[b{b}u{u}s{s}]": CudaConfig(blocks_per_sm=b, unroll=u, streaming=bool(s))
            for b in (4, 8, 16)
            for u in (8, 16)
            for s in (0, 1)
        }
        self.bulk_cfgs = {
            f"cuda_bulk[c{c // 1024}ks{st}b{b}]": CudaConfig(blocks_per_sm=b, chunk=c, stages=st)
            for c, st, b in ((32768, 4, 1), (32768, 6, 1), (16384, 4, 2), (8192, 8, 2))
        }
        # (streams, max_batch) of the C++-issued copy engines
        self.ce_shapes = ((1, 0), (1, 256), (2, 128), (2, 256), (2, 512), (3, 256), (4, 128))

    def variants(self, layout: str, backend: str, *, bulk: bool) -> dict[str, KVTransfer]:
        host, out = self.hosts[layout], {}

        def add(name, *a, **kw):
            try:
                out[name] = KVTransfer(*a, **kw)
            except Exception as exc:  # noqa: BLE001 - one broken variant must not lose the run
                self.results["errors"].append(f"{name} {layout}: {type(exc).__name__}: {exc}")

        if backend == "hybrid":
            rows = CudaConfig(blocks_per_sm=4, unroll=8, streaming=False)
            for f in (0.4, 0.6, 0.8):
                for st, mb in ((1, 0), (2, 256)):
                    opts = {"dma_fraction": f, "config": rows, "streams": st, "max_batch": mb}
                    add(f"cxx[f{f}s{st}mb{mb}]", host, self.dev, "hybrid", "cxx", **opts)
            if bulk and layout == "page_first_direct":
                for rp, sl in ((8, 3), (16, 2), (16, 3), (32, 3), (64, 2)):
                    opts = {"ring_pages": rp, "slots": sl, "config": rows}
                    add(f"staged[r{rp}x{sl}]", host, self.dev, "hybrid", "staged", **opts)
            return out
        if backend == "direct":
            for st, mb in self.ce_shapes:
                add(
                    f"cxx_batch[s{st}mb{mb}]", host, self.dev, "direct", "cxx_batch", streams=st, max_batch=mb
                )
            for st in (1, 4):
                add(f"cxx_loop[s{st}]", host, self.dev, "direct", "cxx_loop", streams=st)
            if bulk:
                add("cxx_pitched", host, self.dev_stacked, "direct", "cxx_pitched")
            return out
        for c in (KernelConfig(programs=132, tok=64), KernelConfig(programs=64, tok=16)):
            add(f"triton[{c.programs}x{c.tok}w4]", host, self.dev, "kernel", "triton", config=c)
        for name, cfg in self.rows_cfgs.items():
            add(name, host, self.dev, "kernel", "cuda", config=cfg)
        if layout == "layer_first":
            for name, cfg in self.bulk_cfgs.items():
                add(name, host, self.dev, "kernel", "cuda_bulk", config=cfg)
        return out

    def bulk_all(self, n_pages: int, reps: int) -> None:
        layers = tuple(range(self.geo.layer_num))
        nbytes = n_pages * self.geo.layer_num * self.geo.page_layer_bytes
        for layout, backend in PAIRS:
            hi, di = self.indices(n_pages, backend)
            for name, mover in self.variants(layout, backend, bulk=True).items():
                for d in ("h2d", "d2h"):
                    fn = lambda m=mover, d=d, h=hi, g=di: m.transfer(h, g, layers, d)  # noqa: E731
                    secs = self._timed(f"bulk {layout} {name} {d}", fn, reps)
                    if secs:
                        row = {
                            "layout": layout,
                            "backend": backend,
                            "impl": name,
                            "direction": d,
                            "pages": n_pages,
                        }
                        self.results["bulk"].append(row | base._stats(nbytes, secs))

    def per_layer_all(self, reps: int) -> None:
        n_layers = self.geo.layer_num
        for prefix in base.PREFIXES:
            n_pages = prefix // self.geo.page_size
            nbytes = n_pages * self.geo.page_layer_bytes
            for layout, backend in PAIRS:
                hi, di = self.indices(n_pages, backend)
                for name, mover in self.variants(layout, backend, bulk=False).items():
                    for d in ("h2d", "d2h"):

                        def loop(m=mover, d=d, h=hi, g=di):
                            for layer in range(n_layers):
                                m.transfer(h, g, (layer,), d)

                        secs = self._timed(f"per-layer {prefix} {layout} {name} {d}", loop, reps)
                        if secs:
                            row = {"layout": layout, "backend": backend, "impl": name, "direction": d}
                            row |= {"prefix": prefix} | base._stats(nbytes, [s / n_layers for s in secs])
                            self.results["per_layer"].append(row)

    def overlap_all(self, prefix: int = 32768) -> None:
        n_pages = prefix // self.geo.page_size
        q = torch.randn(4, 32, 4096, 64, device="cuda", dtype=torch.bfloat16)
        k, v = torch.randn_like(q), torch.randn_like(q)

        def attn():
            torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

        t_attn = statistics.median(base._time(attn, 10))
        host = self.hosts["layer_first"]
        cases = {
            "cxx_batch[s1mb0]": ("direct", "cxx_batch", {}),
            "cxx_batch[s2mb256]": ("direct", "cxx_batch", {"streams": 2, "max_batch": 256}),
            "triton[32x16w4]": ("kernel", "triton", {"config": KernelConfig(programs=32, tok=16)}),
        }
        for g in (16, 32, 48):
            cases[f"cuda[g{g}u8s1]"] = ("kernel", "cuda", {"config": CudaConfig(grid=g, unroll=8)})
            cases[f"cuda[g{g}u16s0]"] = (
                "kernel",
                "cuda",
                {"config": CudaConfig(grid=g, unroll=16, streaming=False)},
            )
        for g in (16, 32):
            cases[f"cxx[f0.7g{g}]"] = ("hybrid", "cxx", {"config": CudaConfig(grid=g), "dma_fraction": 0.7})
        for name, (backend, impl, opts) in cases.items():
            hi, di = self.indices(n_pages, backend)
            try:
                mover = KVTransfer(host, self.dev, backend, impl, **opts)
            except Exception as exc:  # noqa: BLE001
                self.results["errors"].append(f"overlap {name}: {type(exc).__name__}: {exc}")
                continue
            for priority in (0, -1):
                for order in ("load_first", "compute_first"):
                    row = self._overlap_case(mover, hi, di, attn, t_attn, priority, order)
                    if row is not None:
                        row |= {"layout": "layer_first", "backend": backend, "impl": name, "prefix": prefix}
                        self.results["overlap"].append(row)


def summarize(res: dict) -> dict:
    """Best per (layout/backend/direction) and per implementation family, % of the run's peak."""
    peak = {}
    for d in ("h2d", "d2h"):
        measured = [r["gbps_median"] for r in res["bulk"] + res["per_layer"] if r["direction"] == d]
        peak[d] = max([res["copy_peak"][d]["gbps_best"], *measured])
    out: dict = {"peak_gbps": peak, "bulk": {}, "per_layer": {}, "families": {}, "overlap": {}}
    for layout, backend in PAIRS:
        for d in ("h2d", "d2h"):
            key = f"{layout}/{backend}/{d}"
            b = base._best(res["bulk"], layout=layout, backend=backend, direction=d)
            if b:
                out["bulk"][key] = {
                    "impl": b["impl"],
                    "gbps": b["gbps_median"],
                    "of_peak": b["gbps_median"] / peak[d],
                }
            curve = {}
            for prefix in base.PREFIXES:
                r = base._best(res["per_layer"], layout=layout, backend=backend, direction=d, prefix=prefix)
                if r:
                    curve[prefix] = {"impl": r["impl"], "of_peak": r["gbps_median"] / peak[d]}
            out["per_layer"][key] = curve
    for fam in FAMILIES:
        for d in ("h2d", "d2h"):
            rows = [r for r in res["bulk"] if _family(r["impl"]) == fam and r["direction"] == d]
            entry = {"bulk": max((r["gbps_median"] / peak[d] for r in rows), default=None)}
            for prefix in base.PREFIXES:
                pl = [
                    r["gbps_median"] / peak[d]
                    for r in res["per_layer"]
                    if _family(r["impl"]) == fam and r["direction"] == d and r["prefix"] == prefix
                ]
                entry[prefix] = max(pl, default=None)
            out["families"][f"{fam}/{d}"] = entry
    for r in res["overlap"]:
        key = f"{r['impl']}/prio{r['stream_priority']}/{r['order']}"
        out["overlap"][key] = {"hidden": r["hidden_fraction"], "compute_over_load": r["compute_over_load"]}
    return out


def _pct(x) -> str:
    return "   -  " if x is None else f"{100 * x:5.1f}%"


def report(res: dict) -> None:
    s, env = res["summary"], res["environment"]
    print(
        f"\n{env['device']} torch {env['torch']} CUDA {env['cuda']} triton {env['triton']}",
        f"| {env['nvidia_smi']}",
    )
    print("copy peak GB/s:", {d: round(res["copy_peak"][d]["gbps_best"], 2) for d in ("h2d", "d2h")})
    print("run peak GB/s:", {d: round(v, 2) for d, v in s["peak_gbps"].items()})
    print("best per pair, bulk (512 pages, all layers):")
    for k, v in s["bulk"].items():
        print(f"  {k:32s} {v['gbps']:7.2f} GB/s {_pct(v['of_peak'])}  {v['impl']}")
    print("best per pair, per-layer (% of peak, 1k..32k):")
    for k, curve in s["per_layer"].items():
        print(f"  {k:32s} " + " ".join(f"{p // 1024}k:{_pct(c['of_peak'])}" for p, c in curve.items()))
    print("best per family (bulk | per-layer 1k..32k):")
    for k, e in s["families"].items():
        print(f"  {k:20s} {_pct(e['bulk'])} | " + " ".join(_pct(e[p]) for p in base.PREFIXES))
    print("overlap (hidden, compute/load):")
    for k, v in s["overlap"].items():
        print(f"  {k:45s} {_pct(v['hidden'])} x{v['compute_over_load']:.2f}")
    for e in res["errors"]:
        print("error:", e)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gpt-oss-120b")
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--page-size", type=int, default=64)
    ap.add_argument("--gpu-preset", default="H100")
    ap.add_argument("--device-cap-gib", type=float, default=8.0)
    ap.add_argument("--host-cap-gib", type=float, default=8.0)
    ap.add_argument("--bulk-pages", type=int, default=512)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--sections", default="bulk,per_layer,overlap")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "gpu_cuda_transfer.json"))
    args = ap.parse_args()
    args.hybrid_fractions, args.tma_programs, args.tma_toks = "", "", ""
    t0 = time.perf_counter()
    res: dict = {"environment": base.environment(), "copy_peak": base.copy_peak()}
    bench = CudaBench(args)
    res |= {"bulk_pages": args.bulk_pages, "alloc_s": bench.alloc_s}
    res["geometry"] = {
        "model": args.model,
        "tp": args.tp,
        "pool": bench.geo.__dict__ | {"layer_ids": list(bench.geo.layer_ids)},
    }
    sections = {
        "bulk": lambda: bench.bulk_all(args.bulk_pages, args.reps),
        "per_layer": lambda: bench.per_layer_all(args.reps),
        "overlap": bench.overlap_all,
    }
    for name in args.sections.split(","):
        t1 = time.perf_counter()
        try:
            sections[name]()
        except Exception as exc:  # noqa: BLE001 - keep what the other sections measured
            bench.results["errors"].append(f"section {name}: {type(exc).__name__}: {exc}")
        print(f"section {name}: {time.perf_counter() - t1:.1f} s", flush=True)
        res.update(bench.results)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(res, indent=1))
    res["summary"] = summarize(res)
    res["wall_s"] = time.perf_counter() - t0
    Path(args.out).write_text(json.dumps(res, indent=1))
    report(res)


if __name__ == "__main__":
    main()
