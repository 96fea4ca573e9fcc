"""The requests frame's columns are recorded as requests finish (``engine/request_rows.py``).

On the 1,000,000-request trace of docs/benchmarks.md the recorder kept every request object to
the end of the run and built ~190 MiB of columns from them on top of the serving memory: the
run's peak. These tests check that the columns recorded at each finish are the columns the
objects give (the old way of building them), also when asked in the middle of a run, and that
the recorder lets go of every finished request.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
import simpy
from test_engine_server import LinearCost
from test_long_queue import POOLS, _requests, _serve

from simulator.engine import request_rows
from simulator.engine.config import SimConfig
from simulator.engine.metrics import Recorder
from simulator.engine.request import SimRequest
from simulator.engine.server import ServerModel
from simulator.engine.server_state import ServerPools
from simulator.engine.waiting_queue import WaitingQueue


def columns_from_objects(reqs: list[SimRequest]) -> dict:
    """The requests columns as the recorder built them before: read from the objects."""
    arrival = np.array([r.arrival_s for r in reqs], dtype=np.float64)
    first = np.array([r.first_token_s for r in reqs], dtype=np.float64)
    finish = np.array([r.finish_s for r in reqs], dtype=np.float64)
    return {
        "index": np.array([r.index for r in reqs], dtype=np.int64),
        "rid": [r.rid for r in reqs],
        "session": [r.session for r in reqs],
        "round": np.array([r.round for r in reqs], dtype=np.int64),
        "heartbeat": np.array([r.heartbeat for r in reqs], dtype=bool),
        "arrival_s": arrival,
        "first_token_s": first,
        "finish_s": finish,
        "ttft_s": first - arrival,
        "latency_s": finish - arrival,
        "prompt_len": np.array([r.prompt_len for r in reqs], dtype=np.int64),
        "cached_tokens": np.array([r.cached_tokens for r in reqs], dtype=np.int64),
        "output_len": np.array([r.output_len for r in reqs], dtype=np.int64),
        "retractions": np.array([r.retractions for r in reqs], dtype=np.int64),
        "aborted": np.array([r.aborted for r in reqs], dtype=bool),
        "abort_reason": [r.abort_reason for r in reqs],
        "rejected": np.array([r.rejected for r in reqs], dtype=bool),
        "truncated": np.array([r.truncated for r in reqs], dtype=bool),
    }


def assert_same_columns(got: dict, want: dict) -> None:
    assert list(got) == list(want)
    for name, col in want.items():
        if isinstance(col, list):
            assert got[name] == col, name
        else:
            assert got[name].dtype == col.dtype, name
            np.testing.assert_array_equal(got[name], col, err_msg=name)  # NaN equals NaN


def _varied(n: int, seed: int) -> list[SimRequest]:
    """:func:`test_long_queue._requests` with sessions, rounds, indexes, heartbeats and one
    prompt too long for the pools (rejected on arrival)."""
    reqs = _requests(n, seed=seed)
    for i, r in enumerate(reqs):
        r.index, r.round, r.heartbeat = 1000 + i, i % 3, i % 17 == 0
        r.session = None if i % 5 == 0 else f"s{i % 7}"
    reqs[n // 2].prompt_len = 10 * POOLS.full_tokens
    return reqs


CONFIGS = [
    pytest.param(dict(schedule_policy="fcfs"), id="fcfs"),
    pytest.param(dict(schedule_policy="lpm", disable_overlap_schedule=False), id="lpm-overlap"),
]


@pytest.mark.parametrize("knobs", CONFIGS)
def test_recorded_columns_equal_the_columns_of_the_objects(knobs, monkeypatch):
    """Packed every 7 finishes (and grown from 4 rows) or never before the end: the columns
    equal those read from the objects after the run, aborted and rejected requests included."""
    monkeypatch.setattr(request_rows, "_FIRST_CAPACITY", 4)
    for pack in (7, 1 << 62):
        monkeypatch.setattr(request_rows, "_PACK", pack)
        reqs = _varied(500, seed=3)
        rec = Recorder()
        _serve(reqs, WaitingQueue(), SimConfig(**knobs), observer=rec)
        assert rec._reqs.objects == reqs  # first-seen order is arrival order here
        cols = rec._request_columns()
        assert_same_columns(cols, columns_from_objects(reqs))
        assert (cols["rejected"] | cols["aborted"]).sum() == 1 and cols["abort_reason"][250]
        assert cols["cached_tokens"].any()


def test_aborted_requests_keep_their_reasons(monkeypatch):
    """Pools too small for some prompts (rejected on arrival): their reasons land in their rows."""
    monkeypatch.setattr(request_rows, "_PACK", 5)
    pools = ServerPools(
        page_size=16,
        full_tokens=600,
        swa_tokens=300,
        window=64,
        max_running_requests=4,
        chunked_prefill_size=128,
    )
    env = simpy.Environment()
    rec = Recorder()
    srv = ServerModel(env, SimConfig(), pools, LinearCost(), observer=rec)
    reqs = [
        SimRequest(f"q{i}", np.arange(i * 100, i * 100 + 60), 16 * (2 + 15 * (i % 4)), 8) for i in range(30)
    ]
    for r in reqs:
        srv.submit(r)
    env.run()
    want = columns_from_objects(reqs)
    assert any(want["abort_reason"]) and not all(want["abort_reason"])
    assert_same_columns(rec._request_columns(), want)


def test_columns_in_the_middle_of_a_run(monkeypatch):
    """Asked while requests wait or run, the columns are those of the objects at that moment
    (unfinished rows read from the objects); columns handed out are not changed afterwards."""
    monkeypatch.setattr(request_rows, "_PACK", 3)
    reqs = _varied(300, seed=4)
    taken: list[tuple[dict, dict]] = []

    class Asking(Recorder):
        def on_finish(self, req):
            super().on_finish(req)
            if self._finished % 40 == 1:
                seen = self._reqs.objects
                taken.append((self._request_columns(), columns_from_objects(seen)))

    rec = Asking()
    _serve(reqs, WaitingQueue(), SimConfig(), observer=rec)
    assert len(taken) > 3
    for got, want in taken:
        assert_same_columns(got, want)
        assert np.isnan(got["finish_s"]).any()  # some were unfinished then
    assert_same_columns(rec._request_columns(), columns_from_objects(reqs))


def test_the_recorder_lets_go_of_finished_requests():
    """Without ``keep_requests`` (every run but HiCache's) the recorder holds no finished
    request: once the run's own references go, no request object is left, and the columns
    are complete. Before, the recorder kept every request to the end of the run."""
    gc.collect()
    before = sum(isinstance(o, SimRequest) for o in gc.get_objects())
    rec = Recorder(keep_requests=False)
    reqs = _varied(200, seed=5)
    _serve(reqs, WaitingQueue(), SimConfig(), observer=rec)
    want = columns_from_objects(reqs)
    del reqs
    gc.collect()
    assert sum(isinstance(o, SimRequest) for o in gc.get_objects()) == before
    assert rec._reqs.objects is None and not rec._reqs._live
    assert_same_columns(rec._request_columns(), want)


def test_finished_requests_leave_while_the_run_goes_on():
    """Each request is referenced by the recorder only until it finishes: at every finish the
    recorder's live set holds exactly the requests seen and not finished."""
    unfinished: set[int] = set()

    class Checking(Recorder):
        def on_arrival(self, req):
            super().on_arrival(req)
            unfinished.add(id(req))

        def on_finish(self, req):
            super().on_finish(req)
            unfinished.discard(id(req))
            assert set(map(id, self._reqs._live)) == unfinished

    rec = Checking(keep_requests=False)
    _serve(_varied(150, seed=6), WaitingQueue(), SimConfig(), observer=rec)
    assert not unfinished and len(rec._reqs) == 150


def test_from_config_keeps_objects_only_for_hicache():
    assert Recorder.from_config(SimConfig())._reqs.objects is None
    assert Recorder()._reqs.objects == []


def test_a_request_seen_only_at_its_finish_gets_a_row():
    rec = Recorder(keep_requests=False)
    r = SimRequest("x", np.zeros(0, np.int64), 10, 2, arrival_s=1.0)
    r.first_token_s, r.finish_s = 2.0, 3.0
    rec.on_finish(r)
    cols = rec._request_columns()
    assert cols["rid"] == ["x"] and cols["latency_s"].tolist() == [2.0]
    empty = Recorder()._request_columns()
    assert len(empty["arrival_s"]) == 0 and empty["arrival_s"].dtype == np.float64


@pytest.mark.parametrize("rate", [None, 5.0], ids=["sequential", "open-loop"])
def test_a_finished_request_is_freed_while_the_run_goes_on(tmp_path, rate):
    """A run holds a request only until it finished: when the run ends (before ``simulate``
    returns) only the requests of the server's last batch are left (the recorder, the
    clients and ``simulate`` let go of the others). Before, ``simulate`` kept all of them."""
    from test_engine_bad_input import _tokens_trace

    from simulator.engine.simulate import simulate
    from traces import load_trace

    n = 12
    trace = load_trace(_tokens_trace(tmp_path, [100 + 50 * (i % 5) for i in range(n)]))
    cfg = SimConfig(model="gpt-oss-120b", gpu="H200", tp=8, page_size=64, request_rate=rate)
    alive_at_end: list[set[str]] = []
    # requests left alive by earlier tests in this process are not this run's: held here so
    # that their ids cannot be reused by this run's requests, and left out of the count
    gc.collect()
    earlier = [o for o in gc.get_objects() if isinstance(o, SimRequest)]
    earlier_ids = {id(o) for o in earlier}

    class Counting(Recorder):
        def on_end(self, t, counters):
            super().on_end(t, counters)
            gc.collect()
            alive_at_end.append(
                {o.rid for o in gc.get_objects() if isinstance(o, SimRequest) and id(o) not in earlier_ids}
            )

    rec = Counting.from_config(cfg)
    simulate(trace, cfg, rec)
    assert len(alive_at_end[0]) <= 3 and "r0" not in alive_at_end[0]
    assert rec.summary()["requests"] == n


def test_prefill_chunks_are_joined_only_for_the_frame(monkeypatch):
    """The summary does not join the packed prefill batches (about 110 MiB on the
    1,000,000-request trace, on top of the run's memory); the frame joins them when built and
    equals the rows as recorded."""
    from simulator.engine import metrics

    monkeypatch.setattr(metrics, "_PREFILL_PACK", 5)
    rec = Recorder()
    _serve(_varied(200, seed=7), WaitingQueue(), SimConfig(), observer=rec)
    cols = rec.columns()
    rec.report_summary(columns=cols)
    assert len(cols.prefill_chunks) > 3 and "prefill_rows" not in vars(cols)
    frame = rec.frames()["prefill_batches"]
    rows = np.concatenate(cols.prefill_chunks)
    assert len(frame) == len(rows) == rec.summary()["prefill_batches"]
    np.testing.assert_array_equal(frame["t_end_s"].to_numpy(), rows[:, 1])
    full = rows[:, metrics._PREFILL_NAMES.index("full_token")]
    np.testing.assert_array_equal(frame["full_token_usage"].to_numpy(), full / POOLS.full_tokens)
