"""The L3 storage tier under the overlap loop (``Scheduler.event_loop_overlap``): storage-thread
results seen at pass starts, the load-back of prefetched pages fenced behind the forward in
flight, write_back's L3 backups dated at the pass that evicted, and fast-forwarded runs equal to
stepped ones (the decode jumps stop before storage completions and, under write_back, before a
step could evict), in both loops.

The prefetch scenario is tests/test_hicache_l3_served.py's (A backed up to the host and to L3, B
and C push it off both, D repeats A's 30 pages at t = 3 s; 1 ms per storage call, reads at
0.01 GB/s) with Z decoding beside it from t = 2.5 s, each decode step taking 20 ms, so that a
pass starts every 20 ms while D waits for its prefetch.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import simpy
from hicache_workloads import serve_requests
from test_hicache_engine import POOLS, LinearCost
from test_hicache_l3_served import LAT, READ_S, TRACE, _setup
from test_hicache_overlap import _assert_same_frames

from simulator.engine.config import SimConfig
from simulator.engine.metrics import Recorder
from simulator.engine.request import SimRequest
from simulator.engine.server import ServerModel

STEP = 0.02  # every decode step of the prefetch scenario
WIDE = dataclasses.replace(POOLS, full_tokens=2048)  # room for Z beside B and C


class FixedDecode(LinearCost):
    """LinearCost's prefill; every decode step takes ``STEP``."""

    def decode_time(self, bs, full_ctx, swa_ctx):
        return STEP

    def decode_terms(self, bs):
        return (STEP, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


class _Jumps:
    """Counts the decode jumps of both loops."""

    def __init__(self, monkeypatch) -> None:
        self.n = 0
        for name in ("_apply_overlap_jump", "_fast_forward"):
            real = getattr(ServerModel, name)

            def counting(server, *args, _real=real):
                self.n += 1
                return _real(server, *args)

            monkeypatch.setattr(ServerModel, name, counting)


def _req(rid: str, pages: list[int], prompt: int, out: int = 1) -> SimRequest:
    return SimRequest(rid, np.asarray(pages, dtype=np.int64), prompt, out)


def _serve(setup, requests, pools, cost, overlap: bool, on_pass=None, **cfg):
    env = simpy.Environment()
    rec = Recorder()
    config = SimConfig(disable_overlap_schedule=not overlap, **cfg)
    server = ServerModel(env, config, pools, cost, rec, hicache=setup)
    if on_pass is not None:
        server.on_pass = lambda: on_pass(server)

    serve_requests(env, server, rec, requests)
    return server, rec.report_frames(), rec.report_summary()["hicache"]


def _prefetch_scenario(overlap: bool, policy: str = "wait_complete", **cfg):
    a = list(range(1000, 1030))
    requests = [
        (0.0, _req("a", a, 480)),
        (1.0, _req("b", list(range(5000, 5057)), 900)),
        (2.0, _req("c", list(range(6000, 6057)), 900)),
        (2.5, _req("z", list(range(9500, 9515)), 32, out=200)),
        (3.0, _req("d", a + list(range(7000, 7010)), 640)),
    ]
    return _serve(_setup(policy), requests, WIDE, FixedDecode(), overlap, **cfg)


def _first_at_or_after(times: np.ndarray, t: float) -> float:
    return float(times[np.searchsorted(times, t - 1e-12)])


@pytest.mark.parametrize("overlap", [True, False])
def test_prefetch_is_seen_at_pass_starts_and_its_load_waits_for_the_forward(overlap):
    """While D waits, a pass starts at each decode step's end (``E``). D's prefetch is issued at
    the first pass at or after its arrival (P0, ``ingest_requests``); the hit query (one 1 ms
    call) is drained by the first pass at or after P0 + 1 ms (P1), where the read starts; the
    read's completion is seen by the first pass at or after it (P2), which admits D. The plain
    loop starts D's prefill at P2; the overlap loop launches it behind the decode step in flight
    (P2 + 20 ms), and the load-back of the prefetched pages, submitted at P2, starts with it
    (``load_fence_stream``)."""
    _, frames, h = _prefetch_scenario(overlap, check_invariants=True)
    ends = np.sort(frames["decode_steps"].time_s.to_numpy())
    assert np.allclose(np.diff(ends[ends < 3.5]), STEP)  # Z alone decodes until D joins
    p0 = _first_at_or_after(ends, 3.0)
    p1 = _first_at_or_after(ends, p0 + LAT)
    pf = frames["hicache_prefetches"].set_index("rid").loc["d"]
    assert pf.issue_s == pf.wait_start_s == pytest.approx(p0, abs=1e-12)
    transfers = frames["hicache_transfers"]
    read = transfers.query("direction == 'l32h'").iloc[0]
    assert read.start_s == pytest.approx(p1, abs=1e-12)
    assert read.done_s == pytest.approx(p1 + READ_S, abs=1e-12)
    p2 = _first_at_or_after(ends, read.done_s)
    assert pf.end_s == pf.released_s == pytest.approx(p2, abs=1e-12) and pf.outcome == "complete"
    prefill = frames["prefill_batches"].iloc[-1]  # D's
    assert prefill.t_start_s == pytest.approx(p2 + STEP if overlap else p2, abs=1e-12)
    load = transfers.query("direction == 'h2d'").iloc[0]
    assert load.submit_s == pytest.approx(p2, abs=1e-12)
    assert load.start_s == pytest.approx(prefill.t_start_s, abs=1e-12) and load.full_tokens == 480
    d = frames["requests"].set_index("rid").loc["d"]
    assert (d.cached_tokens, d.cached_tokens_storage) == (480, 480) == (480, h["cached_tokens_storage"])
    # storage results are seen at pass starts only: every L3 ack is a pass start
    passes = np.r_[ends, frames["prefill_batches"].t_end_s.to_numpy(), [0.0, 1.0, 2.0, 2.5, 3.0]]
    for r in transfers[transfers.direction.isin(["h2l3", "l32h"])].itertuples():
        assert np.isclose(passes, r.ack_s, atol=1e-12).any() and r.ack_s >= r.done_s


@pytest.mark.parametrize("overlap", [True, False])
def test_timeout_is_polled_at_pass_starts(overlap):
    """``timeout``: the deadline (0.05 s + 39 pages x 16 / 1024 x 0.1 s from the first blocked
    poll P0) passes while the read runs; the first pass strictly after it terminates the
    prefetch and admits D without it (plain: prefill at that pass; overlap: behind the step in
    flight)."""
    _, frames, h = _prefetch_scenario(overlap, "timeout", check_invariants=True)
    ends = np.sort(frames["decode_steps"].time_s.to_numpy())
    p0 = _first_at_or_after(ends, 3.0)
    deadline = p0 + 0.05 + 39 * (16 / 1024 * 0.1)
    admit = float(ends[np.searchsorted(ends, deadline, side="right")])
    pf = frames["hicache_prefetches"].set_index("rid").loc["d"]
    assert pf.outcome == "timed_out" and pf.wait_start_s == pytest.approx(p0, abs=1e-12)
    assert pf.released_s == pytest.approx(admit, abs=1e-12)
    prefill = frames["prefill_batches"].iloc[-1]
    assert prefill.t_start_s == pytest.approx(admit + STEP if overlap else admit, abs=1e-12)
    assert h["cached_tokens_storage"] == 0 and h["prefetch_outcomes"]["timed_out"] == 1


def _write_back_setup():
    setup = _setup("wait_complete")
    return dataclasses.replace(setup, resolved=dataclasses.replace(setup.resolved, write_policy="write_back"))


def _write_back_scenario(overlap: bool, on_pass=None, **cfg):
    """A (480 tokens) finishes, unbacked under write_back; Z's 600 decode steps outgrow the
    free pages, so a step's allocation evicts A's leaf with a synchronous backup, whose ack
    queues its L3 backup; twice, as A's path is two nodes (its last 64 tokens, one SWA window,
    and the 416 before them), evicted leaf first."""
    a = _req("a", list(range(1000, 1030)), 480)
    requests = [(0.0, a), (0.01, _req("z", list(range(9500, 9540)), 32, 600))]
    return _serve(_write_back_setup(), requests, POOLS, LinearCost(), overlap, on_pass, **cfg)


@pytest.mark.parametrize("overlap", [True, False])
def test_write_back_l3_backup_starts_with_the_pass_that_evicted(overlap):
    """The L3 backup of a synchronous write_back ack is taken up by the backup thread as soon as
    the eviction queues it: at the start of the pass whose allocation evicted (in the overlap
    loop, before the batch in flight ends), not when its step ends."""
    seen: list[tuple[float, int]] = []  # (pass start, write_back_deferred so far)
    server, frames, h = _write_back_scenario(
        overlap, on_pass=lambda s: seen.append((s.env.now, s.hicache.cache.counts["write_back_deferred"]))
    )
    evicting = [seen[i - 1][0] for i in range(1, len(seen)) if seen[i][1] > seen[i - 1][1]]
    assert len(evicting) == h["counts"]["write_back_deferred"] == 2
    writes = frames["hicache_transfers"].query("direction == 'h2l3'")
    assert writes.submit_s.tolist() == pytest.approx(evicting, abs=1e-12)
    assert writes.start_s.tolist() == pytest.approx(evicting, abs=1e-12)  # the thread was idle
    assert writes.full_tokens.sum() == 480


def _assert_same(a: tuple, b: tuple) -> None:
    (_, fa, ha), (_, fb, hb) = a, b
    assert ha == hb
    assert set(fa) == set(fb)
    _assert_same_frames(fa, fb, fa)


@pytest.mark.parametrize("overlap", [True, False])
def test_jumps_with_l3_match_stepping(overlap, monkeypatch):
    """Fast-forwarded and stepped runs agree on every frame and figure: the prefetch scenario
    (jumps end before storage completions: Z's checkpoint backup to L3, D's hit query and read;
    with ``timeout``, before the deadline and before the next event check after the timed-out
    read's completion, which frees its host slots) and the write_back scenario (jumps end
    before a step could evict; without that, the evictions' L3 backups would be dated at the
    jump's end)."""
    for scenario, args in (
        (_prefetch_scenario, ()),
        (_prefetch_scenario, ("timeout",)),
        (_write_back_scenario, ()),
    ):
        stepped = scenario(overlap, *args, fast_forward=False)
        jumps = _Jumps(monkeypatch)
        fast = scenario(overlap, *args)
        monkeypatch.undo()
        assert jumps.n >= 3, (scenario.__name__, args)
        _assert_same(stepped, fast)
        assert fast[2]["h2l3_ops"] >= 2


def _trace_cfg(write: str, **kw) -> SimConfig:
    from simulator.hicache_args import HiCacheArgs

    hi = HiCacheArgs(
        enable_hierarchical_cache=True,
        hicache_ratio=1.0,
        hicache_write_policy=write,
        hicache_storage_backend="file",
        hicache_storage_prefetch_policy="wait_complete",
        hicache_storage_backend_extra_config='{"prefetch_threshold": 64}',
    )
    return SimConfig(
        tp=2, page_size=64, max_total_tokens=40_000, disable_overlap_schedule=False, hicache=hi, **kw
    )


@pytest.mark.parametrize("write", ["write_through", "write_through_selective", "write_back"])
def test_overlap_serves_the_trace_with_l3_and_fast_forward_is_exact(write, monkeypatch):
    """Every write policy serves the bundled trace with L3 under the overlap loop (tight pools:
    prefetches, L3 backups, host and device eviction); the fast-forwarded run equals the
    stepped one in every frame and figure."""
    from simulator.run import run_config
    from traces import load_trace

    trace = load_trace(TRACE, limit=150)
    stepped = run_config(trace, _trace_cfg(write, fast_forward=False))
    jumps = _Jumps(monkeypatch)
    fast = run_config(trace, _trace_cfg(write))
    assert jumps.n > 0
    h = fast.summary["hicache"]
    assert h["prefetch_issued"] > 0 and h["h2l3_bytes"] > 0 and h["load_backs"] > 0
    if write == "write_through":
        assert h["cached_tokens_storage"] > 0
    assert stepped.summary["hicache"] == h and fast.summary["failed"] == stepped.summary["failed"]
    _assert_same((None, stepped.frames, None), (None, fast.frames, None))


def test_cli_serves_l3_under_the_overlap_loop():
    """SGLang's default loop with a storage tier: ``kvplan run --enable-overlap-schedule
    --hicache-storage-backend file`` is served (it was refused)."""
    from typer.testing import CliRunner

    from simulator.cli.main import app

    args = ["run", "--trace", str(TRACE), "--limit", "40", "--tp", "2", "--page-size", "64"]
    args += ["--enable-overlap-schedule", "--enable-hierarchical-cache", "--hicache-storage-backend", "file"]
    out = CliRunner().invoke(app, [*args, "--json"])
    assert out.exit_code == 0, out.output
    h = json.loads(out.output)["hicache"]
    assert h["storage_backend"] == "file" and h["h2l3_bytes"] > 0
