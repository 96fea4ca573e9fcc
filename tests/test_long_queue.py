"""A long waiting queue costs the scheduler per pass only what a pass admits or reads.

An open loop that outruns the server queues most of a big trace (about 950,000 of the
1,000,000-request Mooncake trace in docs/benchmarks.md); rebuilding the queue after every
prefill batch made that run quadratic. These tests count the queued requests each scheduler
pass touches (not a timing), and check that the head-popping queue
(``simulator.engine.waiting_queue``) gives the same runs as the straightforward list that
SGLang's scheduler keeps (``waiting_queue = [x for x in waiting_queue if x not in can_run]``).
"""

from __future__ import annotations

import numpy as np
import pytest
import simpy
from test_engine_server import LinearCost

from simulator.engine import metrics
from simulator.engine.config import SimConfig
from simulator.engine.metrics import Recorder
from simulator.engine.request import SimRequest
from simulator.engine.server import ServerModel, ServerPools
from simulator.engine.server_state import LPM_FALLBACK_QUEUE_LEN
from simulator.engine.waiting_queue import WaitingQueue

P = 16
MAX_RUNNING = 8
POOLS = ServerPools(
    page_size=P,
    full_tokens=6_000,
    swa_tokens=3_000,
    window=128,
    max_running_requests=MAX_RUNNING,
    chunked_prefill_size=256,
)


class CountingQueue(WaitingQueue):
    """The waiting queue, counting every request handed out by iteration (slices, loops, zip,
    list(), sorted() all go through ``__iter__``/``__reversed__``)."""

    __slots__ = ()
    touched = 0

    def __iter__(self):
        for r in WaitingQueue.__iter__(self):
            CountingQueue.touched += 1
            yield r

    def __reversed__(self):
        for r in WaitingQueue.__reversed__(self):
            CountingQueue.touched += 1
            yield r


class ListQueue(list):
    """The straightforward queue: a list rebuilt after each admission, as SGLang's."""

    def popleft(self):
        return self.pop(0)

    def remove_admitted(self, admitted) -> None:
        taken = set(map(id, admitted))
        self[:] = [r for r in self if id(r) not in taken]


def _requests(n: int, seed: int = 0) -> list[SimRequest]:
    """``n`` requests sharing one of 6 system prompts (2 to 9 pages), each with its own tail;
    arrivals at 2,000/s, far faster than the server serves them."""
    rng = np.random.default_rng(seed)
    systems = [np.arange(k * 1000, k * 1000 + int(rng.integers(2, 10))) for k in range(6)]
    out, t = [], 0.0
    for i in range(n):
        own = int(rng.integers(1, 12))
        output = int(rng.integers(1, 40))
        prompt = (len(systems[i % 6]) + own) * P + int(rng.integers(0, P))
        pages = np.concatenate([systems[i % 6], 10**6 + 100 * i + np.arange(own + output // P + 2)])
        n_pages = (prompt + output) // P
        out.append(SimRequest(f"r{i}", pages[:n_pages].astype(np.int64), prompt, output, arrival_s=t))
        t += float(rng.exponential(1 / 2000))
    return out


def _serve(reqs: list[SimRequest], queue, cfg: SimConfig, on_pass=None, observer=None) -> ServerModel:
    env = simpy.Environment()
    srv = ServerModel(env, cfg, POOLS, LinearCost(), observer=observer)
    srv.waiting = queue
    srv.on_pass = None if on_pass is None else (lambda: on_pass(srv))

    def client():
        for r in reqs:
            if r.arrival_s > env.now:
                yield env.timeout(r.arrival_s - env.now)
            srv.submit(r)

    env.process(client())
    env.run()
    return srv


CONFIGS = [
    pytest.param(dict(schedule_policy="fcfs"), id="fcfs"),
    pytest.param(dict(schedule_policy="lpm"), id="lpm"),
    pytest.param(dict(schedule_policy="fcfs", disable_overlap_schedule=False), id="fcfs-overlap"),
    pytest.param(dict(schedule_policy="lpm", disable_overlap_schedule=False), id="lpm-overlap"),
]


@pytest.mark.parametrize("knobs", CONFIGS)
def test_a_pass_touches_a_bounded_part_of_a_long_queue(knobs):
    """2,000 requests queue up (over 1,000 at once); a pass may read the head (LPM and the
    prefix refresh read at most 128, a few times each) and what it admits, never the whole
    queue: SGLang's rebuild of the queue after each prefill batch would touch every request."""
    cfg = SimConfig(**knobs)
    n = 2_000
    per_pass: list[tuple[int, int]] = []  # (requests touched, queue length) per pass
    last = [0]

    def on_pass(srv: ServerModel) -> None:
        per_pass.append((CountingQueue.touched - last[0], len(srv.waiting)))
        last[0] = CountingQueue.touched

    CountingQueue.touched = 0
    srv = _serve(_requests(n), CountingQueue(), cfg, on_pass)
    assert srv.idle and isinstance(srv.waiting, CountingQueue)
    assert max(q for _, q in per_pass) > 1_000  # the queue did get long
    bound = 4 * LPM_FALLBACK_QUEUE_LEN + 4 * (MAX_RUNNING + 1)
    assert max(t for t, _ in per_pass) <= bound
    assert CountingQueue.touched < 6 * n + 2 * LPM_FALLBACK_QUEUE_LEN * len(per_pass) // 8


@pytest.mark.parametrize("knobs", CONFIGS)
def test_head_popping_queue_gives_the_runs_of_a_rebuilt_list(knobs):
    """Every request's times, cached tokens and retractions are equal with either queue."""
    cfg = SimConfig(**knobs)
    runs = []
    for queue in (WaitingQueue(), ListQueue()):
        reqs = _requests(1_200, seed=1)
        srv = _serve(reqs, queue, cfg)
        runs.append([(r.first_token_s, r.finish_s, r.cached_tokens, r.retractions, r.aborted) for r in reqs])
        assert srv.idle
    assert runs[0] == runs[1]
    assert len({r[2] for r in runs[0]}) > 3  # the cache served prefixes of several lengths


@pytest.mark.parametrize("n", [0, 1, 2, 5, 200])
def test_waiting_queue_answers_as_a_list(n):
    """Slices (every start/stop, both signs), stable sort, pop at either end, head removal and
    the filtered removal of requests that are not the head."""
    items = [object() for _ in range(n)]
    q = WaitingQueue(items)
    bounds = [None, 0, 1, 2, n // 2, n - 1, n, n + 3, -1, -2, -n, -n - 1]
    for a in bounds:
        for b in bounds:
            assert q[a:b] == items[a:b], (a, b)
    assert q[::2] == items[::2] and q[::-1] == items[::-1]
    keys = {id(x): i % 3 for i, x in enumerate(items)}
    q.sort(key=lambda x: keys[id(x)])
    assert list(q) == sorted(items, key=lambda x: keys[id(x)])
    q = WaitingQueue(items)
    if n >= 3:
        assert q.pop(0) is items[0] and q.pop() is items[-1] and q.pop(-1) is items[-2]
        q = WaitingQueue(items)
    q.remove_admitted(items[:3])
    assert list(q) == items[3:]
    q = WaitingQueue(items)
    q.remove_admitted(items[1::2])  # not the head: filtered out
    assert list(q) == items[0::2]


def test_recorder_packs_stepwise_decode_records_without_changing_the_columns(monkeypatch):
    """While requests wait, every decode step is recorded on its own (no jump); the recorder
    packs them (``Recorder._pack_decode``), so a step does not keep three one-element arrays and
    a tuple alive. Packing every 3 records gives the columns of never packing; jumps (the
    queue drains at the end) stay in order between the packed chunks."""
    cfg = SimConfig(schedule_policy="fcfs")
    columns = []
    for pack in (3, 1 << 62):
        monkeypatch.setattr(metrics, "_DECODE_PACK", pack)
        rec = Recorder()
        _serve(_requests(600, seed=2), WaitingQueue(), cfg, observer=rec)
        assert any(isinstance(c, int) for c in rec._d_chunks)  # some decode jumps too
        if pack == 3:
            assert len(rec._d_const_packed) > 1
            stepwise = sum(1 for c in rec._d_chunks if not isinstance(c, int))
            assert stepwise < rec._n_steps / 2
        columns.append(rec._decode_columns())
    assert columns[0].keys() == columns[1].keys()
    for name, col in columns[0].items():
        assert col.dtype == columns[1][name].dtype, name
        np.testing.assert_array_equal(col, columns[1][name], err_msg=name)


def test_trace_hash_does_not_copy_the_content():
    """``provenance.trace_hash`` runs after a run, on top of its peak: it hashes the content
    arrays in place (a copy of a 1,000,000-request trace's block ids is about 210 MiB), so its
    peak stays below the biggest array (a copy alone would reach it)."""
    import tracemalloc
    from pathlib import Path

    from simulator.provenance import trace_hash
    from traces.load import load_trace

    path = Path(__file__).resolve().parents[2] / "shared" / "traces" / "mooncake" / "synthetic_trace.jsonl"
    if not path.exists():
        pytest.skip(f"{path} not present")
    trace = load_trace(path)
    biggest = max(getattr(trace.content, f).nbytes for f in trace.content.__dataclass_fields__)
    tracemalloc.start()
    try:
        trace_hash(trace)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < biggest
