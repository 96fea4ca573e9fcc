"""Parts of :mod:`gpu_replay.scatter_3d` for :class:`~gpu_replay.transfer_layered.LayeredCopyLoad`
(copy-engine per-layer loads issued by background threads): its check, bulk and per-layer
bandwidth, and its hidden fraction behind attention, including the SGLang shape where attention
of layer ``i`` waits for the load of layer ``i``."""

from __future__ import annotations

import statistics

import torch

from gpu_replay.scatter_setup import PREFIXES, _gbps, _same, _time
from gpu_replay.transfer_layered import LayeredCopyLoad

VARIANTS = {  # name: (streams, max_batch)
    "layered[s1]": (1, 0),
    "layered[s2]": (2, 0),
    "layered[s3]": (3, 0),
    "layered[s4]": (4, 0),
    "layered[s2mb32]": (2, 32),
}


def _movers(s, host: str = "lf") -> dict:
    return {
        n: LayeredCopyLoad(s.hosts[host], s.dev, streams=st, max_batch=mb) for n, (st, mb) in VARIANTS.items()
    }


def check(s, host: str = "lf") -> list[str]:
    """Every layer lands, read after waiting for that layer only (H2D), and a D2H all-layer move."""
    out = []
    layers = tuple(range(s.geo.layer_num))
    for name, m in _movers(s, host).items():
        hi, di = s.indices(40, host, False)
        for lay in layers:
            s.dev.k[lay][di] = -7
            s.dev.v[lay][di] = -7
        m.start(hi, di, layers, "h2d")
        ok = True
        for i in layers:
            m.wait(i)
            h = s.hosts[host]
            ok = ok and _same(s.dev.k[i][di], h.k[i][hi]) and _same(s.dev.v[i][di], h.v[i][hi])
        m.finish()
        s.dev.k[3][di] = 5
        m(hi, di, layers, "d2h")
        torch.cuda.synchronize()
        ok = ok and _same(s.dev.k[3][di], s.hosts[host].k[3][hi])
        out.append(f"{name}: {'ok' if ok else 'MISMATCH'}")
    print("check layered", out, flush=True)
    return out


def bandwidth(s, reps: int, res: list, host: str = "lf") -> None:
    """Bulk (512 pages, all layers, one wait at the end) and per-layer (one request's pages, every
    layer, one event per layer; per-layer time = total / layers) for each variant."""
    layers = tuple(range(s.geo.layer_num))
    for name, m in _movers(s, host).items():
        cases = [("bulk", 512)] + [("per_layer", p // s.geo.page_size) for p in PREFIXES]
        for kind, n in cases:
            hi, di = s.indices(n, host, False)
            for d in ("h2d", "d2h"):
                secs = _time(lambda m=m, h=hi, g=di, d=d: m(h, g, layers, d), reps)
                row = {"impl": name, "direction": d, "kind": kind, "pages": n}
                if kind == "per_layer":
                    row["prefix"] = n * s.geo.page_size
                    secs = [x / len(layers) for x in secs]
                    nbytes = n * s.geo.page_layer_bytes
                else:
                    nbytes = n * len(layers) * s.geo.page_layer_bytes
                res.append(row | _gbps(nbytes, secs))
        mine = [r for r in res if r["impl"] == name]
        print(
            f"layered {name:18s} "
            + " ".join(
                f"{r['kind'][:4]}{r.get('prefix', '')}:{r['direction']} {r['gbps']:.2f}" for r in mine
            ),
            flush=True,
        )


def overlap(s, res: list, host: str = "lf", names=("layered[s2]", "layered[s4]")) -> None:
    """Hidden fraction of a 4k / 32k-token load behind causal SDPA at 1.0, 1.25, 1.5x its time:
    ``load_first`` (start the load, launch all compute, wait for the last layer),
    ``compute_first`` (launch the compute, then start the load, which does not wait for it) and
    ``pipelined`` (start the load; layer i's attention waits for layer i's load, SGLang's shape)."""
    q = torch.randn(4, 32, 4096, 64, device="cuda", dtype=torch.bfloat16)
    k, v = torch.randn_like(q), torch.randn_like(q)
    qs = torch.randn(1, 32, 2048, 64, device="cuda", dtype=torch.bfloat16)
    ks, vs = torch.randn_like(qs), torch.randn_like(qs)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    t_big = statistics.median(_time(lambda: sdpa(q, k, v, is_causal=True), 10))
    t_small = statistics.median(_time(lambda: sdpa(qs, ks, vs, is_causal=True), 10))
    layers = tuple(range(s.geo.layer_num))
    movers = _movers(s, host)
    for name in names:
        m = movers[name]
        for prefix in (4096, 32768):
            hi, di = s.indices(prefix // s.geo.page_size, host, False)
            t_load = statistics.median(_time(lambda m=m, h=hi, g=di: m(h, g, layers, "h2d"), 7))
            for order in ("load_first", "compute_first", "pipelined"):
                row = {"impl": name, "prefix": prefix, "order": order, "t_small_s": t_small}
                for ratio in (1.0, 1.25, 1.5):
                    row[f"x{ratio}"] = _case(
                        m, hi, di, layers, order, ratio, t_load, (q, k, v, t_big), (qs, ks, vs, t_small)
                    )
                res.append(row)
                hidden = {x: round(y["hidden_fraction"], 3) for x, y in row.items() if x.startswith("x")}
                ratio = {x: round(y["compute_over_load"], 2) for x, y in row.items() if x.startswith("x")}
                print("overlap layered", name, prefix, order, hidden, ratio, flush=True)


def _case(m, hi, di, layers, order: str, ratio: float, t_load: float, big, small) -> dict:
    sdpa = torch.nn.functional.scaled_dot_product_attention
    if order == "pipelined":
        qs, ks, vs, t_small = small
        per = max(1, round(ratio * t_load / len(layers) / t_small))

        def chunk():
            for _ in range(per):
                sdpa(qs, ks, vs, is_causal=True)

        def compute():
            for _ in layers:
                chunk()
    else:
        q, k, v, t_big = big
        n = max(1, round(ratio * t_load / t_big))

        def compute():
            for _ in range(n):
                sdpa(q, k, v, is_causal=True)

    t_comp = statistics.median(_time(compute, 5))

    def both():
        if order == "load_first":
            m.start(hi, di, layers, "h2d")
            compute()
            m.wait(len(layers) - 1)
        elif order == "compute_first":
            compute()
            m.start(hi, di, layers, "h2d", after=False)
            m.wait(len(layers) - 1)
        else:
            m.start(hi, di, layers, "h2d")
            for i in range(len(layers)):
                m.wait(i)
                chunk()
        m.finish()

    t_both = statistics.median(_time(both, 7))
    return {
        "load_s": t_load,
        "compute_s": t_comp,
        "compute_over_load": t_comp / t_load,
        "both_s": t_both,
        "hidden_fraction": max(0.0, min(1.0, (t_comp + t_load - t_both) / t_load)),
    }


GRIDS = {  # SM-side per-layer loads on a few blocks (PDL): name -> (impl, config)
    "tma[g8x32k4]": ("tma", dict(grid=8, chunk=32 << 10, stages=4)),
    "tma[g16x32k4]": ("tma", dict(grid=16, chunk=32 << 10, stages=4)),
    "tma[g16x16k2]": ("tma", dict(grid=16, chunk=16 << 10, stages=2)),
    "tma[g32x16k2]": ("tma", dict(grid=32, chunk=16 << 10, stages=2)),
    "tma[g66x16k2]": ("tma", dict(grid=66, chunk=16 << 10, stages=2)),
    "tma[g132x16k2]": ("tma", dict(grid=132, chunk=16 << 10, stages=2)),
    "rows[g16u16]": ("rows", dict(grid=16, block=512, unroll=16)),
    "rows[g32u16]": ("rows", dict(grid=32, block=512, unroll=16)),
}


def grids(s, reps: int, res: list, host: str = "lf") -> None:
    """Whether an SM-side load on few blocks keeps the per-layer bandwidth and leaves attention its
    SMs: per-layer curve 1k-32k and the hidden fraction (``scatter_bench._overlap_case``)."""
    from gpu_replay.scatter_bench import _overlap_case
    from gpu_replay.transfer_cuda import CudaBulkTransfer, CudaConfig, CudaRowsTransfer

    layers = tuple(range(s.geo.layer_num))
    q = torch.randn(4, 32, 4096, 64, device="cuda", dtype=torch.bfloat16)
    k, v = torch.randn_like(q), torch.randn_like(q)

    def attn():
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    t_attn = statistics.median(_time(attn, 10))
    h = s.hosts[host]
    for name, (impl, kw) in GRIDS.items():
        cfg = CudaConfig(pdl=True, **kw)
        m = CudaBulkTransfer(h, s.dev, cfg) if impl == "tma" else CudaRowsTransfer(h, s.dev, cfg)
        for prefix in PREFIXES:
            hi, di = s.indices(prefix // s.geo.page_size, host, True)
            for d in ("h2d", "d2h"):

                def loop(m=m, h=hi, g=di, d=d):
                    for lay in layers:
                        m(h, g, (lay,), d)

                secs = [x / len(layers) for x in _time(loop, reps)]
                row = {"impl": name, "direction": d, "kind": "per_layer", "prefix": prefix}
                res.append(row | _gbps(prefix // s.geo.page_size * s.geo.page_layer_bytes, secs))
        for prefix in (4096, 32768):
            hi, di = s.indices(prefix // s.geo.page_size, host, True)
            for order in ("load_first", "compute_first"):
                row = {"impl": name, "kind": "overlap", "prefix": prefix, "order": order}
                res.append(row | _overlap_case(s, m, hi, di, attn, t_attn, order))
        mine = [r for r in res if r["impl"] == name]
        print(
            f"grid {name:16s} "
            + " ".join(
                f"{r['prefix'] // 1024}k:{r['direction']} {r['gbps']:.1f}"
                for r in mine
                if r["kind"] == "per_layer"
            )
            + " | hidden "
            + " ".join(
                f"{r['prefix'] // 1024}k/{r['order'][:4]} "
                + "/".join(f"{r[x]['hidden_fraction']:.2f}" for x in ("x1.0", "x1.25", "x1.5"))
                for r in mine
                if r["kind"] == "overlap"
            ),
            flush=True,
        )


def graph(s, reps: int, gate_s: float, res: list, host: str = "lf") -> None:
    """Copies as the nodes of a reused CUDA graph (:mod:`gpu_replay.transfer_graph`): a check,
    bulk (issued, and gated: execution alone), the per-layer curve and the hidden fraction."""
    import time

    from gpu_replay.cuda_build import library
    from gpu_replay.scatter_bench import _overlap_case
    from gpu_replay.scatter_setup import _gated
    from gpu_replay.transfer_graph import GraphCopyTransfer

    h, layers = s.hosts[host], tuple(range(s.geo.layer_num))
    m = GraphCopyTransfer(h, s.dev)
    ok = True
    for sel in ((0, 5, 17), layers, (7,)):
        hi, di = s.indices(40, host, False)
        for lay in sel:
            s.dev.k[lay][di] = -7
            s.dev.v[lay][di] = -7
        m(hi, di, sel, "h2d")
        torch.cuda.synchronize()
        ok = ok and all(_same(s.dev.k[i][di], h.k[i][hi]) and _same(s.dev.v[i][di], h.v[i][hi]) for i in sel)
        s.dev.k[sel[0]][di] = 5
        m(hi, di, sel[:1], "d2h")
        torch.cuda.synchronize()
        ok = ok and _same(s.dev.k[sel[0]][di], h.k[sel[0]][hi])
    res.append({"impl": "graph", "kind": "check", "check": "ok" if ok else "MISMATCH"})
    print("check graph", res[-1]["check"], flush=True)
    hi, di = s.indices(512, host, False)
    nbytes = 512 * len(layers) * s.geo.page_layer_bytes
    for d in ("h2d", "d2h"):
        t0 = time.perf_counter()
        m(hi, di, layers, d)  # instantiates the bulk graph
        torch.cuda.synchronize()
        first = time.perf_counter() - t0
        issue = []

        def call(d=d, issue=issue):
            t = time.perf_counter()
            m(hi, di, layers, d)
            issue.append(time.perf_counter() - t)

        secs = _time(call, reps)
        row = {"impl": "graph", "direction": d, "kind": "bulk", "first_call_s": first}
        res.append(row | {"issue_s": statistics.median(issue)} | _gbps(nbytes, secs))
        exe, iss = _gated(lambda d=d: m(hi, di, layers, d), 5, gate_s, library())
        res.append(row | {"kind": "gated_bulk", "max_issue_s": max(iss)} | _gbps(nbytes, exe))
    for prefix in PREFIXES:
        hi, di = s.indices(prefix // s.geo.page_size, host, False)
        for d in ("h2d", "d2h"):
            issue = []

            def loop(hi=hi, di=di, d=d, issue=issue):
                t = time.perf_counter()
                for lay in layers:
                    m(hi, di, (lay,), d)
                issue.append((time.perf_counter() - t) / len(layers))

            secs = [x / len(layers) for x in _time(loop, reps)]
            row = {"impl": "graph", "direction": d, "kind": "per_layer", "prefix": prefix}
            res.append(
                row
                | {"issue_s": statistics.median(issue)}
                | _gbps(prefix // 64 * s.geo.page_layer_bytes, secs)
            )
    q = torch.randn(4, 32, 4096, 64, device="cuda", dtype=torch.bfloat16)
    k, v = torch.randn_like(q), torch.randn_like(q)

    def attn():
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    t_attn = statistics.median(_time(attn, 10))
    for prefix in (4096, 32768):
        hi, di = s.indices(prefix // s.geo.page_size, host, False)
        for order in ("load_first", "compute_first"):
            row = {"impl": "graph", "kind": "overlap", "prefix": prefix, "order": order}
            res.append(row | _overlap_case(s, m, hi, di, attn, t_attn, order))
    mine = [r for r in res if r.get("impl") == "graph" and "gbps" in r]
    print(
        "graph "
        + " ".join(f"{r['kind'][:5]}{r.get('prefix', '')}:{r['direction']} {r['gbps']:.2f}" for r in mine)
        + " | hidden "
        + " ".join(
            f"{r['prefix'] // 1024}k/{r['order'][:4]} "
            + "/".join(f"{r[x]['hidden_fraction']:.2f}" for x in ("x1.0", "x1.25", "x1.5"))
            for r in res
            if r.get("impl") == "graph" and r.get("kind") == "overlap"
        ),
        flush=True,
    )
    m.close()
