"""HiCache prefetch gate and termination policies (policies/hicache_prefetch.py) by scenario."""

from __future__ import annotations

import pytest

from policies.hicache_prefetch import (
    PREFETCH_TERMINATION,
    GateDecision,
    PollResult,
    PrefetchProgress,
    Timeout,
    effective_prefetch_threshold,
    gate_prefetch,
    make_prefetch_policy,
    poll_prefetch,
    prefetch_capacity_limit,
    prefetch_rate_limited,
    prefetch_span,
    storage_hit_usable,
)
from simulator.errors import ConfigError


def test_registry_names_match_sglangs_choices():
    from simulator.hicache_args import PREFETCH_POLICIES

    assert sorted(PREFETCH_TERMINATION.names()) == sorted(PREFETCH_POLICIES)
    with pytest.raises(ConfigError, match="best_effort"):
        PREFETCH_TERMINATION.create("eventually")


def gate(new, *, page=16, threshold=256, occupied=0, host=4097, anchor=True):
    return gate_prefetch(
        new,
        page_size=page,
        threshold=threshold,
        occupied_tokens=occupied,
        host_pool_tokens=host,
        anchor_backed_up=anchor,
    )


def test_gate_order_and_thresholds():
    assert gate(300) is GateDecision.ISSUED
    # 270 tokens at page 16 ask for 256: exactly the threshold issues, 255 does not
    assert prefetch_span(270, 16) == 256 and gate(270) is GateDecision.ISSUED
    assert gate(255, page=1) is GateDecision.TOO_SHORT
    assert gate(500, page=512) is GateDecision.TOO_SHORT  # 500 tokens are no whole page
    # limit = int(0.5 x 4097) = 2048: 2047 occupied still issues, 2048 is rate limited
    assert prefetch_capacity_limit(4097) == 2048
    assert gate(300, occupied=2047) is GateDecision.ISSUED
    assert gate(300, occupied=2048) is GateDecision.RATE_LIMITED
    assert not prefetch_rate_limited(2047, 4097) and prefetch_rate_limited(2048, 4097)
    # the anchor is checked first, then length, then the rate limit
    assert gate(10, occupied=10**6, anchor=False) is GateDecision.ANCHOR_NOT_BACKED_UP
    assert gate(10, occupied=10**6) is GateDecision.TOO_SHORT
    assert storage_hit_usable(256, 256) and not storage_hit_usable(255, 256)
    # buffer_only raises the threshold to one whole-page window: ceil(4095 / 64) x 64 = 4096
    assert effective_prefetch_threshold(256, "buffer_only", 4095, 64) == 4096
    assert effective_prefetch_threshold(256, "buffer_only", 127, 64) == 256
    assert effective_prefetch_threshold(256, "cache", 4095, 64) == 256


def test_best_effort_stops_at_the_first_poll():
    policy = make_prefetch_policy("best_effort")
    p = PrefetchProgress(requested_tokens=1024, page_size=16)  # hit query still pending
    assert poll_prefetch(policy, p, 0.0) is PollResult.TERMINATED
    p = PrefetchProgress(requested_tokens=1024, page_size=16, hit_tokens=512, completed_tokens=512)
    assert poll_prefetch(policy, p, 0.0) is PollResult.DONE


def test_wait_complete_waits_until_every_page_landed():
    policy = make_prefetch_policy("wait_complete")
    p = PrefetchProgress(requested_tokens=1024, page_size=16, hit_tokens=512, completed_tokens=496)
    for t in (0.0, 5.0, 1e6):
        assert poll_prefetch(policy, p, t) is PollResult.WAIT
    p.completed_tokens = 512
    assert poll_prefetch(policy, p, 1e6 + 1) is PollResult.DONE
    # a storage miss (hit 0) is finished by itself
    assert poll_prefetch(policy, PrefetchProgress(1024, 16, hit_tokens=0), 0.0) is PollResult.DONE


def test_timeout_deadline_by_hand():
    policy = make_prefetch_policy("timeout", timeout_base_s=1.0, per_ki_token_s=0.25)
    assert isinstance(policy, Timeout)
    # 2000 tokens at page 64 = 31 whole pages x 64/1024 x 0.25 s = 0.484375 s, + 1 s
    assert policy.timeout_s(2000, 64) == pytest.approx(1.484375)
    p = PrefetchProgress(requested_tokens=2000, page_size=64, hit_tokens=1984, completed_tokens=0)
    assert policy.deadline_s(p) is None
    # the clock starts at the first blocked poll (t = 10), not at issue
    assert poll_prefetch(policy, p, 10.0) is PollResult.WAIT and p.wait_started_s == 10.0
    assert policy.deadline_s(p) == pytest.approx(11.484375)
    assert poll_prefetch(policy, p, 11.484375) is PollResult.WAIT  # expires strictly after
    assert poll_prefetch(policy, p, 11.49) is PollResult.TERMINATED
    assert p.wait_started_s == 10.0


def test_timeout_never_cuts_landed_kv():
    policy = Timeout(0.0, 0.0)
    p = PrefetchProgress(
        requested_tokens=64, page_size=16, hit_tokens=64, completed_tokens=64, wait_started_s=0.0
    )
    assert not policy.can_terminate(p, 100.0)
    assert poll_prefetch(policy, p, 100.0) is PollResult.DONE
    with pytest.raises(ConfigError):
        Timeout(-1.0)
