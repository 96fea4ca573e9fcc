#!/bin/bash
# Issue 13, seventh session: the step-shape calibration and the transfer check on ONE machine, in
# one `run` call (one H100; about 5 minutes, at most ~7.8 by the timeouts below). Run from the
# repository root; everything lands in $OUT (6 files, no subfolders):
#   device_step_calib.log    everything printed (measurement passes, fit table, per-shape errors)
#   steps.json               every shape x repeat (benchmarks/gpu_step_calib.py)
#   step_calib_report.json   CV per form, chosen form, held-out errors per set and shape, repeat noise
#   h100-gpt-oss-120b-tp2-fitted.json   the fitted profile (chosen form; provenance of this machine)
#   calls-dev-cuda-iso.csv.gz, transfer_check.json   op-log replays and their held-out errors
# Shapes and the choice rule were committed before this ran: gpu_replay/calibration/step_calib.json
# and docs/gpu-replay.md ("Seventh session"). Nothing here needs packages beyond torch and numpy.
# `bash benchmarks/device_step_calib.sh --dry-run` runs the same steps on a CPU: synthetic step
# times, and the transfer scoring on a committed replay table instead of new replays.
set -uo pipefail
OUT=${OUT:-/tmp/step_calib_out}
PY=${PYTHON:-python3}  # the device host's python (torch 2.11); a venv's python for --dry-run
DRY=()
TRANSFER=()
FIT=()
if [ "${1:-}" = "--dry-run" ]; then
    DRY=(--dry-run)
    FIT=(--forms base,tiles_prefill)  # two of the six forms: a 2-core VM takes minutes for six
    TRANSFER=(--score-only gpu_replay/results/transfer-2026-11-26-s4/calls-h100m2-cuda-iso.csv.gz)
fi
mkdir -p "$OUT"
LOG=$OUT/device_step_calib.log
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONUNBUFFERED=1
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.sm,temperature.gpu,power.draw \
        --format=csv || true
    "$PY" -c "import torch, numpy; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'numpy', numpy.__version__)"
    echo "== steps (measure)"
    timeout 270 "$PY" benchmarks/gpu_step_calib.py --out "$OUT/steps.json" --budget-s 200 ${DRY[@]+"${DRY[@]}"}
    echo "rc $? at ${SECONDS} s"
    echo "== steps (fit, held-out scored once after the choice)"
    timeout 150 "$PY" -m gpu_replay.step_calib --measurements "$OUT/steps.json" --out "$OUT" \
        --workers "$(nproc)" ${FIT[@]+"${FIT[@]}"}
    echo "rc $? at ${SECONDS} s"
    nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv || true
    left=$((465 - SECONDS))
    if [ "$left" -gt 60 ]; then
        echo "== transfers (op-log replays, cuda row kernel, isolated calls; ${left} s left)"
        budget=$((left - 45 < 120 ? left - 45 : 120))
        timeout "$left" "$PY" benchmarks/gpu_transfer_check.py --out "$OUT" --budget-s "$budget" \
            ${TRANSFER[@]+"${TRANSFER[@]}"}
        echo "rc $? at ${SECONDS} s"
    else
        echo "== transfers skipped: ${left} s left"
    fi
    date -u
} 2>&1 | tee "$LOG"
