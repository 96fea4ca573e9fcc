"""The example report committed under ``reports/mooncake-arxiv-200/`` and how to rebuild it.

The first 200 requests of Mooncake's arXiv trace (``traces/data/mooncake_arxiv_head800.jsonl``,
the first 800 lines of ``../shared/traces/mooncake/arxiv_trace_head1000.jsonl``; see
``traces/data/README.md``), gpt-oss-120b on 8×H200 at page size 64, swept over
``--mem-fraction-static`` × ``--swa-full-tokens-ratio`` in the range where the KV pools are
about the trace's working set, so both axes matter. ``reports/make_example.sh`` (or
``python -m simulator.reports.example [OUT]``, from the repository root) rebuilds it;
``tests/test_report.py`` rebuilds it into a temporary directory and compares its numbers.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
NAME = "mooncake-arxiv-200"
TRACE = ROOT / "traces" / "data" / "mooncake_arxiv_head800.jsonl"
LIMIT = 200
BASE = {"model": "gpt-oss-120b", "gpu": "H200", "tp": 8, "page_size": 64}
GRID = ("mem-fraction-static=0.06:0.068:0.002", "swa-full-tokens-ratio=0.1:0.9:0.2")


def sweep_example(store: Path, jobs: int = 1) -> dict[str, Any]:
    """Run the example's sweep into ``store`` (resumes if it is there already)."""
    from simulator.engine.config import SimConfig
    from simulator.planner import ResultStore, SweepSpec, make_backend, parse_axis, run_sweep
    from traces import load_trace

    # Relative to the working directory, so that run from the repository root the report
    # names the trace by its repository path.
    trace = load_trace(os.path.relpath(TRACE)).head(LIMIT)
    spec = SweepSpec(SimConfig(**BASE), tuple(parse_axis(g) for g in GRID))
    return run_sweep(trace, spec, backend=make_backend(jobs, None), store=ResultStore(store))


def make_example(out: Path, jobs: int = 1) -> dict[str, Any]:
    """Sweep and write the example report to ``out``; the sweep's store is a sibling of ``out``
    removed afterwards. Returns the report's data (``figures.json``)."""
    from simulator.reports.build import build_report

    out = Path(out)
    store = Path(os.path.relpath(out.parent / f".{out.name}.store"))
    shutil.rmtree(store, ignore_errors=True)
    try:
        sweep_example(store, jobs)
        return build_report(store, out)
    finally:
        shutil.rmtree(store, ignore_errors=True)


if __name__ == "__main__":  # pragma: no cover
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "reports" / NAME
    make_example(target, jobs=int(os.environ.get("JOBS", "1")))
    print(f"wrote {target}")
