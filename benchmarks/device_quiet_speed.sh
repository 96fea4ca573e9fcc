#!/bin/bash
# Quiet-machine timings on the lent GPU host (its CPU only): `kvplan plan` on the bundled default
# pinned to two cores, and the whole process against another checkout on one core.
# Run from the repository root there with the `run` tool, carrying .devrun/ holding: base/ (an
# exported checkout to compare with: `git archive COMMIT | tar -x -C .devrun/base`), simpy's
# wheel (the host's image lacks only simpy), and the traces named below.
set -euo pipefail
R=$PWD
OUT=${OUT:-/tmp}
python3 -m pip install -q --no-deps --no-index .devrun/simpy-*.whl
python3 setup.py -q build_ext --inplace -j 8
(cd .devrun/base && python3 setup.py -q build_ext --inplace -j 8)  # a checkout with a compiled core
PLAN='plan --model gpt-oss-120b --gpu H200 --tp 8 --page-size 64 --slo ttft.p90<=2.0,cache_hit_rate>=0.2 -j 2 --json'
for who in this base; do
    d=$R; [ "$who" = base ] && d=$R/.devrun/base
    # shellcheck disable=SC2086  # PLAN is split into words on purpose
    (cd "$d" && PYTHONPATH=$d /usr/bin/time -f "$who plan wall %e s user %U sys %S" \
        taskset -c 0,1 python3 -m simulator.cli.main $PLAN > "$OUT/plan_$who.json")
done
python3 -c "
import json
a, b = (json.load(open('$OUT/plan_' + w + '.json')) for w in ('this', 'base'))
print('same launch flags:', a['launch_flags'] == b['launch_flags'], a['launch_flags'], 'met', a['met'], b['met'])"
taskset -c 2 python3 benchmarks/simulate_speed.py --whole-process --against .devrun/base --rounds 3 \
    --trace "Mooncake synthetic (3,993)=$R/.devrun/synthetic_trace.jsonl" \
    --trace "generator 12,000 (seed 0, 1 h)=$R/.devrun/gen12k.jsonl" \
    --trace "Azure conversation=$R/.devrun/AzureLLMInferenceTrace_conv.csv"
# issue 12, item 6: the 100-configuration sweep on two worker processes pinned to two cores
PYTHONPATH=$R taskset -c 0,1 python3 benchmarks/sweep_speed.py --backends j2 \
    --trace "$R/.devrun/synthetic_trace.jsonl" --out "$OUT/sweep_this.json"
