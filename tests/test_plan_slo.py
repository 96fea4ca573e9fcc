"""SLO parsing and judging for ``kvplan plan`` (simulator/planner/slo.py)."""

from __future__ import annotations

import math

import pytest

from simulator.errors import FlagError
from simulator.planner.slo import SUMMARY_PATHS, Slo, check_path, describe_failures, judge, parse_slos
from simulator.planner.stats import numeric_leaves

SUMMARY = {
    "requests_submitted": 10,
    "aborted": 0,
    "rejected": 0,
    "cache_hit_rate": 0.5,
    "ttft": {"p90": 1.2, "p50": 0.4},
    "counters": {"retractions": 3},
}


def test_parse_every_operator():
    slos = parse_slos(" ttft.p90 <= 1.0, cache_hit_rate>=0.6,latency.p99<5,decode_steps>1e3")
    assert slos == (
        Slo("ttft.p90", "<=", 1.0),
        Slo("cache_hit_rate", ">=", 0.6),
        Slo("latency.p99", "<", 5.0),
        Slo("decode_steps", ">", 1000.0),
    )


@pytest.mark.parametrize(
    "text, message",
    [
        ("ttft.p91<=1", "--slo ttft.p91: not a number of `kvplan run --json`; valid paths: requests,"),
        ("ttft.p90=<1", "expected PATH OP NUMBER"),
        ("ttft.p90<=fast", "'fast' is not a number"),
        ("ttft.p90<=inf", "must be finite"),
        ("", "no objective given"),
        ("ttft.p90<=1,ttft.p90<=2", "given twice"),
    ],
)
def test_bad_slos_are_one_line_errors(text, message):
    with pytest.raises(FlagError) as exc:
        parse_slos(text)
    assert message in str(exc.value)
    assert "\n" not in str(exc.value)


def test_unknown_path_lists_the_valid_ones():
    with pytest.raises(FlagError) as exc:
        parse_slos("hit_rate>=0.5")
    text = str(exc.value)
    assert "--slo hit_rate" in text
    for path in ("cache_hit_rate", "ttft.p90", "latency.p99", "counters.<name>"):
        assert path in text


def test_counter_paths_are_checked_against_a_real_summary():
    check_path("counters.retractions", SUMMARY)
    with pytest.raises(FlagError):
        check_path("counters.nope", SUMMARY)


def test_judge_met_and_violations_are_normalised():
    v = judge(SUMMARY, parse_slos("ttft.p90<=1.0,cache_hit_rate>=0.4"))
    assert not v.met
    assert v.violations["ttft.p90<=1"] == pytest.approx(0.2)
    assert v.violations["cache_hit_rate>=0.4"] == 0
    assert v.total == pytest.approx(0.2)
    assert (
        describe_failures(v, parse_slos("ttft.p90<=1.0,cache_hit_rate>=0.4")) == "ttft.p90 = 1.2, needs <= 1"
    )
    assert judge(SUMMARY, parse_slos("ttft.p90<=1.2")).met
    assert not judge(SUMMARY, parse_slos("ttft.p90<1.2")).met  # strict: equality misses


def test_every_slo_implies_no_failed_request():
    failing = {**SUMMARY, "aborted": 1, "rejected": 1}
    v = judge(failing, parse_slos("ttft.p90<=5"))
    assert not v.met
    assert v.violations["failed"] == pytest.approx(0.2)
    assert "2 requests aborted or rejected" in describe_failures(v, parse_slos("ttft.p90<=5"))


def test_refused_configuration_is_infinitely_far():
    v = judge(None, parse_slos("ttft.p90<=5"))
    assert not v.met and math.isinf(v.total)


def test_summary_paths_match_a_real_run():
    from simulator.cli.common import DEFAULT_TRACE
    from simulator.engine.config import SimConfig
    from simulator.run import run_config
    from traces import load_trace

    summary = run_config(load_trace(DEFAULT_TRACE).head(20), SimConfig(tp=8, page_size=64)).summary
    real = {p for p in numeric_leaves(summary) if not p.startswith("counters.")}
    assert real == set(SUMMARY_PATHS)
