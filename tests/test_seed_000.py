"""Seed 000 (SGLang PR 17220): the simulator reproduces the before/after table within ±0.03.

See docs/validation.md for the side-by-side numbers and the definition of "late-round" usage.
"""

from __future__ import annotations

import pytest

from simulator.validation.seed_000 import SEED, run_seed

TOL = 0.03


@pytest.fixture(scope="module")
def runs():
    return {policy: run_seed(policy) for policy in ("none", "window")}


@pytest.mark.parametrize("policy", ["none", "window"])
def test_overall_cache_hit_rate(runs, policy):
    got = runs[policy].summary["cache_hit_rate"]
    assert abs(got - SEED[policy]["cache_hit_rate"]) <= TOL, got


@pytest.mark.parametrize("policy", ["none", "window"])
def test_late_round_decode_swa_token_usage(runs, policy):
    got = runs[policy].late_usage()["swa_usage"]
    assert abs(got - SEED[policy]["late_swa_usage"]) <= TOL, got


@pytest.mark.parametrize("policy", ["none", "window"])
def test_late_round_full_token_usage(runs, policy):
    got = runs[policy].late_usage()["full_usage"]
    assert abs(got - SEED[policy]["late_full_usage"]) <= TOL, got


def test_before_after_ordering(runs):
    before, after = runs["none"], runs["window"]
    assert before.summary["cache_hit_rate"] < after.summary["cache_hit_rate"]
    assert before.late_usage()["swa_usage"] > 3 * after.late_usage()["swa_usage"]
    # every round's end-of-round SWA usage drops with decode-time eviction
    b, a = before.round_end_usage(), after.round_end_usage()
    assert (b["swa_usage"].to_numpy() > a["swa_usage"].to_numpy()).all()


def test_every_request_completes(runs):
    for run in runs.values():
        assert run.summary["requests"] == 100
        assert run.summary.get("aborted", 0) == 0


# --- both loops, both tombstone generations (docs/validation.md, "Both loops") -----------------


@pytest.fixture(scope="module")
def more_runs():
    return {
        ("unified", False, "none"): run_seed("none", "unified"),
        ("unified", False, "window"): run_seed("window", "unified"),
        ("legacy", True, "window"): run_seed("window", "legacy", overlap=True),
    }


@pytest.mark.parametrize("key", [("unified", False, "window"), ("legacy", True, "window")])
def test_after_within_tolerance_on_todays_tree_and_the_overlap_loop(more_runs, key):
    run = more_runs[key]
    assert abs(run.summary["cache_hit_rate"] - SEED["window"]["cache_hit_rate"]) <= TOL
    assert abs(run.late_usage()["swa_usage"] - SEED["window"]["late_swa_usage"]) <= TOL


def test_unified_tree_loses_no_cache_without_decode_eviction(more_runs):
    """Today's tree tombstones SWA instead of deleting whole leaves, so the before run keeps every
    prefix: its per-round hit rates are the after run's, and only its SWA usage stays high."""
    before, after = more_runs[("unified", False, "none")], more_runs[("unified", False, "window")]
    hits = [[r["cache_hit_rate"] for r in x.summary["per_round"]] for x in (before, after)]
    assert hits[0] == hits[1]
    assert before.late_usage()["swa_usage"] > 3 * after.late_usage()["swa_usage"]
