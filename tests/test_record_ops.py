"""Recording the simulated server's memory operations (docs/op-log.md).

A recorded run must (1) give the same results as the run without recording, (2) write an op
log whose replay on a fresh allocator reaches the live run's pool state (free page ids of
both pools, in list order) after every step, (3) be a clean op stream, and (4) summarise
(``kvplan ops stats``) to the run's own allocator and eviction counters. The engine reaches
the cache only through the controller protocol here (``controller_proxy``).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import simpy
from controller_proxy import strict_controller  # noqa: F401
from typer.testing import CliRunner

import simulator.engine.simulate as simulate_module
from simulator.cli.main import app
from simulator.engine.config import SimConfig
from simulator.engine.observer import ServerObserver
from simulator.engine.request import SimRequest
from simulator.engine.server import ServerModel, ServerPools
from simulator.errors import ConfigError
from simulator.memory_ops import MemoryOpExecutor, OpKind, check_op_stream
from simulator.oplog import PoolState, read_op_log, replay_op_log, write_recording
from simulator.oplog_stats import op_log_stats
from simulator.run import run_config
from traces.generators.bench_multiturn import BenchMultiturnArgs, generate_bench_multiturn


class LinearCost:
    """A small cost model (as tests/test_engine_server.py's): enough to order events."""

    def prefill_time(self, extend, prefix):
        return 1e-3 + 2e-6 * float(np.sum(extend))

    def decode_time(self, bs, full_ctx, swa_ctx):
        return 2e-3 + 1e-7 * full_ctx + 1e-6 * swa_ctx

    def decode_terms(self, bs):
        return (2e-3, 1e-7, 0.0, 1e-6, 0.0, 0.0, 0.0)


class LiveStates:
    """Captures the live allocator's pool state at each step boundary (test hook on
    ``MemoryOpExecutor.begin_step``), keyed by the step that just ended."""

    def __init__(self, monkeypatch) -> None:
        self.by_step: dict[int, PoolState] = {}
        original = MemoryOpExecutor.begin_step
        states = self

        def begin_step(ex, step, start_s=0.0, duration_s=0.0):
            if ex.keep:  # the live run's executor (replays do not keep records)
                states.by_step[ex.step] = PoolState.of(ex.step, ex.pages)
            original(ex, step, start_s, duration_s)

        monkeypatch.setattr(MemoryOpExecutor, "begin_step", begin_step)

    def finish(self, ex: MemoryOpExecutor) -> None:
        self.by_step[ex.step] = PoolState.of(ex.step, ex.pages)


class Frames(ServerObserver):
    """Everything the server reports per step (prefill batches, decode steps with #full / #swa
    token), as plain lists to compare."""

    def __init__(self) -> None:
        self.rows: list[tuple] = []

    def on_prefill_batch(self, t0, t1, reqs, ext, cached, full_used, swa_used, running, queue):
        self.rows.append(
            ("prefill", t0, t1, [r.rid for r in reqs], ext, cached, full_used, swa_used, running)
        )

    def on_decode_steps(self, ends, batch, full_used, swa_used, queue):
        rids = [r.rid for r in batch]
        self.rows.append(("decode", ends.tolist(), rids, full_used.tolist(), swa_used.tolist(), queue))

    def on_retract(self, t, reqs, before, after):
        self.rows.append(("retract", t, [r.rid for r in reqs], before, after))


def _pages(tokens: np.ndarray, page: int) -> np.ndarray:
    n = len(tokens) // page
    return np.array([hash(tokens[i * page : (i + 1) * page].tobytes()) for i in range(n)], dtype=np.int64)


def _serve(cfg: SimConfig, pools: ServerPools, record: bool, sessions=8, turns=4, seed=3, max_out=3000):
    """Multi-turn sessions sharing a system prompt; returns the server and its requests."""
    rng = np.random.default_rng(seed)
    env = simpy.Environment()
    server = ServerModel(env, cfg, pools, LinearCost(), Frames(), record_ops=record)
    system = rng.integers(0, 1000, 900)
    done: list[SimRequest] = []

    def client(c: int):
        prev = np.concatenate([system, rng.integers(0, 1000, 200)])
        yield env.timeout(float(rng.exponential(0.05)))
        for t in range(turns):
            out = rng.integers(0, 1000, int(rng.integers(1, max_out)))
            seq = np.concatenate([prev, out])
            req = SimRequest(f"c{c}t{t}", _pages(seq, pools.page_size), len(prev), len(out), session=str(c))
            yield server.submit(req)
            done.append(req)
            prev = np.concatenate([seq, rng.integers(0, 1000, 150)])
            yield env.timeout(float(rng.exponential(0.2)))

    for c in range(sessions):
        env.process(client(c))
    env.run()
    return server, sorted(done, key=lambda r: r.rid)


def _outcome(server, reqs) -> tuple:
    per_req = [(r.rid, r.first_token_s, r.finish_s, r.cached_tokens, r.retractions, r.aborted) for r in reqs]
    return per_req, server.obs.rows, server.counters(), server.forward_ct


P64 = ServerPools(
    page_size=64,
    full_tokens=40_000,
    swa_tokens=6_000,
    window=128,
    max_running_requests=16,
    chunked_prefill_size=1024,
)
P1 = ServerPools(
    page_size=1,
    full_tokens=30_000,
    swa_tokens=5_000,
    window=100,
    max_running_requests=8,
    chunked_prefill_size=2048,
)
P16 = ServerPools(
    page_size=16,
    full_tokens=9_000,
    swa_tokens=4_000,
    window=64,
    max_running_requests=32,
    chunked_prefill_size=512,
)
CASES = {
    "page64-ff": (P64, dict()),
    "page64-step": (P64, dict(fast_forward=False)),
    "page64-overlap": (P64, dict(disable_overlap_schedule=False)),
    "page1-ff": (P1, dict()),
    "page1-iteration": (P1, dict(swa_eviction="iteration")),
    # no decode-time window eviction: the SWA pool runs dry mid-decode and requests retract
    "page16-retract": (P16, dict(swa_eviction="none")),
    "page16-retract-overlap": (P16, dict(swa_eviction="none", disable_overlap_schedule=False)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_recorded_run_replays_to_the_live_pool_state_after_every_step(case, monkeypatch, tmp_path):
    pools, kw = CASES[case]
    cfg = SimConfig(**kw)
    # the overlap loop does not fast-forward while recording (overlap_jump.py): compare with
    # its stepped run, which tests/test_overlap_jump.py shows equals the jumps to 1e-9 s
    stepped = SimConfig(**{**vars(cfg), "fast_forward": False}) if not cfg.disable_overlap_schedule else cfg
    plain = _outcome(*_serve(stepped, pools, record=False))
    live = LiveStates(monkeypatch)
    server, reqs = _serve(cfg, pools, record=True)
    live.finish(server.ops)
    assert _outcome(server, reqs) == plain  # recording changes no result

    ex = server.ops
    kinds = {op.kind for op in ex.ops}
    # evictions, tombstones, window frees (decode and chunk), releases below the window cursor
    want = {OpKind.ALLOC, OpKind.FREE, OpKind.FREE_FULL, OpKind.EVICT, OpKind.TOMBSTONE}
    assert want | {OpKind.SWA_WINDOW_FREE, OpKind.GROUP_BEGIN, OpKind.GROUP_END} <= kinds
    if case.startswith("page16"):
        assert server.retractions > 0
    assert check_op_stream(ex.ops, ex.pages.full.num_pages, ex.pages.swa.num_pages, pools.page_size) == []

    path = write_recording(tmp_path / "ops.npz", ex, window=pools.window)
    replayed = list(replay_op_log(path))
    assert len(replayed) > 10
    for state in replayed:
        want = live.by_step[state.step]
        assert (state.full_free, state.swa_free) == (want.full_free, want.swa_free), state.step
        np.testing.assert_array_equal(state.full_free_ids, want.full_free_ids)
        np.testing.assert_array_equal(state.swa_free_ids, want.swa_free_ids)

    # the step arrays: every step announced once, in order, with its simulated time
    steps = read_op_log(path).steps
    idx = [s.step for s in steps]
    assert idx == sorted(set(idx))
    assert all(s.duration_s > 0 for s in steps[:-1])  # (an aborted last prefill may have none)
    starts = [s.start_s for s in steps]
    assert starts == sorted(starts)


@pytest.fixture
def servers(monkeypatch) -> list:
    """The servers ``run_config`` builds, kept for the test to inspect."""
    kept: list = []
    simulate = simulate_module.simulate

    def keep(*args, **kwargs):
        kept.append(simulate(*args, **kwargs))
        return kept[-1]

    monkeypatch.setattr(simulate_module, "simulate", keep)
    return kept


def test_tombstones_are_recorded_and_stats_match_the_runs_counters(servers, tmp_path):
    """The bench_multiturn workload through ``run_config(record_ops=...)`` with a small SWA pool:
    the tree tombstones internal nodes; ``ops stats`` totals equal the allocator's counters."""
    trace = generate_bench_multiturn(
        BenchMultiturnArgs(
            num_clients=8,
            max_parallel=8,
            request_length=2000,
            output_length=800,
            num_rounds=3,
            request_rate=100.0,
            disable_random_sample=True,
            seed=1,
        )
    )
    cfg = SimConfig(max_total_tokens=16000, page_size=16, swa_full_tokens_ratio=0.2)
    path = tmp_path / "run.npz"
    recorded = run_config(trace, cfg, record_ops=path)
    assert recorded.equals(run_config(trace, cfg))
    stats = op_log_stats(read_op_log(path))
    server = servers[0]
    alloc = server.cache._target.allocator  # behind the protocol proxy
    for key in ("full_pages_allocated", "swa_pages_allocated", "full_pages_freed", "swa_pages_freed"):
        assert stats[key] == getattr(alloc.stats, key), key
    assert stats["records_by_kind"]["TOMBSTONE"] > 0
    p = stats["page_size"]
    evictions = recorded.counters["evictions"]
    assert stats["full_pages_by_kind"]["EVICT"] * p == evictions["full_evicted"]
    swa_evicted = stats["swa_pages_by_kind"]["EVICT"] + stats["swa_pages_by_kind"]["TOMBSTONE"]
    assert swa_evicted * p == evictions["swa_evicted"]
    header = read_op_log(path).header
    assert header["geometry"]["model"] == cfg.model and header["source"]["config"]["page_size"] == 16


runner = CliRunner()


def test_cli_record_ops_writes_a_log_that_ops_stats_reads(tmp_path):
    ops = tmp_path / "sub" / "ops.npz"
    common = ["--num-clients", "4", "--num-rounds", "2", "--request-length", "600", "--output-length", "200"]
    common += ["--disable-random-sample", "--max-total-tokens", "6000", "--page-size", "16", "--json"]
    res = runner.invoke(app, ["bench-multiturn", *common, "--record-ops", str(ops)])
    assert res.exit_code == 0, res.output
    assert ops.exists() and not list(ops.parent.glob(".*tmp"))  # renamed into place
    plain = runner.invoke(app, ["bench-multiturn", *common])
    assert json.loads(res.stdout) == json.loads(plain.stdout)
    st = runner.invoke(app, ["ops", "stats", str(ops), "--json"])
    assert st.exit_code == 0, st.output
    stats = json.loads(st.stdout)
    assert stats["full_pages_allocated"] > 0 and stats["requests"] == 8
    assert stats["final_full_free"] + stats["final_swa_free"] > 0


def test_legacy_tree_refuses_recording_with_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="unified tree"):
        ServerModel(simpy.Environment(), SimConfig(tombstone="legacy"), P16, LinearCost(), record_ops=True)
    res = runner.invoke(
        app, ["run", "--limit", "3", "--tombstone", "legacy", "--record-ops", str(tmp_path / "x")]
    )
    assert res.exit_code == 1
    assert "unified tree" in res.stderr and "Traceback" not in res.output
    assert not list(tmp_path.iterdir())


def test_check_invariants_replays_the_recorded_ops(servers, tmp_path):
    """With --check-invariants, a recorded run's records are replayed on fresh pools at the end
    (check_recorded_ops); a stream that lost one free is caught as an internal error."""
    from simulator.invariants import InvariantViolation
    from simulator.run import check_recorded_ops

    trace = generate_bench_multiturn(
        BenchMultiturnArgs(
            num_clients=4,
            max_parallel=4,
            request_length=600,
            output_length=300,
            num_rounds=2,
            request_rate=100.0,
            disable_random_sample=True,
            seed=2,
        )
    )
    cfg = SimConfig(max_total_tokens=8000, page_size=16, check_invariants=True)
    run_config(trace, cfg, record_ops=tmp_path / "ok.npz")  # a clean stream passes
    executor = servers[0].ops
    frees = [i for i, op in enumerate(executor.ops) if op.kind == OpKind.FREE and len(op.full)]
    assert frees
    del executor.ops[frees[0]]  # the freed pages now look live when allocated again
    with pytest.raises(InvariantViolation, match="recorded memory operations"):
        check_recorded_ops(executor)
