"""A sweep killed with SIGKILL mid-way and started again finishes with every point exactly once:
nothing finished is lost or run again, and the results equal those of an uninterrupted sweep."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simulator.planner import ResultStore

MOONCAKE = Path(__file__).resolve().parents[1] / "traces" / "data" / "mooncake_arxiv_head800.jsonl"
POINTS = 24


def _args(store: Path, jobs: int) -> list[str]:
    return [
        sys.executable, "-m", "simulator.cli.main", "sweep", "--trace", str(MOONCAKE), "--limit", "25",
        "--tp", "8", "--page-size", "64", "--grid", "max-total-tokens=100000:400000:100000",
        "--grid", "swa-full-tokens-ratio=0.05,0.1,0.2,0.3,0.5,0.8", "-j", str(jobs),
        "--store", str(store), "--json", "--no-progress",
    ]  # fmt: skip


def _kill_midway(store: Path, jobs: int) -> int:
    """Start the sweep, SIGKILL its process group once a few runs are stored; the count then."""
    proc = subprocess.Popen(
        _args(store, jobs), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    runs = store / "runs"
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if runs.is_dir() and len(list(runs.glob("*.parquet"))) >= 3:
                break
            time.sleep(0.02)
        assert proc.poll() is None, f"the sweep ended before it was killed: {proc.stderr.read()!r}"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    return len(list(runs.glob("*.parquet")))


def _run(store: Path, jobs: int) -> list[dict]:
    res = subprocess.run(_args(store, jobs), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return [json.loads(line) for line in res.stdout.splitlines()]


@pytest.mark.parametrize("jobs", [1, 2])
def test_sigkill_then_resume_runs_each_point_once(tmp_path, jobs):
    store = tmp_path / "store"
    done = _kill_midway(store, jobs)
    assert 3 <= done < POINTS
    lines = _run(store, jobs)
    summary = lines[-1]["summary"]
    assert summary["reused"] == done and summary["ran"] == POINTS - done  # nothing run twice
    points = lines[:-1]
    assert [p["point"] for p in points] == list(range(POINTS))
    frame = ResultStore(store).read()
    assert len(frame) == POINTS and frame["key"].is_unique
    assert sorted(frame["point_key"]) == sorted(p["key"] for p in points)
    # a write cut short can leave only a temporary file, which no reader takes for a run
    assert all(p.suffix in (".parquet", ".tmp") for p in (store / "runs").iterdir())
    if jobs == 1:
        return
    # the same results as a sweep never interrupted
    fresh = _run(tmp_path / "fresh", 1)
    assert [json.dumps(p) for p in fresh[:-1]] == [json.dumps(p) for p in points]
