"""HiCache under the overlap loop (``Scheduler.event_loop_overlap``): acks at each pass's start,
copies fenced behind the forward in flight, backups flushed after a batch's results are
processed, and an overlap decode jump that ends before the next ack and at the first release,
checked against stepping pass by pass (as tests/test_overlap_jump.py checks the loop without
HiCache and tests/test_hicache_engine.py the plain loop with it)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import simpy
from hicache_workloads import serve_requests
from test_hicache_engine import POOLS, TRACE, LinearCost, _setup

from simulator.engine.config import SimConfig
from simulator.engine.hicache_steps import HiCacheSetup
from simulator.engine.metrics import Recorder
from simulator.engine.request import SimRequest
from simulator.engine.server import ServerModel
from simulator.hicache_args import HiCacheArgs

OVERLAP = dict(disable_overlap_schedule=False)


class _Jumps:
    """Counts the overlap jumps a run takes."""

    def __init__(self, monkeypatch) -> None:
        self.n = 0
        apply = ServerModel._apply_overlap_jump

        def counting(server, *args):
            self.n += 1
            return apply(server, *args)

        monkeypatch.setattr(ServerModel, "_apply_overlap_jump", counting)


def _req(rid: str, pages: list[int], prompt: int, out: int = 1) -> SimRequest:
    """A request whose page keys cover its prompt and output (fresh keys past the prompt's, so
    its release inserts all its KV)."""
    p = POOLS.page_size
    fresh = 10_000_000 + 100_000 * sum(map(ord, rid))
    extra = max(0, -(-(prompt + out) // p) - len(pages))
    return SimRequest(rid, np.asarray(pages + list(range(fresh, fresh + extra)), dtype=np.int64), prompt, out)


def _serve(setup: HiCacheSetup, requests: list[tuple[float, SimRequest]], **cfg):
    """test_hicache_engine's ``_serve`` without a pass hook (a hook turns the overlap jump off)."""
    env = simpy.Environment()
    rec = Recorder()
    server = ServerModel(env, SimConfig(**{**OVERLAP, **cfg}), POOLS, LinearCost(), rec, hicache=setup)

    serve_requests(env, server, rec, requests)
    return server, rec


def _assert_same_frames(fa: dict, fb: dict, names) -> None:
    for name in names:
        a, b = fa[name], fb[name]
        assert list(a.columns) == list(b.columns) and a.shape == b.shape, name
        for col in a.columns:
            if a[col].dtype.kind in "fi":
                np.testing.assert_allclose(
                    a[col].to_numpy(float), b[col].to_numpy(float), atol=1e-9, err_msg=f"{name}.{col}"
                )
            else:
                assert a[col].tolist() == b[col].tolist(), f"{name}.{col}"


FRAMES = ("requests", "hicache_transfers", "hicache_host_usage", "prefill_batches", "decode_steps")


def _scenario(setup: HiCacheSetup, ff: bool):
    """D decodes 300 tokens while A (480 tokens, backed up by a slow ~80 ms copy) finishes
    early; E, arriving mid-copy, repeats A's prefix; F finishes in D's decode, its release
    queuing a backup in the middle of what a jump would take."""
    d = _req("d", list(range(3000, 3010)), 150, out=300)
    a = _req("a", list(range(1000, 1030)), 480)
    e = _req("e", list(range(1000, 1030)) + list(range(8000, 8005)), 560, out=50)
    f = _req("f", list(range(9000, 9012)), 190, out=40)
    # stepped, the invariants are checked after every pass (a check turns the jump off)
    return _serve(
        setup, [(0.0, d), (0.001, a), (0.05, e), (0.3, f)], fast_forward=ff, check_invariants=not ff
    )


def test_overlap_jump_stops_before_acks_and_releases_and_matches_stepping(monkeypatch):
    """Fast-forwarded and stepped overlap runs agree on every frame and HiCache figure, with
    jumps taken, with copies acknowledged between them and a backup queued by a release."""
    setup = _setup(bytes_per_layer=4096 * 1000)
    stepped = _scenario(setup, ff=False)
    jumps = _Jumps(monkeypatch)
    fast = _scenario(setup, ff=True)
    assert jumps.n >= 3
    (_, rec_a), (srv_b, rec_b) = stepped, fast
    fa, fb = rec_a.report_frames(), rec_b.report_frames()
    _assert_same_frames(fa, fb, FRAMES)
    assert rec_a.report_summary()["hicache"] == rec_b.report_summary()["hicache"]
    writes = fb["hicache_transfers"].query("direction == 'd2h'")
    assert len(writes) >= 3  # A's, E's, F's backups (and the prefills' write-through)
    first = writes.iloc[0]
    steps = fb["decode_steps"].time_s.to_numpy()
    assert ((steps > first.submit_s) & (steps < first.done_s)).sum() > 10  # decodes under the copy
    # each ack at the first pass start (a batch's end, or an arrival) at or after its completion
    passes = np.sort(np.r_[steps, fb["prefill_batches"].t_end_s.to_numpy(), [0.0, 0.001, 0.05, 0.3]])
    acked = [r for r in srv_b.hicache.records if r.ack_s == r.ack_s]
    assert len(acked) >= 3
    for r in acked:
        # (or at the completion itself, when the server waited for it with nothing to run)
        assert r.ack_s in (r.done_s, passes[np.searchsorted(passes, r.done_s)])
    assert any(r.ack_s == r.done_s for r in acked) and any(r.ack_s > r.done_s for r in acked)


def test_backup_is_fenced_behind_the_batch_launched_before_it():
    """Overlap: the prefill's result is processed once the decode step after it was launched;
    the backup its insert queues is submitted then (the prefill's end) and starts when that
    decode step ends (``write_fence_stream``). The plain loop starts it at the prefill's end."""
    setup = _setup()
    for overlap in (True, False):
        a = _req("a", list(range(1000, 1030)), 480, out=3)
        _, rec = _serve(setup, [(0.0, a)], disable_overlap_schedule=not overlap)
        frames = rec.report_frames()
        prefill_end = frames["prefill_batches"].t_end_s.iloc[0]
        first_decode_end = frames["decode_steps"].time_s.iloc[0]
        write = frames["hicache_transfers"].query("direction == 'd2h'").iloc[0]
        assert write.submit_s == pytest.approx(prefill_end, abs=1e-15)
        assert write.start_s == pytest.approx(first_decode_end if overlap else prefill_end, abs=1e-15)


def test_load_back_starts_when_the_forward_in_flight_ends():
    """Overlap: C's load-back is submitted while D's decode step is in flight
    (``load_fence_stream``): it starts with C's prefill, at that step's end, and the prefill
    pays compute plus the exposed part of the layer-wise load, as in the plain loop."""
    setup = _setup()
    d = _req("d", list(range(3000, 3002)), 32, out=300)
    a = _req("a", list(range(1000, 1030)), 480)
    b = _req("b", list(range(5000, 5026)), 410)  # demotes A (backed up) to the host
    c = _req("c", list(range(1000, 1030)) + list(range(7000, 7010)), 640)
    server, rec = _serve(setup, [(0.0, d), (0.01, a), (0.2, b), (0.45, c)], check_invariants=True)
    assert server.hicache.cache.counts["load_back_ok"] == 1
    frames = rec.report_frames()
    load = frames["hicache_transfers"].query("direction == 'h2d'").iloc[0]
    batch = frames["prefill_batches"].iloc[-1]
    assert load.submit_s < load.start_s == pytest.approx(batch.t_start_s, abs=1e-15)
    compute = 1e-3 + 2e-6 * 160
    exposed = setup.transfer.exposed_load_time(load.done_s - load.start_s, compute, 8)
    assert batch.t_end_s - batch.t_start_s == pytest.approx(compute + exposed, abs=1e-12)
    reqs = frames["requests"].set_index("rid")
    assert (reqs.loc["c", "cached_tokens_device"], reqs.loc["c", "cached_tokens_host"]) == (0, 480)


def _trace_cfg(policy: str, **kw) -> SimConfig:
    return SimConfig(
        tp=2,
        page_size=64,
        max_total_tokens=200_000,
        **OVERLAP,
        **kw,
        hicache=HiCacheArgs(enable_hierarchical_cache=True, hicache_ratio=2.0, hicache_write_policy=policy),
    )


@pytest.mark.parametrize("policy", ["write_through", "write_through_selective", "write_back"])
def test_overlap_serves_the_trace_and_fast_forward_is_exact(policy, monkeypatch):
    """Every write policy serves the bundled trace under the overlap loop; the fast-forwarded
    run equals the stepped one. Under write_back, a jump samples host use once at its end where
    stepping samples each step's synchronous eviction backups (the plain loop's jump does the
    same), so that frame's sample count is left out there."""
    from simulator.run import run_config
    from traces import load_trace

    trace = load_trace(TRACE, limit=150)
    cfg = _trace_cfg(policy)
    stepped = run_config(trace, replace(cfg, fast_forward=False))
    jumps = _Jumps(monkeypatch)
    fast = run_config(trace, cfg)
    assert jumps.n > 0
    s = fast.summary
    assert s["failed"] == 0
    h = s["hicache"]
    assert h["load_backs"] > 0 and h["cached_tokens_host"] > 0 and h["d2h_bytes"] > 0
    assert stepped.summary["hicache"] == h
    names = [n for n in FRAMES if not (policy == "write_back" and n == "hicache_host_usage")]
    _assert_same_frames(fast.frames, stepped.frames, names)


def test_invariants_hold_under_the_overlap_loop():
    from simulator.run import run_config
    from traces import load_trace

    cfg = replace(_trace_cfg("write_back", check_invariants=True), max_total_tokens=150_000)
    cfg = replace(cfg, hicache=replace(cfg.hicache, hicache_ratio=1.0))
    res = run_config(load_trace(TRACE, limit=150), cfg)
    assert res.summary["failed"] == 0 and res.summary["hicache"]["load_backs"] > 0
