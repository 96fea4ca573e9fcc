"""kvplan step-replay against SGLang 0.5.23's own event loop (``drive_scheduler.py``), step by
step on every step key and every request key: page 1, fcfs and lpm, both loops, and the
waiting-prefix refresh off.

The configurations, the workloads and the comparison are in ``tests/sched_differential.py``;
the page-16 and SGLang-bug configurations are in ``test_scheduler_differential_page16.py``, the
``--no-swa``, EOS and idle ones in ``test_scheduler_differential_models.py`` (three files, so
pytest-xdist runs them in parallel). 30 workloads per configuration in CI
(``KVPLAN_SCHED_WORKLOADS``); ``-m slow`` runs 300 more (``KVPLAN_SCHED_SLOW_WORKLOADS``).
"""

from __future__ import annotations

import pytest

from tests.sched_differential import (
    CONFIGS,
    GROUPS,
    N_WORKLOADS,
    Workers,
    compare,
    compare_slow,
    needs_oracle,
)

pytestmark = needs_oracle
NAMES = GROUPS["page1"]


@pytest.fixture(scope="module")
def workers():
    w = Workers()
    yield w
    w.close()


def test_every_configuration_runs_in_one_file():
    names = [n for group in GROUPS.values() for n in group]
    assert sorted(names) == sorted(CONFIGS) and len(set(names)) == len(names)


@pytest.mark.parametrize("name", NAMES)
def test_step_replay_matches_sglang_event_loop(workers, name):
    compare(workers, name, range(N_WORKLOADS))


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_step_replay_matches_sglang_event_loop_many(workers, name, request):
    compare_slow(workers, name, request)
