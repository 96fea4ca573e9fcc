#!/bin/bash
# Issue 13, eighth session: one machine's profile with a longer write-back replay, in ONE `run`
# call (one H200 asked; about 8-9 minutes, at most ~9.6 by the timeouts below). The same three
# steps as benchmarks/device_step_calib.sh (same shapes, same pre-registered fit rule, same op
# logs and replay options), in another order and with another transfer budget:
#   1. step shapes, 9 interleaved passes (benchmarks/gpu_step_calib.py, budget 200 s);
#   2. the write-back replays (benchmarks/gpu_transfer_check.py) for TRANSFER_BUDGET_S (default
#      330 s: about 7 passes on an H200, against 2 in the seventh session's call), on an idle host
#      (the fit's 16 CPU workers would disturb the host-side call overheads being timed);
#   3. the step fit (python -m gpu_replay.step_calib), last: it is deterministic, so if the call is
#      cut off it reruns on any CPU from the returned steps.json.
# Everything lands in $OUT (no subfolders): device_profile_long.log, steps.json,
# step_calib_report.json, <gpu>-gpt-oss-120b-tp2-fitted.json (step_calib's own output),
# calls-dev-cuda-iso.csv.gz, transfer_check.json. The committed profile is then built on a CPU:
#   python -m gpu_replay.machine_profile --results <committed copy of $OUT> --no-mimo
set -uo pipefail
OUT=${OUT:-/tmp/profile_long_out}
PY=${PYTHON:-python3}
TRANSFER_BUDGET_S=${TRANSFER_BUDGET_S:-330}
mkdir -p "$OUT"
LOG=$OUT/device_profile_long.log
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONUNBUFFERED=1
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.sm,temperature.gpu,power.draw \
        --format=csv || true
    "$PY" -c "import torch, numpy; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'numpy', numpy.__version__)"
    echo "== steps (measure)"
    timeout 270 "$PY" benchmarks/gpu_step_calib.py --out "$OUT/steps.json" --budget-s 200
    echo "rc $? at ${SECONDS} s"
    echo "== transfers (op-log replays, cuda row kernel, isolated calls; budget ${TRANSFER_BUDGET_S} s)"
    timeout "$((TRANSFER_BUDGET_S + 90))" "$PY" benchmarks/gpu_transfer_check.py --out "$OUT" \
        --budget-s "$TRANSFER_BUDGET_S"
    echo "rc $? at ${SECONDS} s"
    nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv || true
    left=$((575 - SECONDS))
    echo "== steps (fit, held-out scored once after the choice; ${left} s left)"
    timeout "$left" "$PY" -m gpu_replay.step_calib --measurements "$OUT/steps.json" --out "$OUT" \
        --workers "$(nproc)"
    echo "rc $? at ${SECONDS} s"
    date -u
} 2>&1 | tee "$LOG"
