"""What-if trace transforms: "2x the rate", "twice the sessions" (simulator/planner/what_if.py)."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.cli.common import DEFAULT_TRACE
from simulator.errors import FlagError
from simulator.planner.what_if import (
    WhatIf,
    apply_what_if,
    multiply_sessions,
    parse_what_if,
    scale_rate,
    session_roots,
)
from traces import load_trace
from traces.schema import TokenContent, Trace, check_trace, make_requests


@pytest.fixture(scope="module")
def mooncake():
    return load_trace(DEFAULT_TRACE).head(200)


def _multiturn() -> Trace:
    """Two sessions of two turns sharing a 4-token system prompt; then a single-turn request."""
    seqs = [
        [1, 2, 3, 4, 10, 11],  # s0 turn 0
        [1, 2, 3, 4, 20, 21],  # s1 turn 0
        [1, 2, 3, 4, 10, 11, 12, 13],  # s0 turn 1
        [1, 2, 3, 4, 20, 21, 22, 23],  # s1 turn 1
        [7, 8],  # s2
    ]
    offsets = np.cumsum([0] + [len(s) for s in seqs])
    req = make_requests(
        ["a0", "b0", "a1", "b1", "c0"],
        np.array([0.0, 1.0, 2.0, 3.0, 4.0]),
        np.array([4, 4, 6, 6, 1]),
        np.array([2, 2, 2, 2, 1]),
        session_id=["a", "b", "a", "b", "c"],
        turn=np.array([0, 0, 1, 1, 0]),
        parent=np.array([-1, -1, 0, 1, -1]),
    )
    return Trace(req, TokenContent(offsets.astype(np.int64), np.concatenate(seqs).astype(np.int64)))


def test_parse_what_if():
    assert parse_what_if("rate=2") == WhatIf("rate", 2.0)
    assert parse_what_if("sessions=1.5").text == "sessions=1.5"
    for bad in ("rate", "speed=2", "rate=0", "sessions=0.5", "rate=x", "rate=inf"):
        with pytest.raises(FlagError):
            parse_what_if(bad)


def test_scale_rate_compresses_arrivals(mooncake):
    fast = scale_rate(mooncake, 2.0)
    a, b = mooncake.requests["arrival_s"].to_numpy(), fast.requests["arrival_s"].to_numpy()
    assert np.allclose(b - b[0], (a - a[0]) / 2)
    assert fast.content is mooncake.content and len(fast) == len(mooncake)
    assert mooncake.requests["arrival_s"].to_numpy() is not b  # the input is unchanged
    check_trace(fast)


def test_multiply_sessions_doubles_and_keeps_order(mooncake):
    double = multiply_sessions(mooncake, 2.0, seed=3)
    check_trace(double)
    req = double.requests
    assert len(double) == 2 * len(mooncake)
    assert req["rid"].is_unique
    arrival = req["arrival_s"].to_numpy()
    assert np.all(np.diff(arrival) >= 0)
    lo, hi = mooncake.requests["arrival_s"].min(), mooncake.requests["arrival_s"].max()
    assert arrival.min() >= lo and arrival.max() <= hi  # copies stay inside the time span
    # deterministic by seed, different across seeds
    again = multiply_sessions(mooncake, 2.0, seed=3)
    assert again.requests.equals(req)
    assert not multiply_sessions(mooncake, 2.0, seed=4).requests["arrival_s"].equals(req["arrival_s"])


def test_copies_share_what_sessions_shared_and_nothing_else(mooncake):
    double = multiply_sessions(mooncake, 2.0, seed=0)
    orig_ids = mooncake.content.chain_ids
    counts = {}
    for i in range(len(mooncake)):
        for c in set(orig_ids[mooncake.content.offsets[i] : mooncake.content.offsets[i + 1]]):
            counts[c] = counts.get(c, 0) + 1
    shared_blocks = sum(n > 1 for n in counts.values())
    assert shared_blocks > 0  # the sample has common prefixes
    # the doubled trace: shared blocks stay shared, each session-own block appears twice as a new id
    new_ids = np.unique(double.content.chain_ids)
    assert len(new_ids) == shared_blocks + 2 * (len(counts) - shared_blocks)


def test_multiturn_copies_keep_turn_links_and_the_system_prompt():
    tr = _multiturn()
    double = multiply_sessions(tr, 2.0, seed=1)
    check_trace(double)
    req = double.requests
    assert len(double) == 10 and req["session_id"].nunique() == 6
    roots = session_roots(req["parent"].to_numpy())
    for i, p in enumerate(req["parent"].to_numpy()):
        if p >= 0:
            assert req["session_id"].iloc[p] == req["session_id"].iloc[i]
            assert req["turn"].iloc[p] + 1 == req["turn"].iloc[i]
    assert len(np.unique(roots)) == 6
    tokens, offsets = double.content.tokens, double.content.offsets
    rows = {req["rid"].iloc[i]: tokens[offsets[i] : offsets[i + 1]].tolist() for i in range(len(req))}
    assert rows["a0~1"][:4] == [1, 2, 3, 4]  # the shared system prompt is kept
    assert rows["a0~1"][4:] != [10, 11]  # the conversation is fresh
    assert rows["a1~1"][:6] == rows["a0~1"]  # ... and a copy's turns still extend each other
    assert rows["c0~1"] != [7, 8]


def test_fractional_sessions_copy_a_seeded_share(mooncake):
    more = multiply_sessions(mooncake, 1.5, seed=0)
    assert len(more) == len(mooncake) + 100
    check_trace(more)


def test_closed_loop_traces_are_refused_for_sessions():
    from pathlib import Path

    tr = load_trace(Path(DEFAULT_TRACE).parent / "tokens_multiturn.jsonl")
    with pytest.raises(FlagError, match="closed loop"):
        apply_what_if(tr, WhatIf("sessions", 2.0))
    assert len(apply_what_if(tr, WhatIf("rate", 2.0))) == len(tr)
