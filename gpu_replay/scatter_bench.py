"""Scattered (random page id) transfers against the copy peak, in one device call (issue 13).

What it measures, page 64, gpt-oss-120b TP 2 (64 KiB per page and layer, K and V 32 KiB each),
the full pool's 18 layers, host pools in layer_first:

- ``peak``: best of 10 contiguous 1 GiB copies each way from torch's ``pin_memory`` buffer and
  from the first GiB of every host pool (each allocation kind), the run's peak being the best;
- ``gated``: execution alone (the copies queued behind a sleeping kernel, so the host's issue
  cost is excluded) of a bulk transfer (512 random pages x 18 layers) by the copy engines
  (cudaMemcpyBatchAsync on 1-4 streams, pages sorted or not) and by the SM row kernel (launch
  shapes), per host allocation kind (``gpu_replay.host_alloc``);
- ``bulk``: the same transfers issued and executed (CUDA events around the call), with the
  persistent C++ issue threads, batch caps, sorting, and a copy-engine / SM hybrid;
- ``per_layer``: the per-layer load curve 1k-32k tokens (18 one-layer calls back to back) for
  the copy engines and the SM kernel;
- ``overlap``: per-layer loads of a 32k prefix on a side stream against causal SDPA (1.0-1.5x
  the load) on the main one: the hidden fraction of the load.

    python -m gpu_replay.scatter_bench --out $OUT/scatter.json --hugepages-gib 12
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from dataclasses import replace
from pathlib import Path

import torch

from gpu_replay.cuda_build import library
from gpu_replay.geometry import GIB
from gpu_replay.scatter_setup import (
    PDL_SHAPES,
    PREFIXES,
    SM_SHAPES,
    TMA_SHAPES,
    Setup,
    _ce,
    _gated,
    _gbps,
    _same,
    _sm,
    _split,
    _time,
    environment,
    reserve_hugepages,
)
from gpu_replay.transfer_cuda import CudaBulkTransfer, CudaConfig, HybridCxxTransfer


def peak(s: Setup, reps: int) -> dict:
    """Best of ``reps`` contiguous 1 GiB copies per direction, per source of host memory."""
    dev = torch.empty(GIB, dtype=torch.uint8, device="cuda")
    sources = {"torch_pin_memory": torch.empty(GIB, dtype=torch.uint8, pin_memory=True)}
    for kind, host in s.hosts.items():
        sources[f"pool_{kind}"] = host.k.view(-1).view(torch.uint8)[:GIB]
    out = {}
    for name, h in sources.items():
        out[name] = {
            "h2d": _gbps(GIB, _time(lambda h=h: dev.copy_(h, non_blocking=True), reps)),
            "d2h": _gbps(GIB, _time(lambda h=h: h.copy_(dev, non_blocking=True), reps)),
        }
        print(
            f"peak {name:20s} h2d {out[name]['h2d']['gbps_best']:.2f} "
            f"d2h {out[name]['d2h']['gbps_best']:.2f}",
            flush=True,
        )
    return out


def gated(s: Setup, reps: int, gate_s: float, res: list) -> None:
    layers = tuple(range(s.geo.layer_num))
    nbytes = 512 * s.geo.layer_num * s.geo.page_layer_bytes
    lib = library()
    for kind in s.hosts:
        movers = {
            f"ce[s{n}{'sorted' if o else ''}]": (_ce(s, kind, n, o), False)
            for n in (1, 2, 4)
            for o in (False, True)
        }
        movers |= {name: (_sm(s, kind, cfg), True) for name, cfg in SM_SHAPES.items()}
        for name, (m, dev_idx) in movers.items():
            hi, di = s.indices(512, dev_idx)
            for d in ("h2d", "d2h"):
                exe, issue = _gated(lambda m=m, h=hi, g=di, d=d: m(h, g, layers, d), reps, gate_s, lib)
                row = {
                    "alloc": kind,
                    "impl": name,
                    "direction": d,
                    "max_issue_s": max(issue),
                    "gate_s": gate_s,
                }
                res.append(row | _gbps(nbytes, exe))
        print(
            f"gated {kind:8s} "
            + " ".join(f"{r['impl']}:{r['direction']} {r['gbps']:.1f}" for r in res[-len(movers) * 2 :]),
            flush=True,
        )


def _bulk_movers(s: Setup, kind: str, variants: str) -> dict:
    """Round 1 (first call): copy-engine issue shapes, the SM kernel, the old hybrid; round 2:
    the split transfer (engines and kernel at once) against the best of round 1."""
    if variants == "r1":
        movers = {
            f"ce[s{n}mb{mb}{'sorted' if o else ''}]": (_ce(s, kind, n, o, mb), False)
            for n in (1, 2, 3, 4)
            for mb in (0, 128)
            for o in (False, True)
        }
        movers["sm[2x256u8]"] = (_sm(s, kind, CudaConfig()), True)
        for frac in (0.7, 0.85):
            movers[f"hybrid[{frac}s2]"] = (HybridCxxTransfer(s.hosts[kind], s.dev, frac, streams=2), False)
        return movers
    movers = {
        "ce[s4mb128sorted]": (_ce(s, kind, 4, True, 128), False),
        "ce[s4mb64sorted]": (_ce(s, kind, 4, True, 64), False),
        "sm[2x256u8]": (_sm(s, kind, CudaConfig()), True),
    }
    for frac in (0.5, 0.6, 0.7, 0.8, 0.9):
        movers[f"split[{frac}s4mb128]"] = (_split(s, kind, frac), False)
    movers["split[0.7s2mb128]"] = (_split(s, kind, 0.7, streams=2), False)
    movers["split[0.7s4mb64]"] = (_split(s, kind, 0.7, max_batch=64), False)
    return movers


def _layer_movers(s: Setup, kind: str, variants: str) -> dict:
    if variants == "r1":
        return {
            "ce[s2sorted]": (_ce(s, kind, 2, True), False),
            "ce[s4sorted]": (_ce(s, kind, 4, True), False),
            "ce[s4]": (_ce(s, kind, 4, False), False),
            "ce[s8sorted]": (_ce(s, kind, 8, True), False),
            "sm[2x256u8]": (_sm(s, kind, CudaConfig()), True),
        }
    movers = {
        "sm[2x256u8]": (_sm(s, kind, CudaConfig()), True),
        "ce[s4sorted]": (_ce(s, kind, 4, True), False),
    }
    for frac, n in ((0.2, 2), (0.3, 2), (0.45, 2), (0.3, 4), (0.45, 4), (0.55, 4), (0.7, 4)):
        movers[f"split[{frac}s{n}]"] = (_split(s, kind, frac, streams=n), False)
    return movers


def bulk(s: Setup, reps: int, res: list, variants: str) -> None:
    layers = tuple(range(s.geo.layer_num))
    nbytes = 512 * s.geo.layer_num * s.geo.page_layer_bytes
    for kind in s.hosts:
        movers = _bulk_movers(s, kind, variants)
        for name, (m, dev_idx) in movers.items():
            hi, di = s.indices(512, dev_idx)
            for d in ("h2d", "d2h"):
                secs = _time(lambda m=m, h=hi, g=di, d=d: m(h, g, layers, d), reps)
                res.append({"alloc": kind, "impl": name, "direction": d} | _gbps(nbytes, secs))
        print(
            f"bulk {kind:8s} "
            + " ".join(f"{r['impl']}:{r['direction']} {r['gbps']:.1f}" for r in res[-len(movers) * 2 :]),
            flush=True,
        )


def per_layer(s: Setup, reps: int, res: list, kinds, variants: str) -> None:
    n_layers = s.geo.layer_num
    for kind in kinds:
        movers = _layer_movers(s, kind, variants)
        for prefix in PREFIXES:
            n = prefix // s.geo.page_size
            for name, (m, dev_idx) in movers.items():
                hi, di = s.indices(n, dev_idx)
                for d in ("h2d", "d2h"):

                    def loop(m=m, h=hi, g=di, d=d):
                        for layer in range(n_layers):
                            m(h, g, (layer,), d)

                    secs = [x / n_layers for x in _time(loop, reps)]
                    row = {"alloc": kind, "impl": name, "direction": d, "prefix": prefix}
                    res.append(row | _gbps(n * s.geo.page_layer_bytes, secs))
            print(
                f"layer {kind:8s} {prefix:6d} "
                + " ".join(f"{r['impl']}:{r['direction']} {r['gbps']:.1f}" for r in res[-len(movers) * 2 :]),
                flush=True,
            )


def overlap(s: Setup, res: list, kinds, variants: str, prefixes=(4096, 32768)) -> None:
    """Loads on a side stream against causal SDPA on the main stream, loads issued before the
    compute or after it."""
    q = torch.randn(4, 32, 4096, 64, device="cuda", dtype=torch.bfloat16)
    k, v = torch.randn_like(q), torch.randn_like(q)

    def attn():
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    t_attn = statistics.median(_time(attn, 10))
    for kind in kinds:
        if variants == "r1":
            movers = {
                "ce[s2sorted]": (_ce(s, kind, 2, True), False),
                "ce[s4sorted]": (_ce(s, kind, 4, True), False),
            }
        else:
            movers = {
                "sm[2x256u8]": (_sm(s, kind, CudaConfig()), True),
                "ce[s4sorted]": (_ce(s, kind, 4, True), False),
                "split[0.3s2]": (_split(s, kind, 0.3, streams=2), False),
                "split[0.45s4]": (_split(s, kind, 0.45), False),
            }
        for prefix in prefixes:
            for name, (m, dev_idx) in movers.items():
                hi, di = s.indices(prefix // s.geo.page_size, dev_idx)
                for order in ("load_first", "compute_first") if variants != "r1" else ("load_first",):
                    row = {"alloc": kind, "impl": name, "prefix": prefix, "order": order}
                    res.append(row | _overlap_case(s, m, hi, di, attn, t_attn, order))
                    print(
                        "overlap",
                        kind,
                        name,
                        prefix,
                        order,
                        {x: round(y["hidden_fraction"], 3) for x, y in res[-1].items() if x.startswith("x")},
                        flush=True,
                    )


def tma(s: Setup, reps: int, gate_s: float, res: list, kinds) -> None:
    """The bulk-async (TMA) page copies on 2 MiB host pages: gated bulk, bulk, per-layer 4k-32k;
    the row kernel and split transfers with one issuing stream beside them."""
    with torch.cuda.stream(torch.cuda.Stream()):  # a load stream (PDL wants a non-legacy one)
        _tma(s, reps, gate_s, res, kinds)


def _check_pdl(s: Setup, kind: str, name: str, m) -> str:
    """Per-layer loads with programmatic dependent launch land every row of every layer."""
    hi, di = s.indices(64, True)
    for lay in range(s.geo.layer_num):
        s.dev.k[lay][di] = -7
        s.dev.v[lay][di] = -7
    for lay in range(s.geo.layer_num):
        m(hi, di, (lay,), "h2d")
    torch.cuda.synchronize()
    host, h = s.hosts[kind], hi.cpu()
    ok = all(
        _same(s.dev.k[i][di], host.k[i][h]) and _same(s.dev.v[i][di], host.v[i][h])
        for i in range(s.geo.layer_num)
    )
    return f"{kind} {name}: {'ok' if ok else 'MISMATCH'}"


def _tma(s: Setup, reps: int, gate_s: float, res: list, kinds) -> None:
    layers = tuple(range(s.geo.layer_num))
    lib = library()
    for kind in kinds:
        host = s.hosts[kind]
        movers = {name: (CudaBulkTransfer(host, s.dev, cfg), True) for name, cfg in TMA_SHAPES.items()}
        movers["sm[2x256u8]"] = (_sm(s, kind, CudaConfig()), True)
        for name in ("tma[1x32k4]", "tma[2x8k8]"):
            movers[name + "pdl"] = (CudaBulkTransfer(host, s.dev, replace(TMA_SHAPES[name], pdl=True)), True)
        movers["sm[2x256u8]pdl"] = (_sm(s, kind, CudaConfig(pdl=True)), True)
        movers["sm[4x256u8]pdl"] = (_sm(s, kind, CudaConfig(blocks_per_sm=4, pdl=True)), True)
        for name in ("tma[1x32k4]pdl", "sm[2x256u8]pdl"):
            ok = _check_pdl(s, kind, name, movers[name][0])
            res.append(
                {"alloc": kind, "impl": name, "kind": "check", "direction": "h2d", "gbps": 0.0, "check": ok}
            )
            print("check", ok, flush=True)
        for frac in (0.2, 0.3):
            movers[f"split[{frac}s1]"] = (_split(s, kind, frac, streams=1), False)
        for name, (m, dev_idx) in movers.items():
            hi, di = s.indices(512, dev_idx)
            nbytes = 512 * s.geo.layer_num * s.geo.page_layer_bytes
            for d in ("h2d", "d2h"):
                row = {"alloc": kind, "impl": name, "direction": d}
                if not name.startswith("split"):
                    exe, _ = _gated(lambda m=m, h=hi, g=di, d=d: m(h, g, layers, d), 5, gate_s, lib)
                    res.append(row | {"kind": "gated_bulk"} | _gbps(nbytes, exe))
                secs = _time(lambda m=m, h=hi, g=di, d=d: m(h, g, layers, d), reps)
                res.append(row | {"kind": "bulk"} | _gbps(nbytes, secs))
            for prefix in (4096, 8192, 32768):
                n = prefix // s.geo.page_size
                hi, di = s.indices(n, dev_idx)
                for d in ("h2d", "d2h"):

                    def loop(m=m, h=hi, g=di, d=d):
                        for layer in layers:
                            m(h, g, (layer,), d)

                    secs = [x / len(layers) for x in _time(loop, reps)]
                    row = {"alloc": kind, "impl": name, "direction": d, "kind": "per_layer", "prefix": prefix}
                    res.append(row | _gbps(n * s.geo.page_layer_bytes, secs))
            mine = [r for r in res if r["alloc"] == kind and r["impl"] == name and r["kind"] != "check"]
            print(
                f"tma {kind:6s} {name:12s} "
                + " ".join(
                    f"{r['kind'][:5]}{r.get('prefix', '')}:{r['direction']} {r['gbps']:.1f}" for r in mine
                ),
                flush=True,
            )


def pdl(s: Setup, reps: int, gate_s: float, res: list, kinds) -> None:
    """Per-layer curves 1k-32k, bulk (gated and not) and overlap of the PDL launch shapes, on a
    load stream."""
    with torch.cuda.stream(torch.cuda.Stream()):
        layers = tuple(range(s.geo.layer_num))
        lib = library()
        for kind in kinds:
            host = s.hosts[kind]
            movers = {
                name: (CudaBulkTransfer(host, s.dev, cfg) if name.startswith("tma") else _sm(s, kind, cfg))
                for name, cfg in PDL_SHAPES.items()
            }
            for name, m in movers.items():
                hi, di = s.indices(512, True)
                nbytes = 512 * s.geo.layer_num * s.geo.page_layer_bytes
                for d in ("h2d", "d2h"):
                    exe, _ = _gated(lambda m=m, h=hi, g=di, d=d: m(h, g, layers, d), 5, gate_s, lib)
                    res.append(
                        {"alloc": kind, "impl": name, "direction": d, "kind": "gated_bulk"}
                        | _gbps(nbytes, exe)
                    )
                for prefix in PREFIXES:
                    hi, di = s.indices(prefix // s.geo.page_size, True)
                    for d in ("h2d", "d2h"):

                        def loop(m=m, h=hi, g=di, d=d):
                            for layer in layers:
                                m(h, g, (layer,), d)

                        secs = [x / len(layers) for x in _time(loop, reps)]
                        row = {
                            "alloc": kind,
                            "impl": name,
                            "direction": d,
                            "kind": "per_layer",
                            "prefix": prefix,
                        }
                        res.append(row | _gbps(prefix // s.geo.page_size * s.geo.page_layer_bytes, secs))
                mine = [r for r in res if r["alloc"] == kind and r["impl"] == name]
                print(
                    f"pdl {kind:6s} {name:15s} "
                    + " ".join(
                        f"{r['kind'][:5]}{r.get('prefix', '')}:{r['direction']} {r['gbps']:.1f}" for r in mine
                    ),
                    flush=True,
                )
    q = torch.randn(4, 32, 4096, 64, device="cuda", dtype=torch.bfloat16)
    k, v = torch.randn_like(q), torch.randn_like(q)

    def attn():
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    t_attn = statistics.median(_time(attn, 10))
    for kind in kinds[:1]:
        for name in ("tma[1x32k2]pdl", "sm[2x256u8]pdl"):
            cfg = PDL_SHAPES[name]
            m = CudaBulkTransfer(s.hosts[kind], s.dev, cfg) if name.startswith("tma") else _sm(s, kind, cfg)
            for prefix in (4096, 32768):
                hi, di = s.indices(prefix // s.geo.page_size, True)
                for prio in (0, -1):
                    for order in ("load_first", "compute_first"):
                        row = {
                            "alloc": kind,
                            "impl": name,
                            "prefix": prefix,
                            "order": order,
                            "priority": prio,
                        }
                        res.append(
                            row | {"kind": "overlap"} | _overlap_case(s, m, hi, di, attn, t_attn, order, prio)
                        )
                        hidden = {
                            x: round(y["hidden_fraction"], 3) for x, y in res[-1].items() if x.startswith("x")
                        }
                        print("overlap", kind, name, prefix, order, prio, hidden, flush=True)


def _overlap_case(
    s: Setup, mover, hi, di, attn, t_attn: float, order: str = "load_first", priority: int = 0
) -> dict:
    side, main = torch.cuda.Stream(priority=priority), torch.cuda.current_stream()

    def load(wait: bool = True):
        if wait:
            side.wait_stream(main)
        with torch.cuda.stream(side):
            for layer in range(s.geo.layer_num):
                mover(hi, di, (layer,), "h2d")

    t_load = statistics.median(_time(lambda: (load(), main.wait_stream(side)), 7))
    out = {}
    for ratio in (1.0, 1.25, 1.5):
        n = max(1, round(ratio * t_load / t_attn))

        def compute(n=n):
            for _ in range(n):
                attn()

        t_comp = statistics.median(_time(compute, 5))

        def both(compute=compute):
            if order == "load_first":
                load()
                compute()
            else:
                side.wait_stream(main)
                compute()
                load(wait=False)
            main.wait_stream(side)

        t_both = statistics.median(_time(both, 7))
        out[f"x{ratio}"] = {
            "load_s": t_load,
            "compute_s": t_comp,
            "compute_over_load": t_comp / t_load,
            "both_s": t_both,
            "hidden_fraction": max(0.0, min(1.0, (t_comp + t_load - t_both) / t_load)),
        }
    return out


def check(s: Setup) -> list[str]:
    """The sorted, fanned-out copy path and the split path move the right bytes both ways."""
    out = []
    layers = (0, 5, 17)
    for kind, host in s.hosts.items():
        for name, m in (("ce[s4sorted]", _ce(s, kind, 4, True)), ("split[0.55]", _split(s, kind, 0.55))):
            hi, di = s.indices(48, False)
            for lay in layers:
                s.dev.k[lay][di] = -7
                s.dev.v[lay][di] = -7
            m(hi, di, layers, "h2d")
            torch.cuda.synchronize()
            ok = all(
                _same(s.dev.k[i][di], host.k[i][hi]) and _same(s.dev.v[i][di], host.v[i][hi]) for i in layers
            )
            host.k[3][hi] = 5
            host.v[3][hi] = 5
            m(hi, di, (3,), "d2h")
            torch.cuda.synchronize()
            ok = ok and _same(s.dev.k[3][di], host.k[3][hi]) and _same(s.dev.v[3][di], host.v[3][hi])
            out.append(f"{kind} {name}: {'ok' if ok else 'MISMATCH'}")
    print("check", out, flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "scatter.json"))
    ap.add_argument("--allocs", default="malloc,thp,hugetlb,cuda")
    ap.add_argument("--hugepages-gib", type=float, default=0.0, help="grow the 2 MiB page pool first (root)")
    ap.add_argument("--device-cap-gib", type=float, default=8.0)
    ap.add_argument(
        "--host-cap-gib", type=float, default=16.0, help="full + SWA; the full pool gets about half"
    )
    ap.add_argument("--parts", default="peak,check,gated,bulk,per_layer,overlap")
    ap.add_argument(
        "--layer-allocs", default="", help="allocation kinds for per_layer/overlap (default: all)"
    )
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--gate-ms", type=float, default=40.0)
    ap.add_argument("--variants", default="r2", choices=("r1", "r2"), help="r1: the first call's sets")
    args = ap.parse_args()
    t0 = time.perf_counter()
    res: dict = {"env": environment(), "args": vars(args)}
    if args.hugepages_gib:
        res["hugepages"] = reserve_hugepages(args.hugepages_gib)
        print("hugepages", res["hugepages"], flush=True)
    s = Setup(args)
    res["alloc"] = s.alloc_info
    parts = args.parts.split(",")
    kinds = [k for k in (args.layer_allocs.split(",") if args.layer_allocs else s.hosts) if k in s.hosts]

    def save():
        res["wall_s"] = time.perf_counter() - t0
        Path(args.out).write_text(json.dumps(res, indent=1))

    steps = {
        "peak": lambda: res.__setitem__("peak", peak(s, args.reps)),
        "check": lambda: res.__setitem__("check", check(s)),
        "gated": lambda: gated(s, max(3, args.reps // 2), args.gate_ms / 1e3, res.setdefault("gated", [])),
        "bulk": lambda: bulk(s, args.reps, res.setdefault("bulk", []), args.variants),
        "per_layer": lambda: per_layer(s, args.reps, res.setdefault("per_layer", []), kinds, args.variants),
        "overlap": lambda: overlap(s, res.setdefault("overlap", []), kinds, args.variants),
        "tma": lambda: tma(s, args.reps, args.gate_ms / 1e3, res.setdefault("tma", []), kinds),
        "pdl": lambda: pdl(s, args.reps, args.gate_ms / 1e3, res.setdefault("pdl", []), kinds),
    }
    for p in parts:
        steps[p]()
        save()
        print(f"-- {p} done at {time.perf_counter() - t0:.1f} s", flush=True)
    if "peak" in res:
        res["peak_gbps"] = {d: max(v[d]["gbps_best"] for v in res["peak"].values()) for d in ("h2d", "d2h")}
    save()
    print("peak_gbps", res.get("peak_gbps"), "wall", round(time.perf_counter() - t0, 1), flush=True)


if __name__ == "__main__":
    main()
