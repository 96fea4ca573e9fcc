"""kvplan step-replay against SGLang 0.5.23's own event loop, step by step: the
full-attention ``--no-swa`` model,
requests stopping at EOS below ``max_new_tokens``, and idle gaps (both loops).

See ``tests/test_scheduler_differential.py`` and ``tests/sched_differential.py``.
"""

from __future__ import annotations

import pytest

from tests.sched_differential import GROUPS, N_WORKLOADS, Workers, compare, compare_slow, needs_oracle

pytestmark = needs_oracle
NAMES = GROUPS["models"]


@pytest.fixture(scope="module")
def workers():
    w = Workers()
    yield w
    w.close()


@pytest.mark.parametrize("name", NAMES)
def test_step_replay_matches_sglang_event_loop(workers, name):
    compare(workers, name, range(N_WORKLOADS))


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_step_replay_matches_sglang_event_loop_many(workers, name, request):
    compare_slow(workers, name, request)
