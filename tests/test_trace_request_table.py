"""Request tables as numpy columns (issue 14): the Mooncake and Azure readers build no DataFrame,
the frame built on first read is the one they built before, and the trace hash computed without
pandas (``traces/row_hash.py``) is pandas' own, bit for bit."""

from __future__ import annotations

import pickle
from dataclasses import FrozenInstanceError
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simulator.provenance import trace_hash
from traces import load_trace
from traces.request_table import RequestTable
from traces.row_hash import combine_rows, hash_int_labels, hash_numbers
from traces.schema import Trace, make_requests

DATA = Path(__file__).resolve().parents[1] / "traces" / "data"
TRACES = [DATA / "mooncake_arxiv_head800.jsonl", DATA / "azure_conv_head1000.csv"]


def _pandas_rows(frame: pd.DataFrame) -> np.ndarray:
    return pd.util.hash_pandas_object(frame, index=False).to_numpy()


@pytest.mark.parametrize("n", [1, 7, 2000])
def test_row_hash_is_pandas_hash(n: int) -> None:
    """Random labels (negative, zero, 19 digits), NaN / -0.0 arrivals, missing sessions."""
    rng = np.random.default_rng(n)
    rid = rng.integers(-(10**18), 10**18, n)
    rid[: min(n, 3)] = [0, -7, 10**18 + 5][: min(n, 3)]
    arrival = rng.random(n)
    arrival[rng.random(n) < 0.2] = np.nan
    arrival[rng.random(n) < 0.2] = -0.0
    cols = dict(
        turn=rng.integers(0, 9, n), parent=rng.integers(-1, 5, n), session_id=rid[rng.integers(0, n, n)]
    )
    for session in (cols["session_id"], None):
        table = RequestTable(
            rid,
            arrival,
            rng.integers(1, 10**6, n),
            rng.integers(1, 10**4, n),
            session_id=session,
            turn=cols["turn"],
            parent=cols["parent"],
        )
        assert np.array_equal(table.row_hashes(), _pandas_rows(table.to_frame()))


def test_row_hash_pieces() -> None:
    floats = np.array([1.5, -0.0, 0.0, np.nan, -np.nan])
    assert np.array_equal(hash_numbers(floats), pd.util.hash_array(floats))
    ints = np.array([0, -1, 2**40], dtype=np.int64)
    assert np.array_equal(hash_numbers(ints), pd.util.hash_array(ints))
    labels = np.array([5, 12345678, 1234567890123456789])
    want = pd.util.hash_array(np.array([str(v) for v in labels], dtype=object), categorize=False)
    assert np.array_equal(hash_int_labels(labels), want)
    assert len(combine_rows([], 3)) == 3


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_readers_build_no_frame_and_the_same_one(path: Path) -> None:
    trace = load_trace(path)
    assert trace._frame is None and trace._table is not None  # read into numpy columns
    frame = trace.requests  # built now, from the same make_requests call as before
    same = Trace(frame, trace.content, trace.source)
    assert trace_hash(trace) == trace_hash(same)
    assert np.array_equal(trace.row_hashes()[1], _pandas_rows(frame))
    for name in ("arrival_s", "turn", "parent", "prompt_len", "output_len"):
        assert np.array_equal(trace.column(name), same.column(name), equal_nan=True)
        assert trace.column(name).dtype == same.column(name).dtype
    for name in ("rid", "session_id"):
        assert trace.labels(name) == same.labels(name)
    head = trace.head(17)
    assert head._frame is None
    pd.testing.assert_frame_equal(head.requests, same.head(17).requests)
    assert trace_hash(head) == trace_hash(same.head(17))


def test_mooncake_sessions_are_root_rids() -> None:
    """The session label of a continuation is its first turn's rid (as before, via Arrow's take)."""
    frame = load_trace(TRACES[0]).requests
    parent = frame["parent"].to_numpy()
    rows = np.flatnonzero(parent >= 0)
    assert len(rows) > 0
    for i in rows[:50]:
        root = i
        while parent[root] >= 0:
            root = parent[root]
        assert frame["session_id"].iloc[i] == frame["rid"].iloc[root]


def test_trace_stays_immutable_and_pickles() -> None:
    trace = load_trace(TRACES[1])
    with pytest.raises(FrozenInstanceError):
        trace.source = "x"  # type: ignore[misc]
    again = pickle.loads(pickle.dumps(trace))
    assert len(again) == len(trace) and trace_hash(again) == trace_hash(trace)
    frame = make_requests(np.arange(3), np.zeros(3), np.ones(3), np.ones(3))
    assert len(Trace(frame, trace.content.take(np.arange(3)))) == 3
