"""The ``kvplan`` process starts no OpenBLAS worker threads (issue 14): each would spin for about
0.1 s of CPU after numpy's import, and a simulation makes no threaded BLAS call. The library,
imported on its own, leaves the environment alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PROBE = """
import os, sys
{imports}
import numpy
print(os.environ.get("OPENBLAS_NUM_THREADS"), len(os.listdir("/proc/self/task")))
"""


def _probe(imports: str, **env: str) -> tuple[str, int]:
    clean = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    clean.update(env)
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(imports=imports)],
        cwd=REPO,
        env=clean,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return out[0], int(out[1])


def test_cli_entry_point_turns_blas_threads_off():
    setting, threads = _probe("import simulator.cli.main")
    assert setting == "1"
    if os.path.isdir("/proc/self/task"):
        assert threads == 1  # the interpreter's own thread only


def test_cli_keeps_an_explicit_setting():
    setting, _ = _probe("import simulator.cli.main", OPENBLAS_NUM_THREADS="3")
    assert setting == "3"


def test_library_import_leaves_the_environment_alone():
    setting, _ = _probe("import simulator.engine.simulate")
    assert setting == "None"
