#!/bin/bash
# session 6 quiet-machine timings: this tree against 056dfcb (.devrun/base), one trace per core
R=$PWD
python3 -m pip install -q --no-deps --no-index .devrun/simpy-*.whl 2>&1 | tail -1
python3 -m pip install -q --no-deps --no-index --target /tmp/cy .devrun/cython-3.3.1-*.whl 2>&1 | tail -1
(PYTHONPATH=/tmp/cy taskset -c 0-7 python3 setup.py -q build_ext --inplace -j 8 >/dev/null 2>&1) &
(cd .devrun/base && PYTHONPATH=/tmp/cy taskset -c 8-15 python3 setup.py -q build_ext --inplace -j 8 >/dev/null 2>&1) &
wait
KVPLAN_REQUIRE_COMPILED=1 python3 -c "import simulator.engine.server as s, simulator.engine.decode_clock as d; print(s.__file__, d.__file__)"
(cd .devrun/base && KVPLAN_REQUIRE_COMPILED=1 python3 -c "import simulator.engine.server as s; print(s.__file__)")
lscpu | grep "Model name"
i=2
for t in "Mooncake synthetic (3,993)=$R/.devrun/synthetic_trace.jsonl" "generator 12,000 (seed 0, 1 h)=$R/.devrun/gen12k.jsonl" "Azure conversation=$R/.devrun/AzureLLMInferenceTrace_conv.csv"; do
  taskset -c $i python3 benchmarks/simulate_speed.py --whole-process --against .devrun/base --rounds 7 --trace "$t" > $OUT/speed_$i.txt 2>&1 &
  i=$((i+1))
done
PYTHONPATH=$R taskset -c 0,1 python3 benchmarks/sweep_speed.py --backends j2 --trace $R/.devrun/synthetic_trace.jsonl --out $OUT/sweep_this.json > $OUT/sweep_this.txt 2>&1
(cd .devrun/base && PYTHONPATH=$R/.devrun/base taskset -c 0,1 python3 benchmarks/sweep_speed.py --backends j2 --trace $R/.devrun/synthetic_trace.jsonl --out $OUT/sweep_base.json > $OUT/sweep_base.txt 2>&1)
wait
for f in $OUT/speed_*.txt; do tail -8 $f; done
tail -4 $OUT/sweep_this.txt $OUT/sweep_base.txt
for who in this base; do
  d=$R; [ $who = base ] && d=$R/.devrun/base
  for k in 1 2 3 4 5; do ( cd $d && PYTHONPATH=$d taskset -c 6 /usr/bin/time -f "$who --help wall %e user %U sys %S" python3 -m simulator.cli.main --help >/dev/null ) 2>&1 | tail -1; done
done
