"""Parquet round trip of every content kind and of the closed-loop spec."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from traces import (
    BenchMultiturnArgs,
    TraceFormatError,
    generate_bench_multiturn,
    load_trace,
    read_parquet,
    write_parquet,
)

SAMPLES = Path(__file__).resolve().parents[1] / "traces" / "data"


def _same(a, b) -> None:
    pd.testing.assert_frame_equal(a.requests, b.requests)
    assert a.content.kind == b.content.kind
    for name in ("offsets", "chain_ids", "block_lens", "tokens"):
        if hasattr(a.content, name):
            assert np.array_equal(getattr(a.content, name), getattr(b.content, name))
    assert a.closed_loop == b.closed_loop and a.source == b.source


@pytest.mark.parametrize(
    "rel",
    [
        "mooncake_arxiv_head800.jsonl",
        "ragpulse",
        "tokens_multiturn.jsonl",
        "dynamo_pi_request_trace.jsonl.gz",
        "azure_conv_head1000.csv",
    ],
)
def test_round_trip_samples(tmp_path, rel):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = load_trace(SAMPLES / rel)
    out = write_parquet(t, tmp_path / "t.parquet")
    back = load_trace(out)
    _same(t, back)
    assert np.array_equal(t.sequence_pages(16)[1], back.sequence_pages(16)[1])
    assert [p.name for p in tmp_path.iterdir()] == ["t.parquet"]  # no temporary left behind


def test_round_trip_closed_loop(tmp_path):
    t = generate_bench_multiturn(
        BenchMultiturnArgs(num_clients=3, min_rounds=1, max_rounds=3, enable_round_barrier=True)
    )
    back = read_parquet(write_parquet(t, tmp_path / "b.parquet"))
    _same(t, back)
    assert back.closed_loop.sender_rng().random() == t.closed_loop.sender_rng().random()


def test_foreign_parquet_is_refused(tmp_path):
    p = tmp_path / "x.parquet"
    pd.DataFrame({"a": [1]}).to_parquet(p)
    with pytest.raises(TraceFormatError, match="not a kvplan trace"):
        load_trace(p)
