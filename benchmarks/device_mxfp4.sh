#!/bin/bash
# Issue 13, eighth session: the decode MoE with MXFP4 experts (a Triton kernel on packed 4-bit
# values and E8M0 scales) against the bf16 stand-in, and the stand-in's prefill MoE part by part
# around 4,096 tokens, in ONE `run` call (one H100 or H200; about 3 minutes, at most ~7 by the
# timeouts). Only torch, triton and numpy are needed on the machine. Everything lands in $OUT:
#   device_mxfp4.log     everything printed (checks, per-batch times, the prefill probe)
#   mxfp4_decode.json    benchmarks/gpu_mxfp4_decode.py's record (analysed on a CPU by
#                        python -m gpu_replay.mxfp4_fit)
#   gpu_tests.log        tests/test_gpu_replay_mxfp4.py on CUDA (bf16), where pytest exists
set -uo pipefail
OUT=${OUT:-/tmp/mxfp4_out}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONUNBUFFERED=1
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.sm,temperature.gpu,power.draw \
        --format=csv || true
    "$PY" -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
    echo "== decode MoE (checks, then timings) and the prefill probe"
    timeout 360 "$PY" benchmarks/gpu_mxfp4_decode.py --out "$OUT/mxfp4_decode.json"
    echo "rc $? at ${SECONDS} s"
    if "$PY" -c "import pytest" 2>/dev/null; then
        timeout 90 "$PY" -m pytest -q -p no:cacheprovider tests/test_gpu_replay_mxfp4.py > "$OUT/gpu_tests.log" 2>&1
        echo "gpu tests rc $? at ${SECONDS} s: $(tail -n 1 "$OUT/gpu_tests.log")"
    fi
    nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv || true
    date -u
} 2>&1 | tee "$OUT/device_mxfp4.log"
