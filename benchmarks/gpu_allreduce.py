"""TP all-reduce time per message size through NCCL (issue 13, item 4), one process per GPU.

Run with torchrun (NVLink multicast stays off: NCCL_NVLS_ENABLE=0 is set here and by the lent
machines):

    torchrun --nproc_per_node 4 benchmarks/gpu_allreduce.py --out $OUT/allreduce-4.json

For each message size (bf16 elements, SGLang's hidden-state all-reduce after attention and after
the MLP: tokens x hidden x 2 bytes), the median of ``reps`` all-reduces timed by CUDA events on
rank 0 after a barrier; also with CUDA graphs off. Bus bandwidth = 2 (n - 1) / n x bytes / time
(NCCL's convention), the figure the cost model's ``allreduce_bus_gbps`` takes.
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--hidden", type=int, default=2880)
    ap.add_argument("--tokens", default="1,2,4,8,16,32,64,128,256,512,1024,2048,4096,8192,16384")
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    rows = []
    for tokens in map(int, args.tokens.split(",")):
        x = torch.ones(tokens, args.hidden, dtype=torch.bfloat16, device="cuda")
        for _ in range(5):
            dist.all_reduce(x)
        x.fill_(1.0)
        dist.all_reduce(x)
        ok = bool((x == world).all().item())
        times = []
        for _ in range(args.reps):
            dist.barrier()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            dist.all_reduce(x)
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e) / 1e3)
        t = statistics.median(times)
        nbytes = x.numel() * 2
        rows.append(
            {
                "tokens": tokens,
                "bytes": nbytes,
                "median_s": t,
                "min_s": min(times),
                "bus_gbps": 2 * (world - 1) / world * nbytes / t / 1e9,
                "correct": ok,
            }
        )
        if rank == 0:
            print(
                f"n={world} tokens {tokens:6d} {nbytes / 1e6:9.3f} MB {t * 1e6:9.1f} us "
                f"bus {rows[-1]['bus_gbps']:7.1f} GB/s ok={ok}",
                flush=True,
            )
    if rank == 0:
        env = {
            "device": torch.cuda.get_device_name(),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())),
            "world": world,
            "NCCL_NVLS_ENABLE": os.environ.get("NCCL_NVLS_ENABLE"),
        }
        with open(args.out, "w") as f:
            json.dump({"environment": env, "rows": rows}, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
