"""Client processes: open loop, sessions, sequential replay and bench_multiturn's sender.

The server here is a fake (:class:`FakeServer`): it serves every request alone after fixed delays
and calls the observer hooks, so send times can be checked by hand. ``fake_simulate`` mirrors the
real ``simulate(trace, cfg, observer)`` and is reused by the metrics and CLI tests.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest
import simpy
from controller_proxy import strict_controller  # noqa: F401

from simulator.engine.clients import (
    ClientStats,
    client_mode,
    offered_request_rate,
    open_loop_schedule,
    requests_from_trace,
    start_clients,
)
from simulator.engine.config import SimConfig
from simulator.engine.observer import PoolCapacity, ServerObserver
from simulator.engine.request import SimRequest
from simulator.errors import ConfigError
from traces import BenchMultiturnArgs, generate_bench_multiturn, load_trace
from traces.closed_loop import SequentialReplay
from traces.schema import TokenContent, Trace, make_requests

SAMPLES = Path(__file__).resolve().parents[1] / "traces" / "data"


class FakeServer:
    """Serves each request alone: first token ``ttft_s`` after submit, then ``step_s`` per token.

    Parallelism is unlimited. ``cached_tokens`` = the request's leading pages already inserted by
    finished requests (prompt ++ output pages), capped at ``prompt_len - 1`` floored to a page, so
    multi-turn traces get SGLang-like hits. Requests whose rid is in ``abort`` are aborted at submit.
    Decode steps are reported per request, full token = pages held, swa token = a window's worth.
    """

    def __init__(
        self,
        env: simpy.Environment,
        observer: ServerObserver,
        *,
        page_size: int = 16,
        ttft_s: float = 0.1,
        step_s: float = 0.01,
        capacity: PoolCapacity = PoolCapacity(full_tokens=100_000, swa_tokens=20_000),
        abort: frozenset[str] = frozenset(),
    ) -> None:
        self.env = env
        self.obs = observer
        self.page_size = page_size
        self.ttft_s = ttft_s
        self.step_s = step_s
        self.capacity = capacity
        self.abort = abort
        self.seen: set[tuple[int, ...]] = set()
        self.submitted: list[tuple[float, str]] = []
        self.in_flight = 0
        self.max_in_flight = 0

    def submit(self, req: SimRequest) -> simpy.Event:
        self.submitted.append((self.env.now, req.rid))
        self.obs.on_arrival(req)
        done = self.env.event()
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self.env.process(self._serve(req, done))
        return done

    def _serve(self, req: SimRequest, done: simpy.Event):
        env, p = self.env, self.page_size
        if req.rid in self.abort:
            req.aborted, req.abort_reason, req.finish_s = True, "test abort", env.now
            self._finish(req, done)
            return
        pages = [int(x) for x in req.pages]
        hit = 0
        while hit < len(pages) and tuple(pages[: hit + 1]) in self.seen:
            hit += 1
        req.cached_tokens = min(hit * p, (req.prompt_len - 1) // p * p)
        yield env.timeout(self.ttft_s)
        req.first_token_s = env.now
        held = req.prompt_len
        self.obs.on_prefill_batch(
            env.now - self.ttft_s, env.now, [req], req.prompt_len - req.cached_tokens, req.cached_tokens,
            held, min(held, 256), self.in_flight, 0,
        )  # fmt: skip
        self.obs.on_first_token(req)
        steps = max(req.output_len - 1, 0)
        if steps:
            times = env.now + self.step_s * np.arange(1, steps + 1)
            full = held + np.arange(steps)
            self.obs.on_decode_steps(times, [req], full, np.minimum(full, 256), 0)
            yield env.timeout(self.step_s * steps)
        for k in range(1, len(pages) + 1):
            self.seen.add(tuple(pages[:k]))
        req.finish_s = env.now
        self._finish(req, done)

    def _finish(self, req: SimRequest, done: simpy.Event) -> None:
        self.in_flight -= 1
        self.obs.on_finish(req)
        done.succeed(req)


def fake_simulate(trace: Trace, cfg: SimConfig, observer: ServerObserver, **server_kw) -> ClientStats:
    """What ``simulate`` does, with :class:`FakeServer` in place of the server model."""
    env = simpy.Environment()
    server = FakeServer(env, observer, page_size=cfg.page_size or 16, **server_kw)
    observer.on_start(server.capacity, {"page_size": server.page_size})
    proc = start_clients(env, server, trace, cfg, requests_from_trace(trace, server.page_size))
    env.run()
    observer.on_end(env.now, {"evictions": 0, "tombstones_created": 0})
    assert proc.triggered, "clients did not finish"
    fake_simulate.last_server = server  # type: ignore[attr-defined]
    return proc.value


def _run(trace: Trace, cfg: SimConfig, **kw) -> tuple[list[SimRequest], FakeServer, ClientStats]:
    env = simpy.Environment()
    server = FakeServer(env, ServerObserver(), **kw)
    reqs = requests_from_trace(trace, server.page_size)
    proc = start_clients(env, server, trace, cfg, reqs)
    env.run()
    assert proc.triggered
    return reqs, server, proc.value


def _trace(arrival, parent=None, session=None, prompt=32, output=8) -> Trace:
    n = len(arrival)
    lens = np.full(n, prompt + output)
    offsets = np.concatenate(([0], np.cumsum(lens)))
    tokens = np.arange(int(offsets[-1]), dtype=np.int64)  # unique content
    turn = None
    if parent is not None:
        turn = np.zeros(n, np.int32)
        for i, p in enumerate(parent):
            turn[i] = 0 if p < 0 else turn[p] + 1
    reqs = make_requests(
        [f"r{i}" for i in range(n)],
        np.asarray(arrival, dtype=float),
        np.full(n, prompt),
        np.full(n, output),
        session_id=session,
        turn=turn,
        parent=None if parent is None else np.asarray(parent),
    )
    return Trace(reqs, TokenContent(offsets, tokens), source="test")


# --- requests_from_trace --------------------------------------------------------------------------


def test_requests_from_trace_pages_and_fields():
    trace = load_trace(SAMPLES / "tokens_multiturn.jsonl")
    reqs = requests_from_trace(trace, 16)
    offsets, ids = trace.page_keys(16)
    assert len(reqs) == len(trace)
    for i, r in enumerate(reqs):
        assert r.index == i and r.rid == trace.requests["rid"].iloc[i]
        assert np.array_equal(r.pages, ids[offsets[i] : offsets[i + 1]])
        assert len(r.pages) == (r.prompt_len + r.output_len) // 16
        assert r.round == int(trace.requests["turn"].iloc[i])
        assert not r.heartbeat and math.isnan(r.arrival_s)


def test_requests_from_trace_flags_heartbeats():
    trace = generate_bench_multiturn(
        BenchMultiturnArgs(num_clients=3, num_rounds=2, enable_round_barrier=True)
    )
    reqs = requests_from_trace(trace, 16)
    hb = [r for r in reqs if r.heartbeat]
    assert [r.rid for r in hb] == ["heartbeat-0", "heartbeat-1"]
    assert [r.round for r in hb] == [0, 1] and all(r.session is None for r in hb)
    assert all(r.session == f"client-{r.rid.split('-')[1]}" for r in reqs if not r.heartbeat)


# --- open loop --------------------------------------------------------------------------------------


def test_open_loop_uses_scaled_arrivals_relative_to_first():
    trace = _trace([5.0, 6.0, 8.0, 8.0])
    reqs, server, stats = _run(trace, SimConfig(time_scale=2.0))
    assert [r.arrival_s for r in reqs] == [0.0, 2.0, 6.0, 6.0]
    assert [rid for _, rid in server.submitted] == ["r0", "r1", "r2", "r3"]
    assert stats.mode == "open" and stats.submitted == stats.completed == 4
    assert stats.end_s == pytest.approx(6.0 + 0.1 + 7 * 0.01)


def test_open_loop_poisson_rate_is_seeded_and_in_trace_order():
    trace = _trace([0.0, 100.0, 200.0, 300.0, 400.0])
    cfg = SimConfig(request_rate=4.0, seed=7)
    reqs, _, _ = _run(trace, cfg)
    gaps = np.random.default_rng(7).exponential(0.25, size=5)
    want = np.concatenate(([0.0], np.cumsum(gaps[:-1])))
    assert np.allclose([r.arrival_s for r in reqs], want, rtol=0, atol=1e-12)
    again, _, _ = _run(trace, cfg)
    assert [r.arrival_s for r in again] == [r.arrival_s for r in reqs]
    other, _, _ = _run(trace, SimConfig(request_rate=4.0, seed=8))
    assert [r.arrival_s for r in other] != [r.arrival_s for r in reqs]


def test_session_child_waits_for_parent_plus_think_time():
    # r1 is r0's next turn: own arrival 0.05 < r0's finish (0.1 + 7 * 0.01 = 0.17) + 1.0 think time.
    # r2 is r1's next turn with a late own arrival (10.0) that wins over r1's finish + think.
    trace = _trace([0.0, 0.05, 10.0], parent=[-1, 0, 1], session=["s", "s", "s"])
    reqs, _, _ = _run(trace, SimConfig(think_time_s=1.0))
    assert reqs[1].arrival_s == pytest.approx(reqs[0].finish_s + 1.0)
    assert reqs[2].arrival_s == pytest.approx(10.0)


def test_session_without_think_time_keeps_trace_arrivals():
    trace = _trace([0.0, 0.05], parent=[-1, 0], session=["s", "s"])
    reqs, _, _ = _run(trace, SimConfig())
    assert [r.arrival_s for r in reqs] == [0.0, 0.05]  # sent before its parent finished


def test_nan_arrival_children_follow_parent_finish():
    trace = _trace([0.0, np.nan, np.nan, 0.5], parent=[-1, 0, 1, -1], session=["a", "a", "a", "b"])
    reqs, _, _ = _run(trace, SimConfig(time_scale=1.0))
    assert reqs[1].arrival_s == pytest.approx(reqs[0].finish_s)
    assert reqs[2].arrival_s == pytest.approx(reqs[1].finish_s)
    assert reqs[3].arrival_s == pytest.approx(0.5)
    own, waits = open_loop_schedule(trace, SimConfig())
    assert waits.tolist() == [False, True, True, False] and np.isnan(own[1])


def test_nan_arrival_without_parent_is_an_error():
    trace = _trace([0.0, np.nan])
    with pytest.raises(ConfigError, match="row 1"):
        _run(trace, SimConfig())
    reqs, _, _ = _run(trace, SimConfig(request_rate=10.0))  # a rate times them
    assert reqs[0].arrival_s == 0.0 and reqs[1].arrival_s > 0


@pytest.mark.parametrize(
    "cfg",
    [SimConfig(time_scale=-1.0), SimConfig(request_rate=0.0), SimConfig(think_time_s=-0.5)],
)
def test_bad_timing_options(cfg):
    with pytest.raises(ConfigError):
        _run(_trace([0.0]), cfg)


# --- sequential -------------------------------------------------------------------------------------


def test_sequential_replay_is_batch_one():
    trace = load_trace(SAMPLES / "tokens_multiturn.jsonl")
    assert isinstance(trace.closed_loop, SequentialReplay)
    reqs, server, stats = _run(trace, SimConfig())
    assert stats.mode == "sequential" and server.max_in_flight == 1
    assert reqs[0].arrival_s == 0.0
    for prev, cur in zip(reqs, reqs[1:], strict=False):
        assert cur.arrival_s == prev.finish_s
    assert offered_request_rate(trace, SimConfig()) is None


def test_sequential_with_request_rate_becomes_open_loop():
    trace = load_trace(SAMPLES / "tokens_multiturn.jsonl")
    cfg = SimConfig(request_rate=1000.0)
    assert client_mode(trace, cfg) == "open"
    _, server, _ = _run(trace, cfg, ttft_s=1.0)
    assert server.max_in_flight > 1


# --- bench_multiturn ----------------------------------------------------------------------------------


def _bm(**kw) -> Trace:
    base = dict(num_clients=4, num_rounds=3, request_length=64, output_length=16, request_rate=8.0)
    base.update(kw)
    return generate_bench_multiturn(BenchMultiturnArgs(**base))


def test_bench_multiturn_first_sends_follow_the_scripts_random_stream():
    # A slow server: nothing returns while the four round-0 requests are sent, so the send order and
    # times are fully determined by the script's draws: randrange(len) pop, then expovariate(rate).
    trace = _bm(max_parallel=128)
    _, server, _ = _run(trace, SimConfig(), ttft_s=100.0)
    rng = trace.closed_loop.sender_rng()
    ready, t, want = [0, 1, 2, 3], 0.0, []
    for _ in range(4):
        c = ready.pop(rng.randrange(len(ready)))
        want.append((t, f"client-{c}-round-0"))
        t += rng.expovariate(8.0)
    got = server.submitted[:4]
    assert [rid for _, rid in got] == [rid for _, rid in want]
    assert np.allclose([x for x, _ in got], [x for x, _ in want], rtol=0, atol=1e-9)


def test_bench_multiturn_fifo_and_uniform():
    trace = _bm(ready_queue_policy="fifo", distribution="uniform")
    _, server, _ = _run(trace, SimConfig(), ttft_s=100.0)
    assert [rid for _, rid in server.submitted[:4]] == [f"client-{c}-round-0" for c in range(4)]
    rng = random.Random(1)
    times = [0.0]
    for _ in range(3):
        times.append(times[-1] + rng.uniform(0, 2 / 8.0))
    assert np.allclose([t for t, _ in server.submitted[:4]], times, rtol=0, atol=1e-9)


def test_bench_multiturn_max_parallel_and_next_round_after_response():
    trace = _bm(max_parallel=2, request_rate=100.0)
    reqs, server, stats = _run(trace, SimConfig(), ttft_s=0.5)
    assert server.max_in_flight == 2
    assert stats.submitted == len(trace) == 12 and stats.heartbeats == 0
    by_rid = {r.rid: r for r in reqs}
    for r in reqs:
        if r.round:
            prev = by_rid[f"client-{r.session.split('-')[1]}-round-{r.round - 1}"]
            assert r.arrival_s >= prev.finish_s


def test_bench_multiturn_round_barrier_heartbeat_and_sleep():
    trace = _bm(enable_round_barrier=True)
    reqs, server, stats = _run(trace, SimConfig())
    assert stats.heartbeats == 3 and stats.submitted == 15
    real = [r for r in reqs if not r.heartbeat]
    for rnd in range(3):
        hb = next(r for r in reqs if r.heartbeat and r.round == rnd)
        last = max(r.finish_s for r in real if r.round == rnd)
        assert hb.arrival_s == pytest.approx(last)  # sent synchronously by the response handler
        if rnd < 2:
            nxt = min(r.arrival_s for r in real if r.round == rnd + 1)
            assert nxt >= hb.finish_s + 10.0 - 1e-9  # the 10 s barrier sleep
    assert stats.end_s == pytest.approx(server.submitted[-1][0] + 0.1 + 99 * 0.01)


def test_bench_multiturn_is_deterministic():
    trace = _bm(num_clients=6, enable_round_barrier=False, max_parallel=3)
    a, _, _ = _run(trace, SimConfig())
    b, _, _ = _run(trace, SimConfig())
    assert [(r.rid, r.arrival_s) for r in a] == [(r.rid, r.arrival_s) for r in b]
    c, _, _ = _run(_bm(num_clients=6, max_parallel=3, seed=2), SimConfig())
    assert [r.arrival_s for r in c] != [r.arrival_s for r in a]


def test_bench_multiturn_request_rate_override_and_offered_rate():
    trace = _bm()
    assert offered_request_rate(trace, SimConfig()) == 8.0
    assert offered_request_rate(trace, SimConfig(request_rate=2.0)) == 2.0
    _, fast, _ = _run(trace, SimConfig(), ttft_s=100.0)
    _, slow, _ = _run(trace, SimConfig(request_rate=0.5), ttft_s=100.0)
    assert slow.submitted[3][0] > fast.submitted[3][0]


def test_bench_multiturn_aborted_request_does_not_hang_the_barrier():
    trace = _bm(enable_round_barrier=True)
    reqs, _, stats = _run(trace, SimConfig(), abort=frozenset({"client-1-round-0"}))
    assert stats.completed == stats.submitted == len(trace)
    assert next(r for r in reqs if r.rid == "client-1-round-0").aborted


def test_bench_multiturn_truncated_trace_still_ends():
    trace = _bm(enable_round_barrier=True).head(7)  # round 0 (4), heartbeat-0, two of round 1
    reqs, _, stats = _run(trace, SimConfig())
    assert stats.completed == 7 and all(not math.isnan(r.finish_s) for r in reqs)


def test_stuck_server_leaves_the_client_process_pending():
    class BlackHole:
        page_size = 16

        def __init__(self, env):
            self.env = env

        def submit(self, req):
            return self.env.event()

    env = simpy.Environment()
    trace = _trace([0.0, 1.0])
    proc = start_clients(env, BlackHole(env), trace, SimConfig())
    env.run()
    assert not proc.triggered
