"""The server model: decode fast-forward is exact, memory pressure retracts, invariants hold."""

from __future__ import annotations

import numpy as np
import pytest
import simpy
from controller_proxy import strict_controller  # noqa: F401

from policies.swa_eviction import SWA_EVICTION
from policies.tombstone import TOMBSTONING
from simulator.engine.config import SimConfig
from simulator.engine.request import SimRequest
from simulator.engine.server import ServerModel, ServerPools


class LinearCost:
    """A tiny cost model: enough to order events, independent of the roofline presets."""

    def prefill_time(self, extend, prefix):
        return 1e-3 + 2e-6 * float(np.sum(extend))

    def decode_time(self, bs, full_ctx, swa_ctx):
        return 2e-3 + 1e-7 * full_ctx + 1e-6 * swa_ctx

    def decode_times(self, bs, full0, swa0, k, full_growth, swa_growth):
        i = np.arange(k, dtype=np.int64)
        return np.array([self.decode_time(bs, full0 + full_growth * j, swa0 + swa_growth * j) for j in i])

    def decode_terms(self, bs):
        return (2e-3, 1e-7, 0.0, 1e-6, 0.0, 0.0, 0.0)


def _pages(tokens: list[int], page: int) -> np.ndarray:
    arr = np.asarray(tokens, dtype=np.int64)
    n = len(arr) // page
    return np.array([hash(arr[i * page : (i + 1) * page].tobytes()) for i in range(n)], dtype=np.int64)


def _run(
    cfg: SimConfig, pools: ServerPools, sessions: int = 8, turns: int = 4, seed: int = 3, max_out: int = 900
):
    rng = np.random.default_rng(seed)
    env = simpy.Environment()
    server = ServerModel(env, cfg, pools, LinearCost())
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
    return server, sorted(done, key=lambda r: r.rid)


POOLS = [
    ServerPools(
        page_size=64,
        full_tokens=40_000,
        swa_tokens=6_000,
        window=128,
        max_running_requests=16,
        chunked_prefill_size=1024,
    ),
    ServerPools(
        page_size=1,
        full_tokens=30_000,
        swa_tokens=5_000,
        window=100,
        max_running_requests=8,
        chunked_prefill_size=2048,
    ),
]


@pytest.mark.parametrize("pools", POOLS, ids=["page64", "page1"])
@pytest.mark.parametrize("tombstone,swa", [(t, s) for t in TOMBSTONING.names() for s in SWA_EVICTION.names()])
def test_fast_forward_is_exact(pools, tombstone, swa):
    base = dict(tombstone=tombstone, swa_eviction=swa)
    # long decodes cross many window-eviction triggers and page boundaries inside one jump
    slow_srv, slow = _run(SimConfig(**base, fast_forward=False), pools, max_out=3000)
    fast_srv, fast = _run(SimConfig(**base, fast_forward=True), pools, max_out=3000)
    assert slow_srv.counters()["evictions"]["calls"] > 0  # the pools are under pressure
    assert [(r.rid, r.cached_tokens, r.retractions, r.aborted) for r in slow] == [
        (r.rid, r.cached_tokens, r.retractions, r.aborted) for r in fast
    ]
    np.testing.assert_allclose([r.finish_s for r in slow], [r.finish_s for r in fast], rtol=0, atol=1e-9)
    np.testing.assert_allclose([r.first_token_s for r in slow], [r.first_token_s for r in fast], atol=1e-9)
    a, b = slow_srv.counters(), fast_srv.counters()
    for key in ("tree", "evictions", "swa_tokens_freed_by_decode_eviction", "decode_steps", "retractions"):
        assert a[key] == b[key], key
    assert fast_srv.forward_ct == slow_srv.forward_ct


@pytest.mark.parametrize("pools", POOLS, ids=["page64", "page1"])
def test_invariants_hold_after_every_step(pools):
    srv, reqs = _run(SimConfig(check_invariants=True), pools, sessions=6, turns=3)
    assert all(r.finish_s == r.finish_s for r in reqs)  # all finished
    assert srv.idle


def test_retraction_under_decode_pressure():
    pools = ServerPools(
        page_size=16,
        full_tokens=9_000,
        swa_tokens=4_000,
        window=64,
        max_running_requests=32,
        chunked_prefill_size=512,
    )
    # without decode-time SWA eviction private SWA grows with every token, and admission does not
    # pre-charge running decodes' SWA (SWAPrefillBudget), so the SWA pool runs dry mid-decode
    srv, reqs = _run(
        SimConfig(check_invariants=True, swa_eviction="none", tombstone="legacy"),
        pools,
        sessions=10,
        turns=2,
        seed=5,
    )
    assert srv.retractions > 0
    assert all(r.finish_s == r.finish_s for r in reqs)
    retracted = [r for r in reqs if r.retractions]
    assert retracted and all(not r.aborted for r in retracted)


@pytest.mark.parametrize("swa,think", [("interval", 0.0), ("none", 0.0), ("interval", 0.5)])
def test_fast_forward_is_exact_on_the_bundled_trace(swa, think):
    """Jumps (past finishes, arrivals, chunk trains) reproduce a one-step-at-a-time run exactly.
    With think time, later turns wait for their parents: unannounced arrivals cut jumps short."""
    from pathlib import Path

    from simulator.engine.metrics import Recorder
    from simulator.engine.simulate import simulate
    from traces import load_trace

    trace = load_trace(
        Path(__file__).resolve().parents[1] / "traces" / "data" / "mooncake_arxiv_head800.jsonl"
    )
    frames, counters = [], []
    for ff in (True, False):
        cfg = SimConfig(
            model="gpt-oss-120b",
            gpu="H200",
            tp=2,
            page_size=64,
            swa_eviction=swa,
            fast_forward=ff,
            think_time_s=think,
        )
        rec = Recorder.from_config(cfg)
        server = simulate(trace, cfg, rec)
        frames.append(rec.frames())
        counters.append(server.counters())
    for name in ("requests", "decode_steps", "prefill_batches"):
        a, b = frames[0][name], frames[1][name]
        assert len(a) == len(b), name
        for col in a.columns:
            if a[col].dtype.kind in "fi":
                np.testing.assert_allclose(
                    a[col].to_numpy(float), b[col].to_numpy(float), atol=1e-9, err_msg=col
                )
    for key in ("tree", "evictions", "decode_steps", "swa_tokens_freed_by_decode_eviction", "retractions"):
        assert counters[0][key] == counters[1][key], key
    assert counters[0]["evictions"]["calls"] > 0


def test_announced_arrivals_give_the_interrupted_run_exactly(monkeypatch):
    """The open loop announces its send times so a jump can stop at the step in flight; a run
    where every arrival interrupts its jump instead is the same run, bit for bit."""
    from pathlib import Path

    from simulator.engine.metrics import Recorder
    from simulator.engine.simulate import simulate
    from traces import load_trace

    trace = load_trace(
        Path(__file__).resolve().parents[1] / "traces" / "data" / "mooncake_arxiv_head800.jsonl"
    )
    cfg = SimConfig(model="gpt-oss-120b", gpu="H200", tp=2, page_size=64)
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
    assert interrupts[1] >= 20 and interrupts[0] == 0, interrupts  # no session waits for a parent here


@pytest.mark.parametrize("pools", POOLS, ids=["page64", "page1"])
@pytest.mark.parametrize("tombstone,swa", [("unified", "interval"), ("legacy", "none")])
def test_overlap_schedule_processes_results_one_step_late(pools, tombstone, swa):
    base = dict(tombstone=tombstone, swa_eviction=swa, check_invariants=True)
    plain_srv, plain = _run(SimConfig(**base), pools, max_out=1500)
    over_srv, over = _run(SimConfig(**base, disable_overlap_schedule=False), pools, max_out=1500)
    assert all(r.finish_s == r.finish_s for r in over)  # every request finished
    assert [r.rid for r in plain] == [r.rid for r in over]
    # SGLang 0.5.23 (_reqs_finishing_inflight): a request whose in-flight step finishes it by
    # length leaves the next decode batch, so these ignore_eos requests take no extra slot; the
    # only dropped results are of requests retracted while their step was in flight (an EOS
    # finisher still takes one: tests/test_scheduler_rules.py)
    assert over_srv.overlap_extra_slots <= over_srv.retractions and plain_srv.overlap_extra_slots == 0
    assert over_srv.idle


def test_overlap_schedule_retracts_under_pressure():
    pools = ServerPools(
        page_size=16,
        full_tokens=9_000,
        swa_tokens=4_000,
        window=64,
        max_running_requests=32,
        chunked_prefill_size=512,
    )
    cfg = SimConfig(
        check_invariants=True, swa_eviction="none", tombstone="legacy", disable_overlap_schedule=False
    )
    srv, reqs = _run(cfg, pools, sessions=10, turns=2, seed=5)
    assert srv.retractions > 0
    assert all(r.finish_s == r.finish_s for r in reqs)


def test_collector_freeze_is_undone_and_leaves_a_callers_freeze_alone():
    import gc

    from simulator.engine.simulate import RUN_GC_THRESHOLD, collector_skips_older_objects

    assert gc.get_freeze_count() == 0
    before = gc.get_threshold()
    with collector_skips_older_objects():
        assert gc.get_freeze_count() > 0  # the objects from before the run are parked
        # young collections are rarer during the run; the older generations keep their ratios
        assert gc.get_threshold() == (max(before[0], RUN_GC_THRESHOLD), *before[1:])
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == before
    with pytest.raises(RuntimeError), collector_skips_older_objects():
        raise RuntimeError("a run that fails still hands the objects back")
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == before
    gc.freeze()  # a caller's own freeze (e.g. before forking) is neither extended nor undone
    try:
        frozen = gc.get_freeze_count()
        with collector_skips_older_objects():
            pass
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()


def test_prefill_memo_returns_the_cost_models_price_and_stays_bounded():
    from simulator.engine.step_costs import StepCosts

    costs = StepCosts(LinearCost(), memo_size=3)
    cost = LinearCost()
    for ext, pre in [(100, 0), (100, 0), (64, 128), (7, 9), (100, 0), (5, 5), (64, 128)]:
        assert costs.prefill_time([ext], [pre]) == cost.prefill_time([ext], [pre])
        assert costs.prefill_memo_len <= 3
    assert costs.prefill_time([10, 20], [0, 5]) == cost.prefill_time([10, 20], [0, 5])  # not memoised
    assert costs.prefill_memo_len <= 3


def test_memoised_prices_are_per_server():
    """Two servers with different cost models never share a memoised price."""

    class Doubled(LinearCost):
        def prefill_time(self, extend, prefix):
            return 2 * super().prefill_time(extend, prefix)

    one = ServerModel(simpy.Environment(), SimConfig(), POOLS[0], LinearCost())
    two = ServerModel(simpy.Environment(), SimConfig(), POOLS[0], Doubled())
    assert one.costs.prefill_time([100], [0]) * 2 == two.costs.prefill_time([100], [0])
    assert one.costs.decode_terms(4) == two.costs.decode_terms(4)
