#!/bin/bash
# Issue 13, seventh session: per-layer loads on an SM partition (CUDA green contexts) beside
# attention on the other SMs, in ONE `run` call (one H100 or H200; about 5 minutes, at most ~7.5 by
# the timeouts below). Run from the repository root; only torch and numpy are needed on the machine
# (the transfer kernels build with its nvcc). Everything lands in $OUT (no subfolders):
#   device_green.log   everything printed: support record, peak, checks, per-layer curves, every
#                      overlap cell, and at the end the tables (curve, overlap, verdicts)
#   green.json         the full record (gpu_replay/scatter_green.py; tables from gpu_replay/green_plan.py)
#   green_probe.json   torch's green-context support and one partition per k, made and closed
#                      before the measurement (what the driver granted, or why not)
# `bash benchmarks/device_green.sh --dry-run` runs the planning and tables on a CPU (synthetic).
set -uo pipefail
OUT=${OUT:-/tmp/green_out}
PY=${PYTHON:-python3}  # the device host's python (torch 2.11); a venv's python for --dry-run
mkdir -p "$OUT"
LOG=$OUT/device_green.log
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONUNBUFFERED=1
{
    date -u
    if [ "${1:-}" = "--dry-run" ]; then
        "$PY" -m gpu_replay.scatter_green --dry-run --out "$OUT/green.json"
        echo "rc $?"
        exit 0
    fi
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.sm,temperature.gpu,power.draw \
        --format=csv || true
    "$PY" -c "import torch, numpy; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'numpy', numpy.__version__)"
    echo "== probe (green-context support, one partition per k)"
    timeout 60 "$PY" -m gpu_replay.green_ctx --out "$OUT/green_probe.json"
    echo "rc $? at ${SECONDS} s"
    left=$((440 - SECONDS))
    budget=$((left - 90))  # setup, build and peak take about a minute before the overlap cells
    echo "== measure (${left} s left, overlap budget ${budget} s)"
    timeout "$left" "$PY" -m gpu_replay.scatter_green --out "$OUT/green.json" --budget-s "$budget"
    echo "rc $? at ${SECONDS} s"
    nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv || true
    date -u
} 2>&1 | tee "$LOG"
