#!/bin/bash
# Session 9: whole process of `kvplan run`, this checkout against .devrun/base, on the device host's quiet CPUs.
# Needs .devrun/ (carried): the simpy and cython wheels, base/ (`git archive 74870d7`), and the three traces.
R=$PWD
python3 -m pip install -q --no-deps --no-index .devrun/simpy-*.whl 2>&1 | tail -1
python3 -m pip install -q --no-deps --no-index --target /tmp/cy .devrun/cython-3.3.1-*.whl 2>&1 | tail -1
(PYTHONPATH=/tmp/cy taskset -c 0-7 python3 setup.py -q build_ext --inplace -j 8 >/dev/null 2>&1; echo built this $?) &
(cd .devrun/base && PYTHONPATH=/tmp/cy taskset -c 8-15 python3 setup.py -q build_ext --inplace -j 8 >/dev/null 2>&1; echo built base $?) &
wait
ls simulator/engine/*.so | wc -l; ls .devrun/base/simulator/engine/*.so | wc -l
nproc; uptime; python3 --version
taskset -c 2 python3 benchmarks/simulate_speed.py --whole-process --against .devrun/base --rounds 7 \
  --trace "generator 12,000 (seed 0, 1 h)=$R/.devrun/gen12k.jsonl" \
  --trace "Azure conversation (19,366)=$R/.devrun/AzureLLMInferenceTrace_conv.csv" \
  --trace "Mooncake synthetic (3,993)=$R/.devrun/synthetic_trace.jsonl" --out $OUT/s9-device-quiet.md 2>&1 | tail -14
for i in 1 2 3 4 5; do /usr/bin/time -f "help %e s wall %U+%S cpu" taskset -c 3 python3 -m simulator.cli.main --help > /dev/null; done
