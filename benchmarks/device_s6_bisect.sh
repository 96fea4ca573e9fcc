#!/bin/bash
# which commit of session 6 slowed the synthetic trace: this tree against 056dfcb, df82776 and cb36b30
R=$PWD
python3 -m pip install -q --no-deps --no-index .devrun/simpy-*.whl 2>&1 | tail -n 1
python3 -m pip install -q --no-deps --no-index --target /tmp/cy .devrun/cython-3.3.1-*.whl 2>&1 | tail -n 1
(PYTHONPATH=/tmp/cy taskset -c 0-3 python3 setup.py -q build_ext --inplace -j 4 >/dev/null 2>&1) &
(cd .devrun/base && PYTHONPATH=/tmp/cy taskset -c 4-7 python3 setup.py -q build_ext --inplace -j 4 >/dev/null 2>&1) &
(cd .devrun/b_df82776 && PYTHONPATH=/tmp/cy taskset -c 8-11 python3 setup.py -q build_ext --inplace -j 4 >/dev/null 2>&1) &
(cd .devrun/b_cb36b30 && PYTHONPATH=/tmp/cy taskset -c 12-15 python3 setup.py -q build_ext --inplace -j 4 >/dev/null 2>&1) &
wait
for d in . .devrun/base .devrun/b_df82776 .devrun/b_cb36b30; do (cd $d && KVPLAN_REQUIRE_COMPILED=1 python3 -c "import simulator.engine.server as s; print(s.__file__)"); done
i=2
for b in base b_df82776 b_cb36b30; do
  taskset -c $i python3 benchmarks/simulate_speed.py --whole-process --against .devrun/$b --rounds 11 \
     --trace "Mooncake synthetic (3,993)=$R/.devrun/synthetic_trace.jsonl" > $OUT/vs_$b.txt 2>&1 &
  i=$((i+2))
done
wait
for b in base b_df82776 b_cb36b30; do echo "== this vs $b"; grep -E "speed-up|\| this|\| against" $OUT/vs_$b.txt; done
