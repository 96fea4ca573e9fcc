"""HiCache in served runs: load-back at admission, transfers timed in simulated time with acks at
step starts, decode jumps that stop before an ack, and the reported figures."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import simpy
from hicache_workloads import serve_requests

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
POOLS = ServerPools(
    page_size=16,
    full_tokens=1024,
    swa_tokens=2048,
    window=64,
    max_running_requests=8,
    chunked_prefill_size=4096,
)


class LinearCost:
    """Prefill and decode prices simple enough to compute by hand."""

    def prefill_time(self, extend, prefix):
        return 1e-3 + 2e-6 * float(np.sum(extend))

    def decode_time(self, bs, full_ctx, swa_ctx):
        return 2e-3 + 1e-7 * full_ctx + 1e-6 * swa_ctx

    def decode_terms(self, bs):
        return (2e-3, 1e-7, 0.0, 1e-6, 0.0, 0.0, 0.0)


def _setup(policy: str = "write_through", bytes_per_layer: int = 4096) -> HiCacheSetup:
    resolved = resolve_hicache_args(
        HiCacheArgs(enable_hierarchical_cache=True, hicache_ratio=2.0, hicache_write_policy=policy)
    )
    transfer = HostTransferModel(get_gpu("H100"), "kernel", "page_first", POOLS.page_size)
    geometry = TransferGeometry(PoolGeometry(2, bytes_per_layer), PoolGeometry(6, bytes_per_layer))
    return HiCacheSetup(2048, 2048, resolved, transfer, geometry)


def _serve(setup: HiCacheSetup, requests: list[tuple[float, SimRequest]], **cfg):
    env = simpy.Environment()
    rec = Recorder()
    server = ServerModel(env, SimConfig(**cfg), POOLS, LinearCost(), rec, hicache=setup)
    starts: list[float] = []
    server.on_pass = lambda: starts.append(env.now)

    serve_requests(env, server, rec, requests)
    return server, rec, starts


def _req(rid: str, pages: list[int], prompt: int, out: int = 1) -> SimRequest:
    return SimRequest(rid, np.asarray(pages, dtype=np.int64), prompt, out)


def test_demoted_prefix_is_loaded_back_with_its_time_and_bytes():
    """A (480 tokens) is backed up, then demoted to the host by B; C repeats A's prefix: a host
    hit of exactly A's 480 tokens, loaded back (480 FULL + one 64-token SWA window), priced as
    the prefill's compute plus the exposed part of the layer-wise load."""
    setup = _setup()
    a = _req("a", list(range(1000, 1030)), 480)
    b = _req("b", list(range(5000, 5057)), 900)
    c = _req("c", list(range(1000, 1030)) + list(range(7000, 7010)), 640)
    server, rec, _ = _serve(setup, [(0.0, a), (1.0, b), (2.0, c)], check_invariants=True)
    counts = server.hicache.cache.counts
    assert counts["demoted_full_tokens"] >= 480 and counts["load_back_ok"] == 1
    frames = rec.report_frames()
    reqs = frames["requests"].set_index("rid")
    assert reqs.loc["c", "cached_tokens"] == 480
    assert (reqs.loc["c", "cached_tokens_device"], reqs.loc["c", "cached_tokens_host"]) == (0, 480)
    loads = frames["hicache_transfers"].query("direction == 'h2d'")
    assert len(loads) == 1
    load = loads.iloc[0]
    assert (load.full_tokens, load.swa_tokens) == (480, 64)
    assert load.bytes == 480 * 2 * 4096 + 64 * 6 * 4096
    # the added time: compute of the 160-token extend plus the exposed part of the load
    compute = 1e-3 + 2e-6 * 160
    load_s = setup.transfer.load_time(setup.geometry, 480, 64)
    assert load.done_s - load.start_s == pytest.approx(load_s, abs=1e-15)
    exposed = setup.transfer.exposed_load_time(load_s, compute, 8)
    batch = frames["prefill_batches"].iloc[-1]
    assert batch.t_end_s - batch.t_start_s == pytest.approx(compute + exposed, abs=1e-12)
    assert exposed > load_s / 8 - 1e-15  # at least the first layer's load is never hidden
    summary = rec.report_summary()["hicache"]
    assert summary["cached_tokens_host"] == 480 and summary["load_backs"] == 1
    assert summary["h2d_bytes"] == load.bytes


def test_write_through_ack_arrives_at_the_first_step_after_the_copy():
    """A slow D->H copy (A's backup, ~80 ms) is acknowledged at the start of the first scheduler
    step at or after its completion, many decode steps of D later, not at the next step."""
    setup = _setup(bytes_per_layer=4096 * 1000)
    a = _req("a", list(range(1000, 1030)), 480)
    d = _req("d", list(range(3000, 3010)), 150, out=200)
    server, rec, starts = _serve(setup, [(0.0, d), (0.001, a)], fast_forward=False)
    writes = rec.report_frames()["hicache_transfers"].query("direction == 'd2h'")
    first = writes.iloc[0]
    later = [s for s in starts if s >= first.done_s]
    assert first.ack_s == later[0]
    between = [s for s in starts if first.submit_s < s < first.done_s]
    assert len(between) > 10  # decode steps ran while the copy was in flight
    assert server.hicache.cache.counts["write_acks"] >= 1


def test_fast_forward_stops_before_an_ack_and_matches_the_stepped_run():
    """A decode jump must not step over a pending ack: fast-forwarded and stepped runs agree."""
    setup = _setup(bytes_per_layer=4096 * 1000)
    runs = []
    for ff in (False, True):
        a = _req("a", list(range(1000, 1030)), 480)
        d = _req("d", list(range(3000, 3010)), 150, out=300)
        e = _req("e", list(range(1000, 1030)) + list(range(8000, 8005)), 560, out=50)
        _, rec, _ = _serve(setup, [(0.0, d), (0.001, a), (0.05, e)], fast_forward=ff)
        runs.append(rec)
    fa, fb = runs[0].report_frames(), runs[1].report_frames()
    for name in ("requests", "hicache_transfers", "hicache_host_usage", "prefill_batches"):
        pd_a, pd_b = fa[name], fb[name]
        assert pd_a.shape == pd_b.shape, name
        for col in pd_a.columns:
            if pd_a[col].dtype.kind in "fi":
                np.testing.assert_allclose(pd_a[col].to_numpy(float), pd_b[col].to_numpy(float), atol=1e-9)
    assert len(fa["decode_steps"]) == len(fb["decode_steps"])
    assert runs[0].report_summary()["hicache"] == runs[1].report_summary()["hicache"]


def _run_trace(**hicache):
    from simulator.run import run_config
    from traces import load_trace

    cfg = SimConfig(
        tp=2,
        page_size=64,
        max_total_tokens=200_000,
        hicache=HiCacheArgs(enable_hierarchical_cache=True, hicache_ratio=2.0, **hicache),
    )
    return run_config(load_trace(TRACE, limit=300), cfg)


@pytest.mark.parametrize("policy", ["write_through", "write_through_selective", "write_back"])
def test_every_write_policy_serves_the_bundled_trace(policy):
    res = _run_trace(hicache_write_policy=policy)
    s = res.summary
    assert s["failed"] == 0
    h = s["hicache"]
    assert h["write_policy"] == policy and h["load_backs"] > 0 and h["cached_tokens_host"] > 0
    assert h["h2d_bytes"] > 0 and h["d2h_bytes"] > 0
    assert {"hicache_transfers", "hicache_host_usage"} <= set(res.frames)
    assert "cached_tokens_host" in res.frames["requests"].columns
    json.dumps(s)  # JSON-ready


def test_runs_are_deterministic_and_fast_forward_exact_on_the_trace():
    from dataclasses import replace

    from simulator.run import run_config
    from traces import load_trace

    trace = load_trace(TRACE, limit=200)
    cfg = SimConfig(
        tp=2,
        page_size=64,
        max_total_tokens=200_000,
        hicache=HiCacheArgs(enable_hierarchical_cache=True, hicache_ratio=2.0),
    )
    one, two = run_config(trace, cfg), run_config(trace, cfg)
    assert one.equals(two)
    stepped = run_config(trace, replace(cfg, fast_forward=False))
    assert stepped.summary["hicache"] == one.summary["hicache"]
    for name in ("requests", "hicache_transfers", "prefill_batches", "decode_steps"):
        a, b = one.frames[name], stepped.frames[name]
        assert a.shape == b.shape, name
        for col in a.columns:
            if a[col].dtype.kind in "fi":
                np.testing.assert_allclose(a[col].to_numpy(float), b[col].to_numpy(float), atol=1e-9)


def test_invariants_hold_during_a_served_run():
    from simulator.run import run_config
    from traces import load_trace

    cfg = SimConfig(
        tp=2,
        page_size=64,
        max_total_tokens=150_000,
        check_invariants=True,
        hicache=HiCacheArgs(
            enable_hierarchical_cache=True, hicache_ratio=1.0, hicache_write_policy="write_back"
        ),
    )
    res = run_config(load_trace(TRACE, limit=150), cfg)
    assert res.summary["failed"] == 0 and res.summary["hicache"]["load_backs"] > 0


@pytest.mark.parametrize(
    "change,match",
    [
        (dict(tombstone="legacy"), "--tombstone legacy.*SGLang does not support"),
    ],
)
def test_unserved_combinations_are_refused_in_one_line(change, match):
    from simulator.run import run_config
    from traces import load_trace

    cfg = SimConfig(tp=2, page_size=64, hicache=HiCacheArgs(enable_hierarchical_cache=True), **change)
    with pytest.raises(ConfigError, match=match) as err:
        run_config(load_trace(TRACE, limit=5), cfg)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("swa", ["none", "window", "iteration", "interval"])
def test_every_swa_eviction_policy_serves_with_hicache(swa):
    from simulator.run import run_config
    from traces import load_trace

    cfg = SimConfig(
        tp=2,
        page_size=64,
        max_total_tokens=200_000,
        swa_eviction=swa,
        hicache=HiCacheArgs(enable_hierarchical_cache=True, hicache_ratio=2.0),
    )
    res = run_config(load_trace(TRACE, limit=120), cfg)
    assert res.summary["failed"] == 0 and res.summary["hicache"]["backups"] > 0


def test_runs_without_hicache_report_no_hicache_keys():
    from simulator.run import run_config
    from traces import load_trace

    res = run_config(load_trace(TRACE, limit=20), SimConfig(tp=2, page_size=64))
    assert "hicache" not in res.summary
    assert not any(name.startswith("hicache") for name in res.frames)
    assert "cached_tokens_host" not in res.frames["requests"].columns


def test_threshold_binds_only_without_swa_to_load():
    """``load_back`` skips FULL loads under 10 tokens only when no SWA must come back: an 8-token
    host-only tail (X, demoted by B's shortfall of exactly 8 tokens) is loaded with its SWA."""
    pools = ServerPools(
        page_size=8,
        full_tokens=1024,
        swa_tokens=2048,
        window=64,
        max_running_requests=8,
        chunked_prefill_size=4096,
    )
    base = _setup()
    transfer = HostTransferModel(get_gpu("H100"), "kernel", "page_first", 8)
    setup = HiCacheSetup(2048, 2048, base.resolved, transfer, base.geometry)
    p_pages = list(range(1000, 1060))
    a = _req("a", [*p_pages, 1], 488)  # P (480 tokens) + X (8)
    e = _req("e", [*p_pages, 2], 488)  # P + Y: splits X off A's last window
    b = _req("b", list(range(5000, 5066)), 528)  # a shortfall of exactly one page: X, the LRU leaf
    f = _req("f", [*p_pages, 1, 3, 4], 504)  # P + X + more: device 480, host 8
    env = simpy.Environment()
    server = ServerModel(
        env, SimConfig(check_invariants=True), pools, LinearCost(), Recorder(), hicache=setup
    )
    demoted_before_f: list[int] = []

    def client(t: float, req: SimRequest):
        yield env.timeout(t)
        if req is f:
            demoted_before_f.append(server.hicache.cache.counts["demoted_full_tokens"])
        yield server.submit(req)

    for t, req in [(0.0, a), (1.0, e), (2.0, b), (3.0, f)]:
        env.process(client(t, req))
    env.run()
    tree = server.hicache.cache.tree
    assert tree.load_back_threshold == 10 and demoted_before_f == [8]
    assert server.hicache.tiers[f] == (480, 8)  # a host hit of 8 < 10 tokens, loaded anyway
    loads = [r for r in server.hicache.records if r.direction == "h2d"]
    assert [(r.full_tokens, r.swa_tokens) for r in loads] == [(8, 8)]
    assert f.cached_tokens == 488
