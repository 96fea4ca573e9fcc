#!/bin/bash
# Issue 13, ninth session: one-launch layer loads against per-layer launches (bandwidth alone and
# hidden behind attention on the whole GPU), and the ceilings of a bulk transfer of random pages,
# in ONE `run` call (one H100 or H200; about 5 minutes). Run from the repository root; only torch
# and numpy are needed on the machine (the kernels build with its nvcc). Outputs in $OUT:
#   device_persist.log  everything printed (GPU tests' summary, both measurements' lines)
#   gpu_tests.log       tests/test_gpu_replay_layers.py and the bulk-kernel cases of test_gpu_transfer.py
#   persist.json        gpu_replay/scatter_persist.py: checks, per-layer curves, overlap cells
#   ceiling.json        gpu_replay/scatter_ceiling.py: engine copies by size, SM kernels, bulk movers, bounds
#                       (its options from $CEILING_ARGS, e.g. "--parts ce,sm,gated,bulk --regions-gib 0.25,2")
# SKIP_TESTS=1 / SKIP_CEILING=1 leave out the GPU tests / the ceilings (a repeat of the loads alone).
set -uo pipefail
OUT=${OUT:-/tmp/persist_out}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONUNBUFFERED=1
export KVPLAN_CUDA_CACHE=${KVPLAN_CUDA_CACHE:-/tmp/kvc}
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current,clocks.sm,temperature.gpu,power.draw \
        --format=csv || true
    "$PY" -c "import torch, numpy; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'numpy', numpy.__version__)"
    if [ -z "${SKIP_TESTS:-}" ] && "$PY" -c "import pytest" 2>/dev/null; then
        echo "== GPU tests"
        timeout 150 "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu_replay_layers.py \
            tests/test_gpu_transfer.py -k "layers or cuda_bulk or one_launch or waiting" > "$OUT/gpu_tests.log" 2>&1
        echo "rc $? at ${SECONDS} s: $(tail -n 1 "$OUT/gpu_tests.log")"
    fi
    echo "== one-launch layer loads"
    timeout 300 "$PY" -m gpu_replay.scatter_persist --out "$OUT/persist.json" --budget-s 200
    echo "rc $? at ${SECONDS} s"
    left=$((560 - SECONDS))
    if [ -z "${SKIP_CEILING:-}" ]; then
        echo "== bulk ceilings (${left} s left)"
        timeout "$left" "$PY" -m gpu_replay.scatter_ceiling --out "$OUT/ceiling.json" ${CEILING_ARGS:-}
        echo "rc $? at ${SECONDS} s"
    fi
    nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv || true
    date -u
} 2>&1 | tee "$OUT/device_persist.log"
