"""Recorder: bench_multiturn's metric definitions, SGLang's decode log line, frames, outputs, report."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pandas as pd
import pytest
from controller_proxy import strict_controller  # noqa: F401
from test_engine_clients import fake_simulate

from simulator.engine.config import SimConfig
from simulator.engine.metrics import (
    DECODE_FRAME_COLUMNS,
    REQUEST_FRAME_COLUMNS,
    Recorder,
    bench_percentile,
    latency_stats,
    majority_round,
)
from simulator.engine.observer import PoolCapacity
from simulator.engine.report import format_bench_summary, format_report
from simulator.engine.request import SimRequest
from traces import BenchMultiturnArgs, generate_bench_multiturn


def _req(rid, prompt, cached, out, arrival, ttft, latency, *, rnd=0, hb=False, aborted=False) -> SimRequest:
    r = SimRequest(rid, np.zeros(0, np.int64), prompt, out, arrival_s=arrival, round=rnd, heartbeat=hb)
    r.cached_tokens = cached
    r.first_token_s = arrival + ttft
    r.finish_s = arrival + latency
    r.aborted = aborted
    return r


def test_bench_percentile_rule():
    s = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]
    assert bench_percentile(s, 0.5) == 6.0  # sorted[int(0.5 * 10)], not the interpolated 5.5
    assert bench_percentile(s, 0.9) == 10.0
    assert bench_percentile(s, 0.99) == 10.0  # min(int(9.9), 9)
    assert bench_percentile([3.0], 0.99) == 3.0
    assert bench_percentile([], 0.5) == 0.0
    st = latency_stats(np.array([3.0, 1.0, 2.0]))
    assert st == {"mean": 2.0, "p50": 2.0, "p90": 3.0, "p99": 3.0, "max": 3.0}


def test_summary_counts_only_successful_non_heartbeat_requests():
    rec = Recorder(request_rate=16.0)
    rec.on_start(PoolCapacity(1000, 100), {})
    reqs = [
        _req("a", 100, 0, 10, 0.0, 0.5, 2.0, rnd=0),
        _req("b", 300, 200, 10, 1.0, 0.1, 3.0, rnd=1),
        _req("hb", 100, 100, 100, 4.0, 0.1, 1.0, rnd=1, hb=True),  # finishes last, excluded
        _req("x", 500, 0, 10, 2.0, math.nan, 5.0, rnd=1, aborted=True),  # counts for the duration
    ]
    for r in reqs:
        rec.on_arrival(r)
        rec.on_finish(r)
    s = rec.summary()
    assert s["requests"] == 2 and s["aborted"] == 1 and s["heartbeats"] == 1
    assert s["cache_hit_rate"] == pytest.approx(200 / 400)
    assert s["ttft"]["mean"] == pytest.approx(0.3) and s["ttft"]["max"] == pytest.approx(0.5)
    assert s["latency"]["p50"] == pytest.approx(3.0)
    assert s["start_s"] == 0.0 and s["finished_s"] == 7.0 and s["duration_s"] == 7.0
    assert s["input_throughput"] == pytest.approx(400 / 7)
    assert s["output_throughput"] == pytest.approx(20 / 7)
    assert s["request_throughput"] == pytest.approx(2 / 7)
    assert s["average_prompt_len"] == 200.0
    assert [(r["round"], r["requests"], r["cache_hit_rate"]) for r in s["per_round"]] == [
        (0, 1, 0.0),
        (1, 1, pytest.approx(2 / 3)),
    ]
    json.dumps(s, allow_nan=False)  # JSON-ready: no NaN anywhere


def test_decode_log_every_40_global_steps_across_fast_forward_calls():
    out = io.StringIO()
    rec = Recorder(log_decode=True, log_stream=out)
    rec.on_start(PoolCapacity(full_tokens=894_000, swa_tokens=178_800), {})
    batch = [SimRequest(f"r{i}", np.zeros(0, np.int64), 10, 10) for i in range(10)]
    t = 0.01 * np.arange(1, 101)
    rec.on_decode_steps(t, batch, 330_000 + np.arange(100), 48_000 + np.arange(100), 0)  # steps 1..100
    rec.on_decode_steps(
        1.0 + 0.02 * np.arange(1, 31), batch[:5], np.full(30, 5), np.full(30, 7), 3
    )  # 101..130
    lines = out.getvalue().splitlines()
    assert len(lines) == 3  # steps 40, 80, 120
    assert lines[0] == (
        "[2026-01-01 00:00:00 TP0] Decode batch, #running-req: 10, #full token: 330039, "
        "full token usage: 0.37, #swa token: 48039, swa token usage: 0.27, cuda graph: True, "
        "gen throughput (token/s): 1000.00, #queue-req: 0, "
    )
    # step 120: 20 steps of 10 + 20 steps of 5 tokens since step 80 (t = 0.80), now t = 1.40
    assert lines[2].startswith("[2026-01-01 00:00:01 TP0] Decode batch, #running-req: 5, #full token: 5,")
    assert "gen throughput (token/s): 500.00, #queue-req: 3, " in lines[2]
    dec = rec.frames()["decode_steps"]
    assert list(dec.columns) == list(DECODE_FRAME_COLUMNS) and len(dec) == 130
    assert dec["step"].iloc[-1] == 130 and dec["running"].iloc[-1] == 5 and dec["queue"].iloc[-1] == 3
    assert dec["swa_token_usage"].iloc[0] == pytest.approx(48_000 / 178_800)


def test_no_log_lines_without_log_decode():
    out = io.StringIO()
    rec = Recorder(log_stream=out)
    rec.on_decode_steps(np.arange(1, 81, dtype=float), [], np.zeros(80), np.zeros(80), 0)
    assert out.getvalue() == ""


def test_per_round_decode_usage_by_majority_round():
    rec = Recorder()
    rec.on_start(PoolCapacity(1000, 100), {})
    mk = lambda rid, rnd, hb=False: SimRequest(rid, np.zeros(0, np.int64), 1, 1, round=rnd, heartbeat=hb)  # noqa: E731
    r0, r0b, r1, hb = mk("a", 0), mk("b", 0), mk("c", 1), mk("hb", 0, True)
    assert majority_round([r0, r0b, r1]) == (0, pytest.approx(2 / 3))
    assert majority_round([r0, r1]) == (0, 0.5)  # tie -> lower round
    assert majority_round([hb]) == (-1, 0.0)
    assert majority_round([hb, r1]) == (1, 1.0)
    rec.on_decode_steps(np.array([1.0, 2.0]), [r0, r0b, r1], np.array([100, 200]), np.array([10, 20]), 0)
    rec.on_decode_steps(np.array([3.0]), [r1, hb], np.array([500]), np.array([50]), 0)
    rec.on_decode_steps(np.array([4.0]), [hb], np.array([900]), np.array([90]), 0)
    for r in (r0, r1):
        r.finish_s = r.first_token_s = 5.0
        r.arrival_s = 0.0
        rec.on_arrival(r)
    s = rec.summary()
    pr = {r["round"]: r for r in s["per_round"]}
    assert pr[0]["decode_full_token_usage"] == pytest.approx(0.15) and pr[0]["decode_steps"] == 2
    assert pr[1]["decode_swa_token_usage"] == pytest.approx(0.5) and pr[1]["decode_steps"] == 1
    assert s["decode_full_token_usage"] == pytest.approx((0.1 + 0.2 + 0.5 + 0.9) / 4)
    assert s["decode_swa_token_usage_max"] == pytest.approx(0.9)


def test_recorder_on_fake_bench_multiturn_run_and_outputs(tmp_path):
    trace = generate_bench_multiturn(
        BenchMultiturnArgs(
            num_clients=3, num_rounds=3, request_length=64, output_length=32, request_rate=16.0,
            enable_round_barrier=True, disable_random_sample=True,
        )
    )  # fmt: skip
    rec = Recorder(request_rate=16.0)
    fake_simulate(trace, SimConfig(page_size=16), rec)
    s = rec.summary()
    assert s["requests"] == 9 and s["heartbeats"] == 3 and s["unfinished"] == 0
    # round r >= 1 hits its previous prompt + output (whole pages in the fake server)
    per = s["per_round"]
    assert per[0]["cache_hit_rate"] == 0.0
    assert per[1]["cached_tokens"] == 3 * (64 + 32)
    assert s["cache_hit_rate"] == pytest.approx(s["total_cached_tokens"] / s["total_prompt_tokens"])
    assert s["counters"] == {"evictions": 0, "tombstones_created": 0}
    fr = rec.frames()
    assert list(fr["requests"].columns) == list(REQUEST_FRAME_COLUMNS) and len(fr["requests"]) == 12
    assert len(fr["prefill_batches"]) == 12 and s["prefill_batches"] == 12
    assert s["decode_steps"] == 9 * 31 + 3 * 99
    written = rec.write_outputs(tmp_path / "out")
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == sorted(p.name for p in written)  # no temporary files left behind
    assert "summary.json" in names and "decode_steps.parquet" in names and "requests.csv" in names
    back = pd.read_parquet(tmp_path / "out" / "requests.parquet")
    pd.testing.assert_frame_equal(back, rec.report_frames()["requests"])
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["requests"] == 9
    csv = pd.read_csv(tmp_path / "out" / "decode_steps.csv")
    assert len(csv) == s["decode_steps"]


def test_empty_recorder_summary_and_frames():
    rec = Recorder()
    s = rec.summary()
    assert s["requests"] == 0 and s["cache_hit_rate"] == 0.0 and s["per_round"] == []
    assert s["decode_full_token_usage"] is None and s["capacity"] is None
    fr = rec.frames()
    assert len(fr["decode_steps"]) == 0 and len(fr["prefill_batches"]) == 0
    format_report(s)  # still prints


SEED_TEXT = """\
All requests completed
Performance metrics summary:
  Total requests: 100 at 16.0 requests per second
  Average Prompt Length: 15253.59 tokens
  Average Output Length: 2999.55 tokens
  Average TTFT: 0.25
  P90 TTFT: 0.40
  P99 TTFT: 0.75
  Median TTFT: 0.23
  Max TTFT: 0.75
  Average latency: 37.21
  P90 latency: 38.12
  P99 latency: 38.31
  Median latency: 37.41
  Max latency: 38.31
  Input token throughput: 4057.60 tokens per second
  Output token throughput: 797.91 tokens per second
  Request Throughput: 0.27 requests per second
  Cache Hit Rate: 0.965354
Per-round metrics:
  Round 0: Average TTFT = 0.16s, Cache Hit Rate = 0.000000 (10 requests)
  Round 1: Average TTFT = 0.16s, Cache Hit Rate = 0.818212 (10 requests)"""


def test_report_reproduces_the_seed_layout():
    """The seed 000 "this PR" block, rebuilt from a summary holding its numbers."""
    summary = {
        "requests": 100,
        "request_rate": 16.0,
        "average_prompt_len": 15253.59,
        "average_output_len": 2999.55,
        "ttft": {"mean": 0.25, "p90": 0.40, "p99": 0.75, "p50": 0.23, "max": 0.75},
        "latency": {"mean": 37.21, "p90": 38.12, "p99": 38.31, "p50": 37.41, "max": 38.31},
        "input_throughput": 4057.60,
        "output_throughput": 797.91,
        "request_throughput": 0.27,
        "cache_hit_rate": 0.965354,
        "per_round": [
            {"round": 0, "ttft_mean": 0.16, "cache_hit_rate": 0.0, "requests": 10},
            {"round": 1, "ttft_mean": 0.16, "cache_hit_rate": 0.818212, "requests": 10},
        ],
    }
    assert format_bench_summary(summary) == SEED_TEXT
    no_rounds = format_bench_summary(summary, per_round=False)
    assert no_rounds == SEED_TEXT.split("\nPer-round")[0]
    seq = format_bench_summary({**summary, "request_rate": None}, per_round=False)
    assert "  Total requests: 100 (sequential replay)" in seq.splitlines()


def test_full_report_has_server_block():
    rec = Recorder(request_rate=16.0)
    trace = generate_bench_multiturn(
        BenchMultiturnArgs(
            num_clients=2, num_rounds=2, request_length=32, output_length=8, enable_round_barrier=True
        )
    )
    fake_simulate(trace, SimConfig(page_size=16), rec)
    text = format_report(rec.summary())
    assert text.startswith(
        "All requests completed\nPerformance metrics summary:\n  Total requests: 4 at 16.0"
    )
    assert (
        "Per-round metrics:\n  Round 0: Average TTFT = 0.10s, Cache Hit Rate = 0.000000 (2 requests)" in text
    )
    assert "Server metrics (kvplan):" in text and "Decode swa token usage: mean" in text
