"""Step-time microbenchmarks of one TP rank with a preset's real shapes (issue 13, item 4).

Times each operator of a layer with random weights on one GPU, for prefill (several new-token and
prefix lengths) and decode (several batch sizes and context lengths), and assembles a whole-step
estimate from the preset's layer counts: full layers x (full-layer ops) + SWA layers x (SWA-layer
ops) + the LM head. Writes $OUT/gpu_step_time.json (or --out) and prints a table.

Stand-ins for SGLang's kernels (what each leaves out is in the JSON's ``stand_ins``):
- attention (fa3 in SGLang): torch SDPA (flash backend where torch picks it) on contiguous K/V;
  decode folds the GQA group into the query length (exact for one query token); prefill with a
  prefix is a causal SDPA over the new tokens plus an unmasked one over the prefix (the two-part
  softmax merge is not timed); SWA prefill attends 128-token query blocks to 256-token key blocks
  (about twice the banded work, an upper bound);
- MoE (gpt-oss runs MXFP4 experts through triton_kernels): a bf16 grouped GEMM
  (``torch._grouped_mm``) with top-k routing, sort and weighted scatter, or for small batches the
  faster of that and one GEMM per touched expert; bf16 weights move 3.8x the bytes of MXFP4, so
  weight-bound decode steps are an upper bound;
- dense projections and the LM head: cuBLAS bf16 GEMMs; norms, rotary and sampling are left out;
- the TP all-reduce is not measured here (one GPU).

    python benchmarks/gpu_step_time.py --model gpt-oss-120b --tp 2
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
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gpu_transfer  # noqa: E402

from simulator.models import load_model  # noqa: E402

BF16 = torch.bfloat16


def _time(fn, reps: int = 20, warmup: int = 3) -> float:
    """Median seconds per call by CUDA events (gpu_transfer's timer)."""
    return statistics.median(gpu_transfer._time(fn, reps, warmup))


class RankShapes:
    """Per-rank shapes of one model at TP ``tp`` (heads and MoE/MLP width split over ranks)."""

    def __init__(self, model: str, tp: int) -> None:
        spec = load_model(model)
        need = ("hidden_size", "num_attention_heads", "vocab_size")
        missing = [n for n in need if getattr(spec, n) is None]
        if missing:
            raise SystemExit(f"{model}: preset lacks {missing} for step-time shapes")
        self.spec = spec
        self.hidden = spec.hidden_size
        self.q_heads = spec.num_attention_heads // tp
        self.kv_heads = spec.kv_heads_per_rank(tp)
        self.head_dim = spec.head_dim
        self.window = spec.sliding_window or 0
        self.experts = spec.num_experts or 0
        self.top_k = spec.experts_per_token or 0
        width = spec.moe_intermediate_size or spec.intermediate_size
        self.inter = width // tp
        self.vocab = spec.vocab_size // tp
        self.full_layers, self.swa_layers = spec.num_full_layers, spec.num_swa_layers


class Ops:
    """Random weights of one layer and the LM head, and the timed operators."""

    def __init__(self, r: RankShapes) -> None:
        self.r = r
        dev = "cuda"
        qkv = (r.q_heads + 2 * r.kv_heads) * r.head_dim
        self.w_qkv = torch.randn(r.hidden, qkv, device=dev, dtype=BF16) * 0.02
        self.w_o = torch.randn(r.q_heads * r.head_dim, r.hidden, device=dev, dtype=BF16) * 0.02
        self.w_router = torch.randn(r.hidden, r.experts, device=dev, dtype=BF16) * 0.02
        self.w_up = torch.randn(r.experts, r.hidden, 2 * r.inter, device=dev, dtype=BF16) * 0.02
        self.w_down = torch.randn(r.experts, r.inter, r.hidden, device=dev, dtype=BF16) * 0.02
        self.w_lm = torch.randn(r.hidden, r.vocab, device=dev, dtype=BF16) * 0.02
        self.grouped = "torch._grouped_mm"

    def dense(self, t: int) -> dict[str, float]:
        x = torch.randn(t, self.r.hidden, device="cuda", dtype=BF16)
        a = torch.randn(t, self.w_o.shape[0], device="cuda", dtype=BF16)
        return {"qkv_proj": _time(lambda: x @ self.w_qkv), "o_proj": _time(lambda: a @ self.w_o)}

    def moe(self, t: int) -> float:
        """Best of the grouped GEMM and (small batches) a loop over the touched experts only."""
        best = self._moe(t, grouped=True)
        if t * self.r.top_k <= 256:
            best = min(best, self._moe(t, grouped=False))
        return best

    def _moe(self, t: int, *, grouped: bool) -> float:
        r = self.r
        x = torch.randn(t, r.hidden, device="cuda", dtype=BF16)
        mm = self._grouped if grouped else self._expert_loop

        def run():
            logits = x @ self.w_router
            weights, experts = logits.float().softmax(-1).topk(r.top_k, dim=-1)
            flat = experts.flatten()
            order = flat.argsort()
            token = order // r.top_k
            offs = torch.bincount(flat, minlength=r.experts).cumsum(0).to(torch.int32)
            xs = x.index_select(0, token)
            h = mm(xs, self.w_up, offs)
            h = F.silu(h[:, : r.inter]) * h[:, r.inter :]
            y = mm(h, self.w_down, offs)
            y = y * weights.flatten()[order].to(BF16)[:, None]
            return torch.zeros_like(x).index_add_(0, token, y)

        return _time(run, reps=10)

    def _grouped(self, a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        if self.grouped == "torch._grouped_mm":
            try:
                return torch._grouped_mm(a, b, offs=offs)
            except (RuntimeError, TypeError) as exc:
                self.grouped = f"per-expert torch.mm loop ({type(exc).__name__}: {str(exc)[:120]})"
        return self._expert_loop(a, b, offs)

    @staticmethod
    def _expert_loop(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        """One GEMM per expert that has tokens (reads only those experts' weights; the host sync
        on ``offs`` is part of its cost)."""
        ends = offs.tolist()
        out = torch.empty(a.shape[0], b.shape[2], device=a.device, dtype=a.dtype)
        start = 0
        for e, end in enumerate(ends):
            if end > start:
                torch.mm(a[start:end], b[e], out=out[start:end])
            start = end
        return out

    def lm_head(self, t: int) -> float:
        x = torch.randn(t, self.r.hidden, device="cuda", dtype=BF16)
        return _time(lambda: x @ self.w_lm)

    def attn_decode(self, batch: int, ctx: int) -> float:
        """One query token per request; the GQA group rides in the query length (exact)."""
        r = self.r
        group = r.q_heads // r.kv_heads
        q = torch.randn(batch, r.kv_heads, group, r.head_dim, device="cuda", dtype=BF16)
        k = torch.randn(batch, r.kv_heads, ctx, r.head_dim, device="cuda", dtype=BF16)
        v = torch.randn_like(k)
        return _time(lambda: F.scaled_dot_product_attention(q, k, v))

    def attn_prefill(self, new: int, prefix: int) -> float:
        r = self.r
        q = torch.randn(1, r.q_heads, new, r.head_dim, device="cuda", dtype=BF16)
        k = torch.randn(1, r.q_heads, new, r.head_dim, device="cuda", dtype=BF16)
        v = torch.randn_like(k)
        kp = torch.randn(1, r.q_heads, prefix, r.head_dim, device="cuda", dtype=BF16) if prefix else None
        vp = torch.randn_like(kp) if prefix else None

        def run():
            F.scaled_dot_product_attention(q, k, v, is_causal=True)
            if prefix:
                F.scaled_dot_product_attention(q, kp, vp)

        return _time(run)

    def attn_prefill_swa(self, new: int) -> float:
        r = self.r
        blk = 128
        nb = max(1, new // blk)
        q = torch.randn(nb, r.q_heads, blk, r.head_dim, device="cuda", dtype=BF16)
        k = torch.randn(nb, r.q_heads, 2 * blk, r.head_dim, device="cuda", dtype=BF16)
        v = torch.randn_like(k)
        return _time(lambda: F.scaled_dot_product_attention(q, k, v))


def step(ops: Ops, r: RankShapes, tokens: int, attn_full: float, attn_swa: float, lm_rows: int) -> dict:
    dense = ops.dense(tokens)
    moe = ops.moe(tokens)
    per_full = dense["qkv_proj"] + dense["o_proj"] + moe + attn_full
    per_swa = dense["qkv_proj"] + dense["o_proj"] + moe + attn_swa
    lm = ops.lm_head(lm_rows)
    total = r.full_layers * per_full + r.swa_layers * per_swa + lm
    return {
        "tokens": tokens,
        "qkv_proj_s": dense["qkv_proj"],
        "o_proj_s": dense["o_proj"],
        "moe_s": moe,
        "attn_full_s": attn_full,
        "attn_swa_s": attn_swa,
        "lm_head_s": lm,
        "step_s": total,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gpt-oss-120b")
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--prefill", default="512,2048,8192", help="new tokens per prefill step")
    ap.add_argument("--prefix", default="0,8192", help="cached prefix tokens")
    ap.add_argument("--batch", default="1,8,32,128,256")
    ap.add_argument("--context", default="1024,8192,32768")
    ap.add_argument("--max-kv-tokens", type=int, default=2_200_000, help="skip decode shapes above")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "gpu_step_time.json"))
    args = ap.parse_args()
    t0 = time.perf_counter()
    r = RankShapes(args.model, args.tp)
    ops = Ops(r)
    res: dict = {
        "environment": {
            "device": torch.cuda.get_device_name(),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "command": " ".join(sys.argv),
        },
        "shapes": dict(vars(r), spec=None),
        "prefill": [],
        "decode": [],
        "errors": [],
    }
    for new in map(int, args.prefill.split(",")):
        for prefix in map(int, args.prefix.split(",")):
            try:
                row = step(ops, r, new, ops.attn_prefill(new, prefix), ops.attn_prefill_swa(new), 1)
                res["prefill"].append({"new": new, "prefix": prefix} | row)
                print(f"prefill new {new:6d} prefix {prefix:6d}: {1e3 * row['step_s']:8.2f} ms", flush=True)
            except Exception as exc:  # noqa: BLE001 - record and go on
                res["errors"].append(f"prefill {new}/{prefix}: {type(exc).__name__}: {exc}")
            torch.cuda.empty_cache()
    for batch in map(int, args.batch.split(",")):
        for ctx in map(int, args.context.split(",")):
            if batch * ctx > args.max_kv_tokens:
                continue
            try:
                swa_ctx = min(ctx, r.window + 1) if r.window else ctx
                row = step(ops, r, batch, ops.attn_decode(batch, ctx), ops.attn_decode(batch, swa_ctx), batch)
                res["decode"].append({"batch": batch, "context": ctx} | row)
                print(f"decode batch {batch:4d} ctx {ctx:6d}: {1e3 * row['step_s']:8.2f} ms", flush=True)
            except Exception as exc:  # noqa: BLE001
                res["errors"].append(f"decode {batch}/{ctx}: {type(exc).__name__}: {exc}")
            torch.cuda.empty_cache()
    res["stand_ins"] = {
        "attention": "torch SDPA on contiguous K/V for SGLang's fa3 paged attention",
        "moe": f"bf16 grouped GEMM ({ops.grouped}) for SGLang's MXFP4 triton_kernels MoE",
        "left_out": "norms, rotary, sampling, the TP all-reduce, CUDA-graph launch savings",
    }
    res["errors"] = res["errors"]
    res["wall_s"] = time.perf_counter() - t0
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1))
    print(f"grouped GEMM: {ops.grouped}; errors: {len(res['errors'])}; wall {res['wall_s']:.1f} s")
    for e in res["errors"][:5]:
        print("ERROR", e[:300])


if __name__ == "__main__":
    main()


def decode_graph_step(ops: Ops, r: RankShapes, batch: int, ctx: int) -> dict:
    """One decode step as SGLang runs it, from a CUDA graph: a full and an SWA layer (qkv
    projection, attention, o projection, routed MoE through the grouped GEMM with on-device
    offsets) are each captured once and replayed; step = full layers x full + SWA layers x SWA +
    LM head (eager GEMM). Norms, rotary and sampling are left out as in :func:`step`."""
    group = r.q_heads // r.kv_heads
    x = torch.randn(batch, r.hidden, device="cuda", dtype=BF16)
    q = torch.randn(batch, r.kv_heads, group, r.head_dim, device="cuda", dtype=BF16)
    swa_ctx = min(ctx, r.window + 1) if r.window else ctx
    kv = {
        n: torch.randn(2, batch, r.kv_heads, c, r.head_dim, device="cuda", dtype=BF16)
        for n, c in (("full", ctx), ("swa", swa_ctx))
    }
    ones = torch.ones(batch * r.top_k, device="cuda", dtype=torch.int32)

    def layer(name: str):
        x @ ops.w_qkv  # the projection's kernel (its output feeds q/k/v in SGLang)
        a = F.scaled_dot_product_attention(q, kv[name][0], kv[name][1])
        y = a.reshape(batch, -1) @ ops.w_o
        logits = y @ ops.w_router
        weights, experts = logits.float().softmax(-1).topk(r.top_k, dim=-1)
        flat = experts.flatten()
        order = flat.argsort()
        token = order // r.top_k
        counts = torch.zeros(r.experts, device="cuda", dtype=torch.int32).scatter_add_(0, flat, ones)
        offs = counts.cumsum(0).to(torch.int32)
        xs = y.index_select(0, token)
        g = torch._grouped_mm(xs, ops.w_up, offs=offs)
        g = F.silu(g[:, : r.inter]) * g[:, r.inter :]
        o = torch._grouped_mm(g, ops.w_down, offs=offs)
        o = o * weights.flatten()[order].to(BF16)[:, None]
        return torch.zeros_like(y).index_add_(0, token, o)

    times = {}
    for name in ("full", "swa"):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                layer(name)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            layer(name)
        times[name] = _time(graph.replay, reps=20)
    lm = ops.lm_head(batch)
    total = r.full_layers * times["full"] + r.swa_layers * times["swa"] + lm
    return {
        "layer_full_graph_s": times["full"],
        "layer_swa_graph_s": times["swa"],
        "lm_head_s": lm,
        "step_graph_s": total,
    }
