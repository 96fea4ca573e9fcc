#!/bin/bash
# Issue 13, seventh session: per-layer loads on an SM partition (CUDA green contexts) beside
# attention on the other SMs, in ONE `run` call (one H100 or H200; about 4 minutes: the main
# pass took 147 s on an H200; at most ~7.6 by the timeouts below). Run from the repository root;
# only torch and numpy are needed on the machine (the transfer kernels build with its nvcc).
# Everything lands in $OUT (no subfolders):
#   device_green.log   everything printed: support record, peak, checks, per-layer curves, every
#                      overlap cell, and at the end the tables (curve, overlap, verdicts)
#   green.json         the full record (gpu_replay/scatter_green.py; tables: green_plan.py)
#   green_probe.json   torch's green-context support and one partition per k and backend, made,
#                      used by one kernel per stream and closed (what the driver granted, or why not)
#   gpu_tests.log      tests/test_gpu_replay_green.py -m gpu (loaded / backed-up bytes under a
#                      partition in every order), where the machine's python has pytest
#   green_k32_b8.json, green_k8_b4.json   two short passes (split only, no baseline): the load
#                      kernel held to 8 blocks on a 32-SM partition and to 4 on the 8-SM one
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
    if "$PY" -c "import pytest" 2>/dev/null; then
        echo "== GPU tests (bytes under a partition, every order and direction)"
        timeout 120 "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu_replay_green.py \
            > "$OUT/gpu_tests.log" 2>&1
        echo "rc $? at ${SECONDS} s: $(tail -n 1 "$OUT/gpu_tests.log")"
    else
        echo "== GPU tests skipped: no pytest on this machine"
    fi
    left=$((440 - SECONDS))
    budget=$((left - 90))  # setup, build and peak take about a minute before the overlap cells
    echo "== measure (${left} s left, overlap budget ${budget} s)"
    timeout "$left" "$PY" -m gpu_replay.scatter_green --out "$OUT/green.json" --budget-s "$budget"
    echo "rc $? at ${SECONDS} s"
    # Fewer host reads in flight (first H200 run: hiding fell as the load side grew, 8 SMs best):
    # 8 blocks on a 32-SM partition (block count or partition size?), 4 blocks on the 8-SM one.
    for extra in "32 8" "8 4"; do
        set -- $extra
        left=$((450 - SECONDS))
        if [ "$left" -lt 70 ]; then echo "== blocks pass k=$1 blocks=$2 skipped: ${left} s left"; continue; fi
        echo "== blocks pass: split k=$1, load kernel on $2 blocks (${left} s left)"
        timeout "$((left - 10))" "$PY" -m gpu_replay.scatter_green --out "$OUT/green_k$1_b$2.json" \
            --ks "$1" --modes split --no-baseline --load-blocks "$2" --reps 5 --budget-s "$((left - 30))" \
            | grep -v "^ *[0-9]*k \(none\|split\)"
        echo "rc ${PIPESTATUS[0]} at ${SECONDS} s"
    done
    nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv || true
    date -u
} 2>&1 | tee "$LOG"
