"""The run's collector settings (issue 14): young collections are rarer during a run, and the
caller's thresholds and freeze state come back afterwards, also when the run fails."""

from __future__ import annotations

import gc

import pytest

from simulator.engine.simulate import RUN_GC_THRESHOLD0, collector_skips_older_objects


def test_a_run_collects_the_young_generation_less_often_and_restores_the_thresholds() -> None:
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        with collector_skips_older_objects():
            assert gc.get_threshold() == (RUN_GC_THRESHOLD0, 10, 10)
        assert gc.get_threshold() == (700, 10, 10)
        with pytest.raises(RuntimeError), collector_skips_older_objects():
            raise RuntimeError("a failed run restores them too")
        assert gc.get_threshold() == (700, 10, 10) and gc.get_freeze_count() == 0
        gc.set_threshold(50_000, 10, 10)  # a caller's larger threshold is kept
        with collector_skips_older_objects():
            assert gc.get_threshold()[0] == 50_000
    finally:
        gc.set_threshold(*before)


def test_a_caller_with_the_collector_off_keeps_its_thresholds() -> None:
    before = gc.get_threshold()
    gc.disable()
    try:
        with collector_skips_older_objects():
            assert gc.get_threshold() == before and not gc.isenabled()
    finally:
        gc.enable()
