#!/bin/bash
R=$PWD
python3 -m pip install -q --no-deps --no-index .devrun/simpy-*.whl 2>&1 | tail -1
python3 -m pip install -q --no-deps --no-index --target /tmp/cy .devrun/cython-3.3.1-*.whl 2>&1 | tail -1
(PYTHONPATH=/tmp/cy taskset -c 0-7 python3 setup.py -q build_ext --inplace -j 8 >/dev/null 2>&1) &
(cd .devrun/base && PYTHONPATH=/tmp/cy taskset -c 8-15 python3 setup.py -q build_ext --inplace -j 8 >/dev/null 2>&1) &
wait
taskset -c 2 python3 benchmarks/simulate_speed.py --whole-process --against .devrun/base --rounds 7 \
  --trace "generator 12,000 (seed 0, 1 h)=$R/.devrun/gen12k.jsonl" \
  --trace "Mooncake synthetic (3,993)=$R/.devrun/synthetic_trace.jsonl" 2>&1 | tail -12
