#!/bin/bash
R=$PWD
# Which compiled module crashes under the GPU host's Cython, one module compiled at a time, then
# the same run built with a carried Cython 3.3.1 wheel (session five; see docs/benchmarks.md).
python3 -m pip install -q --no-deps --no-index .devrun/simpy-*.whl 2>&1 | tail -1
python3 -c "import sys, Cython; print(sys.version, 'Cython', Cython.__version__, Cython.__file__)"
python3 setup.py -q build_ext --inplace -j 8 2>&1 | tail -2
RUN="python3 -X faulthandler -m simulator.cli.main run --trace $R/.devrun/synthetic_trace.jsonl --model gpt-oss-120b --gpu H200 --tp 8 --page-size 64 --max-abort-fraction 1 --json --no-progress"
$RUN > /tmp/o.json 2> /tmp/e.txt; echo "system cython: rc=$?"; tail -25 /tmp/e.txt
mkdir -p /tmp/sos; cp simulator/engine/*.so simulator/radix/cache.*.so simulator/swa_window.*.so simulator/kv_allocator.*.so simulator/request_kv.*.so simulator/cost/*.so policies/*.so /tmp/sos/ 2>/dev/null
ls /tmp/sos | wc -l
for f in /tmp/sos/*.so; do
  rm -f simulator/engine/*.so simulator/radix/cache.*.so simulator/swa_window.*.so simulator/kv_allocator.*.so simulator/request_kv.*.so simulator/cost/*.so policies/*.so
  b=$(basename $f); mod=${b%%.*}
  dest=$(cd /tmp/sos && python3 -c "
import sys
m='$mod'
for d in ['simulator/engine','simulator/radix','simulator','simulator/cost','policies']:
    import os
    if os.path.exists('$R/'+d+'/'+m+'.py'): print(d); break")
  cp $f $R/$dest/
  $RUN > /dev/null 2>&1; echo "only $dest/$mod compiled: rc=$?"
done
# new Cython
python3 -m pip install -q --no-deps --no-index --target /tmp/cy .devrun/cython-3.3.1-*.whl 2>&1 | tail -1
export PYTHONPATH=/tmp/cy
python3 -c "import Cython; print('now Cython', Cython.__version__)"
find . -name "*.c" -path "*simulator*" -newer setup.py -delete 2>/dev/null; find simulator policies -name "*.c" -delete; find simulator policies -name "*.so" -delete
python3 setup.py -q build_ext --inplace -j 8 2>&1 | tail -2
$RUN > /tmp/o2.json 2> /tmp/e2.txt; echo "cython 3.3.1: rc=$?"; tail -5 /tmp/e2.txt; head -c 200 /tmp/o2.json; echo
(cd .devrun/base && find simulator policies -name "*.c" -delete; find simulator policies -name "*.so" -delete; python3 setup.py -q build_ext --inplace -j 8 2>&1 | tail -2)
