"""The scheduler loop moves the clock without a simpy event when no event is due before a step
ends (``ServerCore._clock_skips``): the outcome must equal that of yielding every timeout."""

from __future__ import annotations

import numpy as np
import pytest
import simpy

from simulator.engine.config import SimConfig
from simulator.engine.request import SimRequest
from simulator.engine.server import ServerModel, ServerPools

POOLS = ServerPools(
    page_size=16,
    full_tokens=20_000,
    swa_tokens=4_000,
    window=128,
    max_running_requests=8,
    chunked_prefill_size=512,
)


class LinearCost:
    """A tiny cost model with float prices (enough to order events)."""

    def prefill_time(self, extend, prefix):
        return 1e-3 + 2e-6 * float(np.sum(extend)) + 1e-7 * float(np.sum(prefix))

    def decode_time(self, bs, full_ctx, swa_ctx):
        return 2e-3 + 1e-7 * full_ctx + 1e-6 * swa_ctx

    def decode_terms(self, bs):
        return (2e-3, 1e-7, 0.0, 1e-6, 0.0, 0.0, 0.0)


def _serve(cfg: SimConfig, skips: bool, monkeypatch, closed: bool, seed: int = 5):
    """Serve a seeded mix of sessions (open-loop arrivals, or each turn after the last one's
    finish); ``skips`` False forces a timeout for every wait. Returns what the run decided."""
    calls = {"skipped": 0, "train_skipped": 0}
    with monkeypatch.context() as m:
        if not skips:
            m.setattr(ServerModel, "_clock_skips", lambda self, dur: False)
        else:
            real = ServerModel._clock_skips
            real_train = ServerModel._run_chunk_train

            def counting(self, dur):
                moved = real(self, dur)
                calls["skipped"] += moved
                return moved

            def train(self, req):  # the chunk train's own wait (fast_forward.py) is skipped too
                before = calls["skipped"]
                yield from real_train(self, req)
                calls["train_skipped"] += calls["skipped"] - before

            m.setattr(ServerModel, "_clock_skips", counting)
            m.setattr(ServerModel, "_run_chunk_train", train)
        rng = np.random.default_rng(seed)
        env = simpy.Environment()
        server = ServerModel(env, cfg, POOLS, LinearCost())
        done: list[SimRequest] = []

        def client(c: int):
            prompt = list(rng.integers(0, 50, 300))  # sessions share short prefixes
            yield env.timeout(float(rng.exponential(0.3)))
            for t in range(4):
                out = int(rng.integers(1, 300))
                tokens = np.asarray(prompt + list(rng.integers(0, 50, out)), dtype=np.int64)
                pages = tokens[: len(tokens) // 16 * 16].reshape(-1, 16) @ np.arange(1, 17)
                req = SimRequest(f"c{c}t{t}", pages, len(prompt), out, session=str(c), round=t)
                ev = server.submit(req)
                if closed:
                    yield ev
                done.append(req)
                prompt = prompt + list(tokens[len(prompt) :]) + list(rng.integers(0, 50, 100))
                yield env.timeout(float(rng.exponential(0.4)))

        for c in range(12):
            env.process(client(c))
        env.run()
    rows = sorted((r.rid, r.arrival_s, r.first_token_s, r.finish_s, r.cached_tokens) for r in done)
    return rows, server.counters(), env.now, calls["skipped"], calls["train_skipped"]


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("fast_forward", [True, False])
@pytest.mark.parametrize("closed", [False, True])
def test_skipped_timeouts_change_nothing(monkeypatch, overlap, fast_forward, closed):
    cfg = SimConfig(disable_overlap_schedule=not overlap, fast_forward=fast_forward)
    with_events = _serve(cfg, False, monkeypatch, closed)
    skipped = _serve(cfg, True, monkeypatch, closed)
    assert skipped[3] > 0  # the scenario does move the clock without events
    if fast_forward and not overlap:  # trains run in the plain loop, with fast-forward on
        assert skipped[4] > 0  # a train of prefill chunks among them
    assert skipped[:3] == with_events[:3]


def _server(env: simpy.Environment) -> ServerModel:
    return ServerModel(env, SimConfig(), POOLS, LinearCost())


def test_skip_only_before_the_next_event():
    env = simpy.Environment()
    server = _server(env)
    env.timeout(5.0)
    env.step()  # the server's first pass: idle, it waits for an arrival
    assert server._clock_skips(3.0) and env.now == 3.0
    assert not server._clock_skips(2.0)  # an event is due at 5.0 already: it goes first
    assert env.now == 3.0
    assert server._clock_skips(1.5) and env.now == 4.5


def test_no_skip_on_a_realtime_environment():
    env = simpy.RealtimeEnvironment(strict=False)
    server = _server(env)
    assert not server._clock_skips(1.0)
    assert env.now == 0
