"""kvplan step-replay against SGLang 0.5.23's own event loop (``drive_scheduler.py``), step by
step on every step key and every request key.

One long-lived oracle worker per refresh setting (``tests/sched_oracle_worker.py``); generated
workloads (``tests/sched_oracle_harness.generate``) with sessions, shared prefixes, long prompts
and tight pools, so chunking and retraction occur: both loops, fcfs and lpm, pages 1 and 16,
refresh off, the full-attention ``--no-swa`` model, requests stopping at EOS below
``max_new_tokens`` and idle gaps. ``KVPLAN_SCHED_WORKLOADS`` sets the workloads per configuration
(3 in CI; ``-m slow`` runs 30).
"""

from __future__ import annotations

import os

import pytest

from tests.oracle_harness import oracle_missing_reason
from tests.sched_oracle_harness import SchedOracle, first_differences, generate, knob_flags, kvplan_lines

_missing = oracle_missing_reason("0.5.23")
pytestmark = pytest.mark.skipif(
    _missing is not None and os.environ.get("KVPLAN_REQUIRE_ORACLE", "1") != "1", reason=str(_missing)
)

N_WORKLOADS = int(os.environ.get("KVPLAN_SCHED_WORKLOADS", "3"))
SLOW_WORKLOADS = int(os.environ.get("KVPLAN_SCHED_SLOW_WORKLOADS", "30"))

PLAIN = dict(disable_overlap_schedule=True)
# name -> (knobs, workload style, refresh, what its workloads must exercise)
CONFIGS = {
    "plain-fcfs-page1": (PLAIN, "mixed", "on", ("retract", "refresh")),
    "plain-fcfs-page16": (dict(PLAIN, page_size=16), "mixed", "on", ("retract", "refresh")),
    "plain-lpm-page1": (dict(PLAIN, schedule_policy="lpm"), "mixed", "on", ("lpm",)),
    "plain-lpm-page16": (dict(PLAIN, schedule_policy="lpm", page_size=16), "mixed", "on", ("lpm",)),
    "overlap-fcfs-page1": ({}, "mixed", "on", ("retract", "refresh")),
    "overlap-fcfs-page16": (dict(page_size=16), "mixed", "on", ("retract", "refresh")),
    "overlap-lpm-page1": (dict(schedule_policy="lpm"), "mixed", "on", ("lpm",)),
    "overlap-lpm-page16": (dict(schedule_policy="lpm", page_size=16), "mixed", "on", ("lpm",)),
    "plain-refresh-off": (PLAIN, "mixed", "off", ("retract", "no-refresh")),
    "overlap-refresh-off": ({}, "mixed", "off", ("retract", "no-refresh")),
    "plain-no-swa": (dict(PLAIN, no_swa=True, full_tokens=2000), "eos", "on", ("batch-full",)),
    "overlap-no-swa": (dict(no_swa=True, full_tokens=2000), "eos", "on", ("batch-full",)),
    "plain-eos": (dict(PLAIN, full_tokens=3000, swa_tokens=1200, window=64), "eos", "on", ("stop",)),
    "overlap-eos": (dict(full_tokens=3000, swa_tokens=1200, window=64), "eos", "on", ("stop",)),
    "plain-idle": (PLAIN, "idle", "on", ("reset",)),
    "overlap-idle": ({}, "idle", "on", ("reset",)),
    # SGLang's own bug (SCHEDULER.md Finding 1): an SWA pool no larger than a chunk plus a page
    # truncates a second request per batch, which decodes on a partial prompt, and the SWA
    # allocator's conservation assert fires in both loops on these workloads
    "plain-swa-bug": (dict(PLAIN, swa_tokens=400, window=128), "mixed", "on", ("swa-bug",)),
    "overlap-swa-bug": (dict(swa_tokens=400, window=128), "mixed", "on", ("swa-bug",)),
}

_WORKERS: dict[str, SchedOracle] = {}


@pytest.fixture(scope="module")
def workers():
    yield _WORKERS
    for w in _WORKERS.values():
        w.close()
    _WORKERS.clear()


def _batch_full_passes(lines: list[dict]) -> int:
    """Steps where requests waited but no pass reached ``calc_priority`` (batch_is_full kept)."""
    return sum(
        1
        for x in lines
        if x["type"] == "step" and x["waiting"] and x["batch_is_full"] and x["queue_order"] is None
    )


def _check_exercised(needs: tuple[str, ...], totals: dict[str, int]) -> None:
    """Each configuration exercises what it can, counted from the oracle's run lines."""
    assert totals["chunked_steps"] > 0
    if "swa-bug" not in needs:  # pools > chunk + page
        assert totals["swa_chunk_capped"] == 0 and totals["anomalies"] == 0 and totals["crashes"] == 0
    checks = {
        "swa-bug": totals["swa_chunk_capped"] > 0 and totals["anomalies"] > 0 and totals["crashes"] > 0,
        "retract": totals["retractions"] > 0,
        "refresh": totals["refreshes"] > 0,
        "no-refresh": totals["refreshes"] == 0,
        "lpm": totals["refreshes"] == 0 and totals["lpm_deprioritized"] > 0,
        "batch-full": totals["batch_full_passes"] > 0,
        "stop": totals["stops"] > 0,
        "reset": totals["ratio_resets"] > 1,
    }
    assert all(checks[n] for n in needs), {n: checks[n] for n in needs}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_step_replay_matches_sglang_event_loop(workers, name):
    _compare(workers, name, range(N_WORKLOADS))


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CONFIGS))
def test_step_replay_matches_sglang_event_loop_many(workers, name, request):
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("slow: run with -m slow")
    _compare(workers, name, range(1000, 1000 + SLOW_WORKLOADS))


def _compare(workers, name: str, seeds: range) -> None:
    knobs, style, refresh, needs = CONFIGS[name]
    if refresh not in workers:
        workers[refresh] = SchedOracle(refresh)
    oracle = workers[refresh]
    knobs = dict(knobs, waiting_prefix_refresh=refresh == "on")
    flags, _ = knob_flags(knobs)
    totals: dict[str, int] = {"batch_full_passes": 0, "stops": 0, "crashes": 0}
    for seed in seeds:
        rows = generate(seed, style=style)
        ans = oracle.run(rows, flags)
        assert ans["ok"], ans.get("error")
        lines = ans["lines"]
        for k, v in lines[-1]["counts"].items():
            totals[k] = totals.get(k, 0) + v
        totals["batch_full_passes"] += _batch_full_passes(lines)
        totals["crashes"] += lines[-1].get("crashed") is not None
        totals["stops"] += sum(
            1 for x in lines if x["type"] == "request" and (x["finish_reason"] or {}).get("type") == "stop"
        )
        ours = kvplan_lines(rows, knobs)
        assert first_differences(lines, ours) == [], f"seed {seed}"
        assert (ours[-1].get("crashed") is None) == (lines[-1].get("crashed") is None), f"seed {seed}"
    _check_exercised(needs, totals)
