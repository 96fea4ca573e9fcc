"""The decode all-reduce inside a CUDA graph against the eager one (issue 13; seed 000's decode
step pays 96 eager NCCL all-reduces in kvplan's profile, where SGLang replays its decode from a
CUDA graph). One process per GPU, NCCL, NVLink multicast off:

    torchrun --nproc_per_node 4 benchmarks/gpu_allreduce_graph.py --out $OUT/allreduce_graph-4.json

For each hidden size and decode batch (bf16 messages of batch x hidden x 2 bytes), rank 0 records:
``eager_barrier_s`` (benchmarks/gpu_allreduce.py's measure: a barrier, then one all-reduce timed by
CUDA events), ``eager_chain_s`` (``--chain`` all-reduces issued back to back, time / chain) and
``graph_s`` (the same chain captured in one CUDA graph and replayed, time / chain): the last is the
all-reduce a graph-replayed decode step pays. Each is the median of ``--reps``; the sums are
checked after each method.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def _events(fn) -> float:
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    fn()
    e.record()
    e.synchronize()
    return s.elapsed_time(e) / 1e3


def measure(x: torch.Tensor, chain: int, reps: int, world: int) -> dict:
    """The three timings of one message size (seconds per all-reduce) and the sum checks."""

    def run_chain():
        for _ in range(chain):
            dist.all_reduce(x)

    out: dict = {}
    for _ in range(3):
        run_chain()
    times = []
    for _ in range(reps):
        dist.barrier()
        times.append(_events(lambda: dist.all_reduce(x)))
    out["eager_barrier_s"] = statistics.median(times)
    dist.barrier()
    out["eager_chain_s"] = statistics.median(_events(run_chain) for _ in range(reps)) / chain
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        run_chain()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        run_chain()
    dist.barrier()
    g.replay()
    torch.cuda.synchronize()
    dist.barrier()
    out["graph_s"] = statistics.median(_events(g.replay) for _ in range(reps)) / chain
    x.fill_(1.0)
    g.replay()  # chain all-reduces of ones: world ** chain (exact in bf16 for small powers of 2)
    torch.cuda.synchronize()
    out["graph_sum_ok"] = bool((x == float(world) ** chain).all().item()) if world**chain < 2**60 else None
    x.fill_(1.0)
    dist.all_reduce(x)
    out["eager_sum_ok"] = bool((x == world).all().item())
    del g
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--hidden", default="2880,4096")
    ap.add_argument("--batches", default="1,2,4,8,10,16,32,64,128,256")
    ap.add_argument("--chain", type=int, default=16)
    ap.add_argument("--reps", type=int, default=30)
    a = ap.parse_args()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    rows = []
    for hidden in map(int, a.hidden.split(",")):
        for bs in map(int, a.batches.split(",")):
            x = torch.ones(bs, hidden, dtype=torch.bfloat16, device="cuda")
            row = {
                "hidden": hidden,
                "batch": bs,
                "bytes": x.numel() * 2,
                **measure(x, a.chain, a.reps, world),
            }
            rows.append(row)
            if rank == 0:
                print(
                    f"hidden {hidden} bs {bs:4d} ({row['bytes']:8d} B): eager+barrier "
                    f"{row['eager_barrier_s'] * 1e6:7.1f} us  "
                    f"eager chain {row['eager_chain_s'] * 1e6:6.1f} us  "
                    f"graph {row['graph_s'] * 1e6:6.1f} us  sums {row['eager_sum_ok']}/{row['graph_sum_ok']}",
                    flush=True,
                )
    if rank == 0:
        props = torch.cuda.get_device_properties(0)
        env = {"name": props.name, "torch": torch.__version__, "cuda": torch.version.cuda, "world": world}
        env["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        with open(a.out, "w") as f:
            json.dump({"environment": env, "chain": a.chain, "reps": a.reps, "rows": rows}, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
