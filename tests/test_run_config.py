"""``run_config``: the library's entry point returns plain data, equal to what ``simulate`` and the
``Recorder`` give, that pickles and comes back the same from a worker process."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import pickle
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from policies.swa_eviction import SWA_EVICTION, make_swa_eviction
from simulator import RunResult, SimConfig, run_config
from simulator.engine.clients import offered_request_rate
from simulator.engine.metrics import Recorder
from simulator.engine.simulate import simulate
from simulator.errors import ConfigError
from traces import load_trace

REPO = Path(__file__).resolve().parents[1]
MOONCAKE = REPO / "traces" / "data" / "mooncake_arxiv_head800.jsonl"
# a small full pool, so the run evicts and the counters are not all zero
CFG = SimConfig(tp=8, page_size=64, max_total_tokens=120_000)


@pytest.fixture(scope="module")
def trace():
    return load_trace(MOONCAKE).head(80)


@pytest.fixture(scope="module")
def result(trace):
    return run_config(trace, CFG)


def test_result_is_what_simulate_and_the_recorder_give(trace, result):
    rec = Recorder.from_config(CFG, request_rate=offered_request_rate(trace, CFG))
    simulate(trace, CFG, rec)
    assert result.config == CFG
    assert result.summary == rec.report_summary("open")
    assert result.counters == rec.counters and result.counters["evictions"]["full_evicted"] > 0
    assert result.frames.keys() == rec.frames().keys()
    for name, frame in rec.report_frames().items():
        pd.testing.assert_frame_equal(result.frames[name], frame)
    assert result.pools == rec.server_config and result.pools["page_size"] == 64
    assert result.pool_sizes == CFG.pool_sizes().to_dict()
    assert result.pool_sizes["full_tokens"] == result.pools["full_tokens"]


def _plain(obj) -> bool:
    """Only JSON-like values: no simulator, SimPy or server object hides in a result."""
    if isinstance(obj, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in obj.items())
    if isinstance(obj, list | tuple):
        return all(_plain(v) for v in obj)
    return obj is None or isinstance(obj, str | int | float | bool | np.integer | np.floating)


def test_result_is_plain_data_that_pickles(result):
    for part in (result.summary, result.counters, result.pools, result.pool_sizes):
        assert _plain(part)
    for frame in result.frames.values():
        assert isinstance(frame, pd.DataFrame)
        assert all(_plain(v) for col in frame.columns for v in frame[col].head(3).tolist())
    back = pickle.loads(pickle.dumps(result))
    assert isinstance(back, RunResult) and back.equals(result)


def test_equals_sees_one_changed_number(result):
    changed = dict(result.summary, requests=result.summary["requests"] + 1)
    assert not dataclasses.replace(result, summary=changed).equals(result)
    frames = dict(result.frames, requests=result.frames["requests"].iloc[1:])
    assert not dataclasses.replace(result, frames=frames).equals(result)


def test_run_config_in_a_worker_process_equals_the_in_process_run(trace, result):
    # spawn: the worker imports everything afresh, as a sweep's workers on any platform do
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        remote = pool.submit(run_config, trace, CFG).result()
    assert isinstance(remote, RunResult)
    assert remote.equals(result)


def test_write_outputs_writes_what_the_recorder_writes(trace, result, tmp_path):
    rec = Recorder.from_config(CFG, request_rate=offered_request_rate(trace, CFG))
    simulate(trace, CFG, rec)
    theirs = rec.write_outputs(tmp_path / "recorder", "open")
    ours = result.write_outputs(tmp_path / "result")
    assert [p.name for p in ours] == [p.name for p in theirs]
    for a, b in zip(ours, theirs, strict=True):
        if a.suffix == ".parquet":
            pd.testing.assert_frame_equal(pd.read_parquet(a), pd.read_parquet(b))
        else:
            assert a.read_bytes() == b.read_bytes(), a.name
    assert json.loads((tmp_path / "result" / "summary.json").read_text())["requests"] == 80


def test_simconfig_is_hashable_so_sweeps_can_key_by_it():
    runs = {SimConfig(): "a", SimConfig(tp=8): "b"}
    assert runs[SimConfig()] == "a" and runs[SimConfig(tp=8)] == "b"
    assert hash(SimConfig(page_size=64)) == hash(SimConfig(page_size=64))


def test_importing_simulator_is_cheap_and_torch_free():
    code = (
        "import sys, simulator; "
        "assert not {'torch', 'pandas', 'simpy', 'simulator.run'} & set(sys.modules), sys.modules.keys(); "
        "from simulator import run_config, RunResult, SimConfig; "
        "assert 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


# --- SWA-eviction policy parameters: one factory ---------------------------------------------------


@pytest.mark.parametrize("name", ["iteration", "interval"])
def test_make_swa_eviction_passes_the_interval_to_the_policies_that_take_it(name):
    assert make_swa_eviction(name, interval=7).interval == 7
    assert make_swa_eviction(name).interval == 128


def test_make_swa_eviction_builds_every_registered_policy():
    for name in SWA_EVICTION.names():
        policy = make_swa_eviction(name, interval=64)
        assert policy.name == name


def test_make_swa_eviction_unknown_name_lists_the_registry():
    with pytest.raises(ConfigError, match="choose one of: interval, iteration, none, window"):
        make_swa_eviction("sometimes", interval=64)


def test_hicache_config_is_served_and_reported(trace):
    """A sweep point with --hicache-ratio runs with HiCache (never silently device-only), and its
    result, HiCache figures included, stays plain data that crosses a process boundary."""
    from simulator.hicache_args import HiCacheArgs

    cfg = dataclasses.replace(CFG, hicache=HiCacheArgs(hicache_ratio=2.0))
    res = run_config(trace, cfg)
    assert res.summary["hicache"]["host_full_capacity"] > 0 and res.summary["hicache"]["backups"] > 0
    assert _plain(res.summary) and "hicache_transfers" in res.frames
    assert pickle.loads(pickle.dumps(res)).equals(res)
