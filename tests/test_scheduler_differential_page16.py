"""kvplan step-replay against SGLang 0.5.23's own event loop, step by step: page 16
(fcfs and lpm, both loops) and SGLang's SWA
double-truncation bug (SWA pool at most one chunk plus a page, both loops).

See ``tests/test_scheduler_differential.py`` and ``tests/sched_differential.py``.
"""

from __future__ import annotations

import pytest

from tests.sched_differential import (
    CI_WORKLOADS,
    GROUPS,
    N_WORKLOADS,
    Workers,
    compare,
    compare_slow,
    needs_oracle,
)

pytestmark = needs_oracle
NAMES = GROUPS["page16"]


@pytest.fixture(scope="module")
def workers():
    w = Workers()
    yield w
    w.close()


@pytest.mark.parametrize("name", NAMES)
def test_step_replay_matches_sglang_event_loop(workers, name):
    compare(workers, name, range(CI_WORKLOADS.get(name, N_WORKLOADS)))


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_step_replay_matches_sglang_event_loop_many(workers, name, request):
    compare_slow(workers, name, request)
