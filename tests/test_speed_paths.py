"""Fast paths of issue 14 against the plain code they replace: same results, bit for bit."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest

from simulator.engine import bench_summary
from simulator.engine.frames import FRAME_NAMES, LazyFrames
from simulator.radix.node import LRUList, SwaLRUList, TreeNode


def _order(lru: LRUList) -> list[int]:
    return [x.id for x in lru.iter_mru()]


def test_swa_lru_list_matches_the_generic_list() -> None:
    """Random inserts, moves, removals and unlocked walks give the same order in both lists."""
    rng = random.Random(7)
    lists = (LRUList("swa"), SwaLRUList())
    nodes = [[TreeNode(i, np.empty(0, np.int64), 1) for i in range(40)] for _ in lists]
    for _ in range(3000):
        op, i, j = rng.randrange(5), rng.randrange(40), rng.randrange(40)
        lock = rng.randrange(3)
        results = []
        for lru, ns in zip(lists, nodes, strict=True):
            a, b = ns[i], ns[j]
            if op == 0 and not lru.in_list(a):
                lru.insert_mru(a)
            elif op == 1 and lru.in_list(a) and lru.in_list(b) and a is not b:
                lru.move_after(b, a)
            elif op == 2 and lru.in_list(a):
                lru.remove(a)
            elif op == 3 and lru.in_list(b) and not lru.in_list(a):
                lru.insert_after(b, a)
            else:
                a.swa_lock = lock
            x = lru.lru_unlocked()
            results.append((_order(lru), lru.size, None if x is None else x.id))
        assert results[0] == results[1]


def test_per_round_skips_the_sort_only_when_it_is_the_identity() -> None:
    """Rounds already in order take the no-sort path; shuffled ones sort; both match the sort."""
    rng = np.random.default_rng(3)
    n = 500
    usage = rng.random(n)
    usage[rng.random(n) < 0.1] = np.nan
    req = {
        "round": np.array([0, 1, 2, 2]),
        "prompt_len": np.array([10, 20, 30, 40]),
        "cached_tokens": np.array([1, 2, 3, 4]),
        "ttft_s": np.array([0.1, 0.2, 0.3, 0.4]),
        "latency_s": np.array([1.0, 2.0, 3.0, 4.0]),
    }
    ok = real = np.ones(4, dtype=bool)
    for rounds in (np.sort(rng.integers(0, 3, n)), rng.integers(0, 3, n)):
        dec = {"round": rounds, "full_token_usage": usage, "swa_token_usage": usage[::-1].copy()}
        got = bench_summary.per_round(req, ok, real, dec)
        order = np.argsort(rounds, kind="stable")
        for r, row in enumerate(got):
            sel = order[rounds[order] == r]
            want = usage[sel]
            want = want[np.isfinite(want)]
            assert row["decode_steps"] == len(sel)
            assert row["decode_full_token_usage"] == (float(want.mean()) if len(want) else None)


@pytest.fixture(scope="module")
def recorder():
    from pathlib import Path

    from simulator.engine.config import SimConfig
    from simulator.engine.metrics import Recorder
    from simulator.engine.simulate import simulate
    from traces import load_trace

    trace = load_trace(
        Path(__file__).resolve().parents[1] / "traces" / "data" / "mooncake_arxiv_head800.jsonl"
    )
    trace = trace.head(120)
    cfg = SimConfig(tp=8, page_size=64)
    rec = Recorder.from_config(cfg)
    simulate(trace, cfg, rec)
    return rec


def test_lazy_frames_build_on_first_read_and_equal_the_recorders(recorder) -> None:
    frames = LazyFrames(recorder.columns())
    assert frames._frames is None and list(frames) == list(FRAME_NAMES)
    want = recorder.report_frames()
    assert list(want) == list(FRAME_NAMES)
    for name in FRAME_NAMES:
        pd.testing.assert_frame_equal(frames[name], want[name], check_exact=True)
    assert frames._frames is not None


def test_summary_from_columns_equals_the_summary(recorder) -> None:
    assert recorder.summary(recorder.columns()) == recorder.summary()
    assert recorder.report_summary("open") == {
        **recorder.summary(),
        **recorder.failures(),
        "client_mode": "open",
    }
