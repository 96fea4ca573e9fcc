"""The ``kvplan`` process skips the interpreter's last full collection (issue 14): its CLI module
parks every object in the permanent generation at exit, so the final walk over the run's objects
is empty. Checked from an exit handler registered before the CLI loads (handlers run last-in,
first-out, so it runs after the CLI's own), and end to end on a real run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PROBE = """
import atexit, gc
atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count() > 0, flush=True))
{imports}
print("frozen before exit:", gc.get_freeze_count() > 0, flush=True)
"""


def _probe(imports: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(imports=imports)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.splitlines()


def test_the_cli_process_parks_its_objects_only_at_exit():
    assert _probe("import simulator.cli.main") == ["frozen before exit: False", "frozen at exit: True"]


def test_the_library_alone_leaves_the_collector_as_it_is():
    # a notebook or a script that imports the simulator keeps its own collector state at exit
    assert _probe("import simulator.engine.simulate") == [
        "frozen before exit: False",
        "frozen at exit: False",
    ]


def test_a_cli_run_still_prints_its_summary_and_exits_cleanly():
    trace = REPO / "traces" / "data" / "mooncake_arxiv_head800.jsonl"
    code = "import sys; from simulator.cli.main import app; sys.argv[0] = 'kvplan'; app()"
    proc = subprocess.run(
        [sys.executable, "-c", code, "run", "--trace", str(trace), "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert (summary["requests"], summary["aborted"], summary["unfinished"]) == (800, 0, 0)
