"""The overlap loop's decode fast-forward gives the run of stepping it pass by pass.

Mirrors the plain loop's checks (tests/test_engine_server.py): every request's times, cached
tokens and retractions, every decode step's time and pool usage, every prefill batch, the
counters and the whole summary, with fast-forward on and off; under memory pressure
(retraction, the skip of a short decode step), with EOS finishers (the extra slot), with chunked
prefill, on the bundled trace with and without think time.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import simpy
from controller_proxy import strict_controller  # noqa: F401
from test_engine_server import POOLS, LinearCost, _pages

from policies.swa_eviction import SWA_EVICTION
from policies.tombstone import TOMBSTONING
from simulator.engine.config import SimConfig
from simulator.engine.metrics import Recorder
from simulator.engine.request import SimRequest
from simulator.engine.server import ServerModel, ServerPools

TRACE = Path(__file__).resolve().parents[1] / "traces" / "data" / "mooncake_arxiv_head800.jsonl"
COUNTERS = (
    "tree",
    "evictions",
    "swa_tokens_freed_by_decode_eviction",
    "retractions",
    "aborts",
    "overlap_extra_decode_slots",
    "forward_steps",
    "decode_steps",
)


class _Counts:
    """Counts jumps (by the kind of batch in flight), the jumps that also stood for a draining
    batch's last pass, and short-memory decode skips."""

    def __init__(self, monkeypatch) -> None:
        self.jumps = {"decode": 0, "prefill": 0}
        self.drains = 0
        self.skips = 0
        apply, skip = ServerModel._apply_overlap_jump, ServerModel._skip_finishing_inflight

        def counting_apply(server, pending, plan, segments, lag, m, passes):
            self.jumps[pending.kind] += 1
            self.drains += passes > m
            return apply(server, pending, plan, segments, lag, m, passes)

        def counting_skip(server):
            out = skip(server)
            self.skips += bool(out and server.running)
            return out

        monkeypatch.setattr(ServerModel, "_apply_overlap_jump", counting_apply)
        monkeypatch.setattr(ServerModel, "_skip_finishing_inflight", counting_skip)


def _sessions(cfg: SimConfig, pools: ServerPools, sessions=8, turns=4, seed=3, max_out=900):
    """tests/test_engine_server.py's closed-loop sessions, with a recorder."""
    rng = np.random.default_rng(seed)
    env = simpy.Environment()
    rec = Recorder()
    server = ServerModel(env, cfg, pools, LinearCost(), observer=rec)
    system = list(rng.integers(0, 1000, 900))
    done: list[SimRequest] = []

    def client(c: int):
        prev = system + list(rng.integers(0, 1000, 200))
        yield env.timeout(float(rng.exponential(0.05)))
        for t in range(turns):
            out = list(rng.integers(0, 1000, int(rng.integers(1, max_out))))
            req = SimRequest(
                f"c{c}t{t}", _pages(prev + out, pools.page_size), len(prev), len(out), session=str(c), round=t
            )
            yield server.submit(req)
            done.append(req)
            prev = prev + out + list(rng.integers(0, 1000, 150))
            yield env.timeout(float(rng.exponential(0.2)))

    for c in range(sessions):
        env.process(client(c))
    env.run()
    rec.on_end(env.now, server.counters())
    return server, rec, sorted(done, key=lambda r: r.rid)


def _assert_same(a: tuple, b: tuple) -> None:
    """Two runs ``(server, recorder, requests)`` are the same run (times to 1e-9 s: a jump
    prices its steps in closed form)."""
    (srv_a, rec_a, reqs_a), (srv_b, rec_b, reqs_b) = a, b
    assert [(r.rid, r.cached_tokens, r.retractions, r.aborted) for r in reqs_a] == [
        (r.rid, r.cached_tokens, r.retractions, r.aborted) for r in reqs_b
    ]
    for col in ("finish_s", "first_token_s"):
        np.testing.assert_allclose(
            [getattr(r, col) for r in reqs_a], [getattr(r, col) for r in reqs_b], atol=1e-9
        )
    _assert_same_record(rec_a, rec_b)
    ca, cb = srv_a.counters(), srv_b.counters()
    for key in COUNTERS:
        assert ca[key] == cb[key], key
    assert srv_a.batch_is_full == srv_b.batch_is_full
    assert srv_a.ratio.current == pytest.approx(srv_b.ratio.current, rel=1e-12)


def _assert_same_record(rec_a: Recorder, rec_b: Recorder) -> None:
    """Every frame (decode steps with their pool usage, prefill batches, requests,
    retractions) and the summary."""
    fa, fb = rec_a.frames(), rec_b.frames()
    assert fa.keys() == fb.keys()
    for name in fa:
        a, b = fa[name], fb[name]
        assert list(a.columns) == list(b.columns) and len(a) == len(b), name
        for col in a.columns:
            if a[col].dtype.kind in "fi":
                np.testing.assert_allclose(
                    a[col].to_numpy(float), b[col].to_numpy(float), atol=1e-9, err_msg=f"{name}.{col}"
                )
            else:
                assert a[col].tolist() == b[col].tolist(), f"{name}.{col}"
    _assert_close(rec_a.summary(), rec_b.summary(), "summary")


def _assert_close(a, b, where: str) -> None:
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for k in a:
            _assert_close(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_close(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-9, abs=1e-9), where
    else:
        assert a == b, where


def _both(cfg: SimConfig, pools: ServerPools, **kw) -> tuple[tuple, tuple]:
    over = dict(disable_overlap_schedule=False)
    stepped = _sessions(SimConfig(**{**vars(cfg), **over, "fast_forward": False}), pools, **kw)
    fast = _sessions(SimConfig(**{**vars(cfg), **over, "fast_forward": True}), pools, **kw)
    return stepped, fast


@pytest.mark.parametrize("pools", POOLS, ids=["page64", "page1"])
@pytest.mark.parametrize("tombstone,swa", [(t, s) for t in TOMBSTONING.names() for s in SWA_EVICTION.names()])
def test_overlap_fast_forward_is_exact(pools, tombstone, swa, monkeypatch):
    counts = _Counts(monkeypatch)
    # long decodes cross many window-eviction triggers and page boundaries inside one jump
    stepped, fast = _both(SimConfig(tombstone=tombstone, swa_eviction=swa), pools, max_out=3000)
    assert stepped[0].counters()["evictions"]["calls"] > 0  # the pools are under pressure
    _assert_same(stepped, fast)
    assert counts.jumps["decode"] >= 1 and counts.jumps["prefill"] >= 5, counts.jumps


@pytest.mark.parametrize("pools", POOLS, ids=["page64", "page1"])
def test_overlap_fast_forward_with_eos_finishers(pools, monkeypatch):
    """Requests stopping at EOS below ``max_new_tokens`` stay in the step after their last
    token (an extra slot) and are released one pass later than they leave."""
    counts = _Counts(monkeypatch)
    cfg = SimConfig(max_new_tokens="4096", ignore_eos=False)
    stepped, fast = _both(cfg, pools, max_out=1500)
    _assert_same(stepped, fast)
    assert stepped[0].overlap_extra_slots >= 20
    assert sum(counts.jumps.values()) > 20


def test_overlap_fast_forward_under_pressure(monkeypatch):
    """Retractions and a decode step skipped for memory (``update_running_batch`` under
    overlap): the jump stops before them and the loop steps them."""
    counts = _Counts(monkeypatch)
    pools = ServerPools(
        page_size=16,
        full_tokens=8_000,
        swa_tokens=2_000,
        window=64,
        max_running_requests=32,
        chunked_prefill_size=512,
    )
    for cfg in (SimConfig(), SimConfig(swa_eviction="none", tombstone="legacy")):
        counts.skips = 0
        stepped, fast = _both(cfg, pools, sessions=16, turns=2, seed=5)
        _assert_same(stepped, fast)
        assert stepped[0].retractions > 0
        if cfg.tombstone == "unified":
            assert counts.skips >= 2  # one in each run
    assert sum(counts.jumps.values()) >= 10


@pytest.mark.parametrize(
    "swa,think,chunk",
    [("interval", 0.0, None), ("none", 0.0, None), ("interval", 0.5, None), ("interval", 0.0, 1024)],
)
def test_overlap_fast_forward_is_exact_on_the_bundled_trace(swa, think, chunk, monkeypatch):
    """Jumps past finishes and arrivals, with prefill batches in flight, chunked prompts and,
    with think time, unannounced arrivals that cut jumps short."""
    from simulator.engine.simulate import simulate
    from traces import load_trace

    counts = _Counts(monkeypatch)
    trace = load_trace(TRACE)
    runs = []
    for ff in (False, True):
        cfg = SimConfig(
            model="gpt-oss-120b",
            gpu="H200",
            tp=2,
            page_size=64,
            swa_eviction=swa,
            think_time_s=think,
            chunked_prefill_size=chunk,
            disable_overlap_schedule=False,
            fast_forward=ff,
        )
        rec = Recorder.from_config(cfg)
        server = simulate(trace, cfg, rec)
        runs.append((server, rec))
    _assert_same_record(runs[0][1], runs[1][1])
    for key in COUNTERS:
        assert runs[0][0].counters()[key] == runs[1][0].counters()[key], key
    assert runs[0][0].counters()["evictions"]["calls"] > 0
    assert counts.jumps["decode"] >= 1 and counts.jumps["prefill"] >= 20, counts.jumps
    assert counts.drains >= 1, counts.drains  # a draining batch's last pass inside the jump
    if chunk:
        assert (runs[0][1].frames()["prefill_batches"]["extend_tokens"] == chunk).sum() > 20


def test_overlap_announced_arrivals_give_the_interrupted_run_exactly(monkeypatch):
    """An overlap jump planned to stop at an announced arrival equals one that the arrival
    interrupts."""
    from simulator.engine.simulate import simulate
    from traces import load_trace

    trace = load_trace(TRACE)
    cfg = SimConfig(model="gpt-oss-120b", gpu="H200", tp=2, page_size=64, disable_overlap_schedule=False)
    interrupts = []
    real_interrupt = simpy.Process.interrupt

    def counting_interrupt(self, cause=None):
        interrupts[-1] += 1
        return real_interrupt(self, cause)

    monkeypatch.setattr(simpy.Process, "interrupt", counting_interrupt)
    frames = []
    for announce in (True, False):
        if not announce:
            monkeypatch.setattr(ServerModel, "expect_arrival", lambda self, t: None)
        interrupts.append(0)
        rec = Recorder.from_config(cfg)
        simulate(trace, cfg, rec)
        frames.append(rec.frames())
    for name in ("requests", "decode_steps", "prefill_batches"):
        assert frames[0][name].equals(frames[1][name]), name
    assert interrupts[1] >= 20 and interrupts[0] == 0, interrupts


def test_one_step_record_materialises_as_a_per_step_record():
    """A decode step's record in closed form (``one_step_record``) gives the recorder the very
    columns a per-step ``on_decode_steps`` call gives: times bit for bit, usage, running,
    queue and round; with the decode log on, the same log lines."""
    import io

    from simulator.engine.observer import PoolCapacity
    from simulator.engine.overlap_jump import one_step_record

    rng = np.random.default_rng(5)
    sims = [SimRequest(f"r{i}", [i], 10, 10, round=i % 2) for i in range(3)]
    times = np.cumsum(rng.exponential(0.013, 40)) * 1e3 / 7
    records = [
        (float(t), sims[: int(rng.integers(1, 4))], int(rng.integers(0, 10**6)), int(rng.integers(0, 10**5)))
        for t in times
    ]
    for log_decode in (False, True):
        logs = io.StringIO(), io.StringIO()
        per_step, closed = (
            Recorder(log_decode=log_decode, decode_log_interval=3, log_stream=log) for log in logs
        )
        for rec in (per_step, closed):
            rec.on_start(PoolCapacity(2 * 10**6, 2 * 10**5), {})
        for i, (t, batch, full, swa) in enumerate(records):
            per_step.on_decode_steps(np.array([t]), batch, np.array([full]), np.array([swa]), i % 3)
            closed.on_decode_jump(one_step_record(t, batch, full, swa, 64, i % 3))
        a, b = per_step._decode_columns(), closed._decode_columns()
        assert a.keys() == b.keys()
        for key in a:
            assert a[key].dtype == b[key].dtype, key
            assert np.array_equal(a[key], b[key]), key
        assert logs[0].getvalue() == logs[1].getvalue()
        assert (logs[0].getvalue() != "") == log_decode
