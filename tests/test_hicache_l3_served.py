"""The L3 storage tier in served runs: prefetch issued at queue entry, the admission gate of
each termination policy, storage I/O in simulated time, L2 -> L3 backups, and the reported
figures (text, ``--json`` ``hicache`` object, frames).

The scenario: A (480 tokens, 30 pages of 16) is backed up to the host and then to L3; B and C
(900 tokens each) push it off the device and the host; D repeats A's 30 pages plus 10 of its
own at t = 3 s. Its prefetch asks for 624 tokens (39 pages: the 640-token prompt less the
last token, floored to pages) and finds A's 480 in L3. Storage: 1 ms per call, reads at
0.01 GB/s, writes instantaneous; a FULL page is 16 x 2 layers x 4096 B = 131,072 B, an SWA
page 16 x 6 x 4096 = 393,216 B; the SWA window (64) is 4 pages.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
import simpy
from hicache_workloads import serve_requests
from test_hicache_engine import POOLS, LinearCost  # the same pools and hand-checkable prices

from simulator.cost.hicache_transfer import HostTransferModel, PoolGeometry, TransferGeometry
from simulator.engine.config import SimConfig
from simulator.engine.hicache_steps import HiCacheSetup
from simulator.engine.metrics import Recorder
from simulator.engine.request import SimRequest
from simulator.engine.server import ServerModel, ServerPools
from simulator.errors import ConfigError
from simulator.gpus import get_gpu
from simulator.hicache_args import HiCacheArgs, resolve_hicache_args

TRACE = Path(__file__).resolve().parents[1] / "traces" / "data" / "mooncake_arxiv_head800.jsonl"
LAT = 1e-3
KV_PAGE, SWA_PAGE = 16 * 2 * 4096, 16 * 6 * 4096
READ_BPS = 0.01e9
# D's read: one FULL call of 30 pages, then the window's 4 SWA pages
READ_S = LAT + 30 * KV_PAGE / READ_BPS + LAT + 4 * SWA_PAGE / READ_BPS


def _setup(
    policy: str, base: float = 0.05, read_gbps: float = 0.01, lat_us: float = 1000.0, capacity_gb: float = 0.0
) -> HiCacheSetup:
    extra = {"prefetch_threshold": 64, "prefetch_timeout_base": base, "prefetch_timeout_per_ki_token": 0.1}
    resolved = resolve_hicache_args(
        HiCacheArgs(
            enable_hierarchical_cache=True,
            hicache_ratio=2.0,
            hicache_storage_backend="sim",
            hicache_storage_prefetch_policy=policy,
            hicache_storage_backend_extra_config=json.dumps(extra),
            storage_read_gbps=read_gbps,
            storage_write_gbps=0.0,
            storage_op_latency_us=lat_us,
            storage_capacity_gb=capacity_gb,
        )
    )
    transfer = HostTransferModel(get_gpu("H100"), "kernel", "page_first", POOLS.page_size)
    geometry = TransferGeometry(PoolGeometry(2, 4096), PoolGeometry(6, 4096))
    return HiCacheSetup(640, 2048, resolved, transfer, geometry)


def _req(rid: str, pages: list[int], prompt: int) -> SimRequest:
    return SimRequest(rid, np.asarray(pages, dtype=np.int64), prompt, 1)


def _scenario(setup: HiCacheSetup, pools: ServerPools = POOLS, late: bool = False, **cfg):
    p = pools.page_size
    a = list(range(1000, 1000 + 480 // p))
    requests = [
        (0.0, _req("a", a, 480)),
        (1.0, _req("b", list(range(5000, 5000 + 912 // p)), 900)),
        (2.0, _req("c", list(range(6000, 6000 + 912 // p)), 900)),
        (3.0, _req("d", a + list(range(7000, 7000 + 160 // p)), 640)),
    ]
    if late:  # a step start at 4.0 sees the storage work still in flight after D
        requests.append((4.0, _req("e", list(range(9000, 9000 + 64 // p)), 64)))
    env = simpy.Environment()
    rec = Recorder()
    server = ServerModel(
        env, SimConfig(check_invariants=True, **cfg), pools, LinearCost(), rec, hicache=setup
    )

    serve_requests(env, server, rec, requests)
    frames = rec.report_frames()
    d_prefetch = frames["hicache_prefetches"].set_index("rid").loc["d"]
    d_prefill = frames["prefill_batches"].iloc[-1]
    return frames, rec.report_summary()["hicache"], d_prefetch, d_prefill


def test_wait_complete_delays_admission_until_the_read_lands():
    frames, h, pf, prefill = _scenario(_setup("wait_complete"))
    # issued at 3.0; hit query (one call) done 3.001; drained there, the read starts at 3.001
    assert (pf.requested_tokens, pf.hit_tokens, pf.host_tokens) == (624, 480, 480)
    assert pf.outcome == "complete" and pf.loaded_tokens == 480
    assert prefill.t_start_s == pytest.approx(3.0 + LAT + READ_S, abs=1e-12)
    assert pf.end_s == prefill.t_start_s and pf.wait_start_s == 3.0
    reads = frames["hicache_transfers"].query("direction == 'l32h'")
    assert len(reads) == 1
    assert reads.iloc[0].done_s - reads.iloc[0].start_s == pytest.approx(READ_S, abs=1e-12)
    assert reads.iloc[0].bytes == 30 * KV_PAGE + 4 * SWA_PAGE == h["l32h_bytes"]
    # the prefetched pages are inserted host-only, loaded back, and counted as storage hits
    d = frames["requests"].set_index("rid").loc["d"]
    assert (d.cached_tokens, d.cached_tokens_device, d.cached_tokens_host, d.cached_tokens_storage) == (
        480,
        0,
        0,
        480,
    )
    assert h["cached_tokens_storage"] == 480 and h["prefetch_loaded_tokens"] == 480
    assert h["prefetch_outcomes"] == dict(complete=1, partial=0, timed_out=0, revoked=3, running=0)
    assert h["prefetch_wait_s_max"] == pytest.approx(LAT + READ_S, abs=1e-12)


def test_l2_to_l3_backup_follows_the_l2_ack_and_takes_its_calls():
    frames, h, _, _ = _scenario(_setup("wait_complete"))
    writes = frames["hicache_transfers"].query("direction == 'h2l3'")
    d2h = frames["hicache_transfers"].query("direction == 'd2h'").iloc[0]
    # A's write ack (at B's arrival step, t = 1.0) queues its L3 backups
    assert writes.submit_s.min() == d2h.ack_s == 1.0
    # infinite write bandwidth: each backup is its SWA call plus its FULL call, 1 ms each
    assert list(writes.done_s - writes.start_s) == pytest.approx([2 * LAT] * len(writes), abs=1e-12)
    assert writes.full_tokens.sum() == 480 and h["h2l3_ops"] == len(writes)
    assert h["storage_used_bytes_max"] == h["storage_used_bytes_end"] > 0
    usage = frames["hicache_storage_usage"]
    assert usage.storage_used_bytes.iloc[-1] == h["storage_used_bytes_end"]
    # the first backup's pages are stored from the first step start at or after its end
    assert usage[usage.storage_used_bytes > 0].time_s.iloc[0] >= 1.0 + 2 * LAT


def test_timeout_fires_and_admits_without_the_prefetch():
    _, h, pf, prefill = _scenario(_setup("timeout", base=0.05))
    # deadline: base + 39 pages x (16 / 1024 x 0.1) from the first blocked poll (3.0), before
    # the 0.55 s read lands; the poll strictly after it terminates the prefetch
    timeout = 0.05 + 39 * (16 / 1024 * 0.1)
    assert prefill.t_start_s == math.nextafter(3.0 + timeout, math.inf)
    assert pf.outcome == "timed_out" and pf.host_tokens == 480 and pf.completed_tokens == 0
    assert h["cached_tokens_storage"] == 0
    assert h["prefetch_outcomes"]["timed_out"] == 1
    assert h["prefetch_wait_s_max"] == pytest.approx(timeout, abs=1e-9)


def test_timeout_that_does_not_fire_waits_like_wait_complete():
    _, h, pf, prefill = _scenario(_setup("timeout", base=1.0))
    assert prefill.t_start_s == pytest.approx(3.0 + LAT + READ_S, abs=1e-12)
    assert pf.outcome == "complete" and h["cached_tokens_storage"] == 480


def test_best_effort_admits_at_the_first_poll():
    # the hit query (1 ms) has not returned at D's first poll: revoked, admitted at once
    _, h, pf, prefill = _scenario(_setup("best_effort"))
    assert prefill.t_start_s == 3.0
    assert pf.outcome == "revoked" and math.isnan(pf.hit_tokens)
    assert h["cached_tokens_storage"] == 0 and h["prefetch_wait_s_total"] == 0.0


def test_best_effort_with_instant_storage_stops_the_read_it_started():
    # zero latency, infinite bandwidth: the query returns and the host slots are allocated in
    # the step D arrives at, the read starts; the poll then terminates it with nothing landed
    _, h, pf, prefill = _scenario(_setup("best_effort", read_gbps=0.0, lat_us=0.0))
    assert prefill.t_start_s == 3.0
    assert (pf.outcome, pf.host_tokens, pf.completed_tokens) == ("partial", 480, 0)
    assert h["prefetch_outcomes"]["partial"] == 1


def test_a_small_store_evicts_and_the_prefetch_misses():
    # 1 MB holds 7 FULL pages: A's first pages are evicted by its later ones, D's chain misses
    # at its first page, the hit query returns 0 and the prefetch is revoked at the drain
    _, h, pf, prefill = _scenario(_setup("wait_complete", capacity_gb=0.001))
    assert (pf.outcome, pf.hit_tokens) == ("revoked", 0)
    assert prefill.t_start_s == pytest.approx(3.0 + LAT, abs=1e-12)  # waited for the query only
    assert h["storage_counts"]["pages_evicted"] > 0
    assert 0 < h["storage_used_bytes_max"] <= 1_000_000
    assert h["cached_tokens_storage"] == 0


def test_a_timeout_mid_read_stops_before_the_next_call():
    """Page size 1: D's 480-page read takes four calls (128, 128, 128, 96 pages). The deadline
    falls inside the second call: that call completes, the third never starts; the landed 128
    (acknowledged by then) are not a whole window, so nothing is inserted."""
    pools = dataclasses.replace(POOLS, page_size=1)
    base = 0.0876
    frames, h, pf, _ = _scenario(_setup("timeout", base=base), pools, late=True)
    prefill = frames["prefill_batches"].iloc[-2]  # D's (E's is the last)
    timeout = base + 639 * (1 / 1024 * 0.1)  # requested: the 640-token prompt less one
    call = LAT + 128 * 2 * 4096 / READ_BPS  # one 128-page call of 8 KiB pages
    read_start = 3.0 + 4 * LAT  # the hit query's 4 batch_exists calls (480 // 128 + 1)
    assert read_start + call < 3.0 + timeout < read_start + 2 * call
    assert prefill.t_start_s == math.nextafter(3.0 + timeout, math.inf)
    assert (pf.outcome, pf.host_tokens, pf.completed_tokens, pf.loaded_tokens) == ("timed_out", 480, 128, 0)
    read = frames["hicache_transfers"].query("direction == 'l32h'").iloc[0]
    assert read.done_s == pytest.approx(read_start + 2 * call, abs=1e-12) and read.full_tokens == 256
    assert h["l32h_bytes"] == 256 * 2 * 4096 and h["cached_tokens_storage"] == 0


@pytest.mark.parametrize("policy", ["wait_complete", "timeout"])
def test_fast_forward_matches_the_stepped_run(policy):
    runs = [_scenario(_setup(policy), fast_forward=ff) for ff in (False, True)]
    (fa, ha, _, _), (fb, hb, _, _) = runs
    assert ha == hb
    for name in ("requests", "hicache_transfers", "hicache_prefetches", "prefill_batches"):
        assert fa[name].shape == fb[name].shape, name


def _trace_cfg(write: str, prefetch: str, **more) -> SimConfig:
    hi = HiCacheArgs(
        enable_hierarchical_cache=True,
        hicache_ratio=2.0,
        hicache_write_policy=write,
        hicache_storage_backend="file",
        hicache_storage_prefetch_policy=prefetch,
        hicache_storage_backend_extra_config='{"prefetch_threshold": 64}',
    )
    return SimConfig(tp=2, page_size=64, max_total_tokens=100_000, hicache=hi, **more)


@pytest.mark.parametrize("prefetch", ["best_effort", "wait_complete", "timeout"])
@pytest.mark.parametrize("write", ["write_through", "write_through_selective", "write_back"])
def test_every_write_and_prefetch_policy_serves_the_trace(write, prefetch):
    from simulator.run import run_config
    from traces import load_trace

    res = run_config(load_trace(TRACE, limit=120), _trace_cfg(write, prefetch))
    s = res.summary
    assert s["failed"] == 0
    h = s["hicache"]
    assert (h["write_policy"], h["prefetch_policy"], h["storage_backend"]) == (write, prefetch, "file")
    assert h["h2l3_bytes"] > 0 and h["prefetch_issued"] > 0
    assert sum(h["prefetch_outcomes"].values()) == h["prefetch_issued"]
    assert {"hicache_storage_usage", "hicache_prefetches"} <= set(res.frames)
    assert "cached_tokens_storage" in res.frames["requests"].columns
    assert res.frames["requests"].cached_tokens_storage.sum() == h["cached_tokens_storage"]
    json.dumps(s)


def test_trace_run_with_l3_is_deterministic_and_fast_forward_exact():
    from dataclasses import replace

    from simulator.run import run_config
    from traces import load_trace

    trace = load_trace(TRACE, limit=150)
    cfg = _trace_cfg("write_through", "wait_complete", check_invariants=True)
    one, two = run_config(trace, cfg), run_config(trace, cfg)
    assert one.equals(two)
    stepped = run_config(trace, replace(cfg, fast_forward=False))
    assert stepped.summary["hicache"] == one.summary["hicache"]
    assert one.summary["hicache"]["cached_tokens_storage"] >= 0


def test_runs_without_l3_report_no_l3_figures():
    from simulator.run import run_config
    from traces import load_trace

    hi = HiCacheArgs(enable_hierarchical_cache=True, hicache_ratio=2.0)
    res = run_config(load_trace(TRACE, limit=30), SimConfig(tp=2, page_size=64, hicache=hi))
    assert "storage_backend" not in res.summary["hicache"]
    assert "cached_tokens_storage" not in res.frames["requests"].columns
    assert not {"hicache_prefetches", "hicache_storage_usage"} & set(res.frames)
    assert set(res.frames["hicache_transfers"].direction) <= {"d2h", "h2d"}


def test_unserved_l3_combinations_are_refused_in_one_line():
    """buffer_only is refused; the overlap loop is served (tests/test_hicache_l3_overlap.py)."""
    from dataclasses import replace

    from simulator.run import run_config
    from traces import load_trace

    cfg = _trace_cfg("write_through", "timeout")
    cfg = replace(cfg, hicache=replace(cfg.hicache, hicache_host_memory_mode="buffer_only"))
    with pytest.raises(ConfigError, match="buffer_only") as err:
        run_config(load_trace(TRACE, limit=5), cfg)
    assert "\n" not in str(err.value)


def test_cli_run_reports_l3_in_text_and_json():
    from typer.testing import CliRunner

    from simulator.cli.main import app

    args = [
        "run",
        "--trace",
        str(TRACE),
        "--limit",
        "40",
        "--tp",
        "2",
        "--page-size",
        "64",
        "--enable-hierarchical-cache",
        "--hicache-storage-backend",
        "file",
        "--hicache-storage-prefetch-policy",
        "timeout",
    ]
    runner = CliRunner()
    text = runner.invoke(app, args)
    assert text.exit_code == 0, text.output
    assert "L3 (file, prefetch timeout" in text.output and "Prefetches:" in text.output
    out = runner.invoke(app, [*args, "--json"])
    assert out.exit_code == 0, out.output
    h = json.loads(out.output)["hicache"]
    assert h["storage_backend"] == "file" and set(h["prefetch_outcomes"]) >= {"complete", "timed_out"}
    # file storage without speed flags is timed with SimHiCacheStorage's defaults
    assert (h["storage_read_gbps"], h["storage_write_gbps"], h["storage_op_latency_us"]) == (5.0, 5.0, 100.0)
    bench = [
        "bench-multiturn",
        "--num-clients",
        "4",
        "--num-rounds",
        "2",
        "--request-length",
        "512",
        "--output-length",
        "16",
        "--enable-hierarchical-cache",
        "--hicache-storage-backend",
        "sim",
        "--hicache-storage-prefetch-policy",
        "wait_complete",
        "--json",
    ]
    out = runner.invoke(app, bench)
    assert out.exit_code == 0, out.output
    h = json.loads(out.output)["hicache"]
    assert h["prefetch_policy"] == "wait_complete" and h["h2l3_bytes"] > 0
