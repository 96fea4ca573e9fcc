"""The same sweep gives the same results, bit for bit, in this process, on -j 2 local processes
and on a real Dask LocalCluster; --seeds gives the mean and the t interval of the runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simulator.cli.main import app
from simulator.engine.config import SimConfig
from simulator.planner import (
    DaskBackend,
    ProcessBackend,
    ResultStore,
    SerialBackend,
    SweepSpec,
    mean_interval,
    parse_axis,
    run_sweep,
)
from traces import load_trace

MOONCAKE = Path(__file__).resolve().parents[1] / "traces" / "data" / "mooncake_arxiv_head800.jsonl"
BASE = SimConfig(tp=8, page_size=64)
AXES = (parse_axis("max-total-tokens=120000,200000,400000"), parse_axis("swa-full-tokens-ratio=0.05,0.5"))
runner = CliRunner()


@pytest.fixture(scope="module")
def trace():
    return load_trace(MOONCAKE).head(30)


def _sweep(trace, backend, store=None, spec=None):
    records = []
    summary = run_sweep(
        trace, spec or SweepSpec(BASE, AXES), backend=backend, store=store, on_point=records.append
    )
    return records, summary


def _text(records):
    return [json.dumps(r) for r in records]  # NaN-safe, order-sensitive, exact floats


@pytest.fixture(scope="module")
def serial(trace, tmp_path_factory):
    store = ResultStore(tmp_path_factory.mktemp("serial") / "store")
    records, summary = _sweep(trace, SerialBackend(), store)
    return records, summary, store


def test_points_differ_and_are_in_grid_order(serial):
    records, summary, _ = serial
    assert [r["point"] for r in records] == list(range(6)) and summary["ran"] == 6
    assert len({r["metrics"]["cache_hit_rate"] for r in records}) > 1  # the grid matters here
    assert records[1]["flags"] == {"--max-total-tokens": 120000, "--swa-full-tokens-ratio": 0.5}
    assert records[1]["config"]["swa_full_tokens_ratio"] == 0.5 and records[1]["config"]["tp"] == 8


def test_processes_equal_serial(trace, serial, tmp_path):
    store = ResultStore(tmp_path / "store")
    records, summary = _sweep(trace, ProcessBackend(2), store)
    assert summary["backend"] == "processes" and summary["workers"] == 2
    assert _text(records) == _text(serial[0])
    cols = ["key", "point_key", "seed", "config", "summary", "error", "trace_hash", "profile_hash"]
    assert store.read()[cols].equals(serial[2].read()[cols])


def test_dask_local_cluster_equals_serial(trace, serial, tmp_path):
    pytest.importorskip("distributed")
    store = ResultStore(tmp_path / "store")
    records, summary = _sweep(trace, DaskBackend("local", 2), store)
    assert summary["backend"] == "dask" and summary["ran"] == 6
    assert _text(records) == _text(serial[0])
    assert store.read()["summary"].tolist() == serial[2].read()["summary"].tolist()


def test_cli_json_lines_and_resume(serial, tmp_path):
    args = [
        "sweep",
        "--trace",
        str(MOONCAKE),
        "--limit",
        "30",
        "--tp",
        "8",
        "--page-size",
        "64",
        "--grid",
        "max-total-tokens=120000,200000,400000",
        "--grid",
        "swa-full-tokens-ratio=0.05,0.5",
        "-j",
        "2",
        "--store",
        str(tmp_path / "s"),
        "--json",
    ]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    lines = [json.loads(x) for x in first.stdout.splitlines()]
    assert _text(lines[:-1]) == _text(serial[0])
    summary = lines[-1]["summary"]
    assert (summary["ran"], summary["reused"], summary["points"]) == (6, 0, 6)
    assert summary["provenance"]["sglang_version"] == "0.5.23"
    again = runner.invoke(app, args)
    assert again.exit_code == 0, again.output
    lines2 = [json.loads(x) for x in again.stdout.splitlines()]
    assert _text(lines2[:-1]) == _text(lines[:-1])
    assert (lines2[-1]["summary"]["ran"], lines2[-1]["summary"]["reused"]) == (0, 6)


def test_seeds_mean_and_interval(trace, tmp_path):
    """Poisson arrivals (--request-rate) are the seeded part: each seed is another run, and the
    point's interval is the t interval of its seeds' values in the store."""
    store = ResultStore(tmp_path / "store")
    base = SimConfig(tp=8, page_size=64, max_total_tokens=200_000, request_rate=4.0, seed=7)
    spec = SweepSpec(base, (parse_axis("swa-full-tokens-ratio=0.2,0.8"),), seeds=3)
    records, summary = _sweep(trace, SerialBackend(), store, spec)
    assert summary["runs"] == 6 and summary["seed_sensitive"] is True
    frame = store.read()
    for record in records:
        assert record["seeds"] == [7, 8, 9]
        rows = frame[frame["point_key"] == record["key"]].sort_values("seed")
        assert rows["seed"].tolist() == [7, 8, 9]
        values = rows["metrics.ttft.p90"].tolist()
        mean, lo, hi = mean_interval(values)
        assert lo < hi  # the seeds differ
        assert record["metrics"]["ttft"]["p90"] == pytest.approx(mean)
        assert record["interval"]["ttft.p90"] == pytest.approx([lo, hi])


def test_seeds_without_a_stochastic_part_say_so(trace):
    spec = SweepSpec(BASE, (parse_axis("max-total-tokens=200000"),), seeds=2)
    records, summary = _sweep(trace, SerialBackend(), spec=spec)
    assert summary["seed_sensitive"] is False and "no metric varied" in summary["notes"][-1]
    lo, hi = records[0]["interval"]["cache_hit_rate"]
    assert lo == hi == records[0]["metrics"]["cache_hit_rate"]


def test_refused_point_is_a_result_not_a_crash(trace, tmp_path):
    """A configuration SGLang refuses (an SWA pool too small for one request) is stored as the
    point's error, the other points still run, and a rerun does not run it again."""
    spec = SweepSpec(SimConfig(tp=8, page_size=64), (parse_axis("max-total-tokens=64,200000"),))
    store = ResultStore(tmp_path / "store")
    records, summary = _sweep(trace, SerialBackend(), store, spec)
    assert summary["errors"] == 1 and records[0]["metrics"] is None
    assert records[0]["error"].startswith("ConfigError: SWA pool")
    assert records[1]["error"] is None and records[1]["metrics"]["failed"] == 0
    again, summary2 = _sweep(trace, SerialBackend(), store, spec)
    assert (summary2["ran"], summary2["reused"]) == (0, 2) and _text(again) == _text(records)
    store.compact()  # the error row and the result row in one file: nulls read back as nulls
    third, summary3 = _sweep(trace, SerialBackend(), ResultStore(store.path), spec)
    assert (summary3["ran"], summary3["reused"]) == (0, 2) and _text(third) == _text(records)


def test_cli_dask_address_of_a_running_cluster(serial):
    """--dask ADDRESS: the scheduler of a cluster started elsewhere (here, by the test)."""
    distributed = pytest.importorskip("distributed")
    import logging

    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, dashboard_address=None, silence_logs=logging.ERROR
    ) as cluster:
        args = [
            "sweep", "--trace", str(MOONCAKE), "--limit", "30", "--tp", "8", "--page-size", "64",
            "--grid", "max-total-tokens=120000", "--grid", "swa-full-tokens-ratio=0.05,0.5",
            "--dask", cluster.scheduler_address, "--json",
        ]  # fmt: skip
        res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    lines = [json.loads(x) for x in res.stdout.splitlines()]
    assert lines[-1]["summary"]["backend"] == "dask" and lines[-1]["summary"]["workers"] == 1
    assert _text(lines[:-1]) == _text(serial[0][:2])


def test_a_persistent_pool_serves_several_sweeps_with_the_same_results(trace, serial):
    """The planner's backend: one pool for all its batches (each a sweep), results unchanged."""
    records, _, _ = serial
    half = (AXES[0], parse_axis("swa-full-tokens-ratio=0.05"))
    with ProcessBackend(2, persistent=True) as backend:
        first, _ = _sweep(trace, backend)
        pool = backend._pool
        second, _ = _sweep(trace, backend, spec=SweepSpec(BASE, half))
        assert pool is not None and backend._pool is pool  # not started again
    assert backend._pool is None  # stopped on leaving
    assert _text(first) == _text(records)
    want = [r for r in records if r["flags"]["--swa-full-tokens-ratio"] == 0.05]
    strip = [{k: v for k, v in r.items() if k not in ("point", "key", "flags")} for r in want]
    assert [{k: v for k, v in r.items() if k not in ("point", "key", "flags")} for r in second] == strip
