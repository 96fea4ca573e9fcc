#!/bin/bash
# Issue 13, eighth session: the decode all-reduce inside a CUDA graph against the eager one, on 4
# and on 2 GPUs of one host, in ONE `run` call (nvidia-h100-x4; about 1-2 minutes). NCCL, NVLink
# multicast off (NCCL_NVLS_ENABLE=0). Everything lands in $OUT:
#   device_allreduce_graph.log, allreduce_graph-4.json, allreduce_graph-2.json
set -uo pipefail
OUT=${OUT:-/tmp/allreduce_graph_out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
{
    date -u
    nvidia-smi --query-gpu=name,driver_version --format=csv || true
    nvidia-smi topo -m || true
    for n in 4 2; do
        echo "== $n GPUs"
        CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((n - 1))) timeout 200 torchrun --standalone --nproc_per_node "$n" \
            benchmarks/gpu_allreduce_graph.py --out "$OUT/allreduce_graph-$n.json"
        echo "rc $? at ${SECONDS} s"
    done
    date -u
} 2>&1 | tee "$OUT/device_allreduce_graph.log"
