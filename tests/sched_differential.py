"""The scheduler differential test's configurations and its comparison loop.

Shared by ``tests/test_scheduler_differential*.py``: the configurations are split over three
files so that pytest-xdist (``--dist loadfile``) runs them on separate cores, each file with its
own long-lived oracle workers (one per refresh setting, SCHEDULER.md "Many workloads in one
process"). kvplan's side runs in the test process (``kvplan step-replay``'s engine, no
subprocess). Every workload is compared on every step key and request key; what each
configuration must exercise is asserted on the oracle's counts summed over its workloads.

CI runs ``KVPLAN_SCHED_WORKLOADS`` (default 30) compact workloads per configuration, seeds 0...;
the slow run (``-m slow``) runs ``KVPLAN_SCHED_SLOW_WORKLOADS`` (default 300) from seed
``KVPLAN_SCHED_SLOW_FIRST`` (default 1000), so it can be split into slices, and appends one JSON
line per configuration (counts, workloads, seconds) to ``KVPLAN_SCHED_SLOW_REPORT`` if set.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from typing import Any

import pytest

from tests.oracle_harness import oracle_missing_reason
from tests.sched_oracle_harness import (
    COMPACT,
    LARGE,
    SchedOracle,
    first_differences,
    generate,
    knob_flags,
    kvplan_lines,
)

_missing = oracle_missing_reason("0.5.23")
needs_oracle = pytest.mark.skipif(
    _missing is not None and os.environ.get("KVPLAN_REQUIRE_ORACLE", "1") != "1", reason=str(_missing)
)

N_WORKLOADS = int(os.environ.get("KVPLAN_SCHED_WORKLOADS", "30"))
SLOW_WORKLOADS = int(os.environ.get("KVPLAN_SCHED_SLOW_WORKLOADS", "300"))
SLOW_FIRST = int(os.environ.get("KVPLAN_SCHED_SLOW_FIRST", "1000"))

PLAIN = dict(disable_overlap_schedule=True)
# pools for COMPACT workloads: 17 rows of prompts up to 400 tokens retract on a FULL pool of 800;
# the SWA pool (500) stays above one chunk (128) plus a page, so the SWA cap never applies
POOLS = dict(full_tokens=800, swa_tokens=500, window=64, chunked_prefill_size=128)
# the full-attention scheduler keeps batch_is_full after NO_TOKEN until a request leaves, so it
# admits little on a stale ratio: it retracts only with 10 burst rows of 60-120 output tokens on
# a FULL pool of 600 at a conservativeness of 0.3 (seeds 0-29: 1 retraction in the plain loop,
# 2 under overlap; the COMPACT burst on 800 tokens never retracted)
NO_SWA = dict(no_swa=True, full_tokens=600, chunked_prefill_size=128, schedule_conservativeness=0.3)
NO_SWA_SHAPE = replace(COMPACT, burst=10, burst_output=(60, 120))
# requests stopping at EOS reserve their whole max_new_tokens: a conservativeness of 0.5
# (new_token_ratio from 0.35) under-reserves the others enough to retract
EOS = dict(
    full_tokens=800, swa_tokens=500, window=32, chunked_prefill_size=128, schedule_conservativeness=0.5
)
# SGLang's own bug (SCHEDULER.md Finding 1): an SWA pool no larger than a chunk plus a page
# truncates a second request per batch, which decodes on a partial prompt, and the SWA
# allocator's conservation assert fires in both loops on these workloads. Its SWA cap needs
# prompts above the SWA pool: these two run the LARGE workloads (prompts to 1500 tokens)
# Some of them livelock in SGLang: a retracted request whose prompt + outputs outgrow the SWA
# pool heads the queue, can never be admitted, and SGLang passes idle behind it for ever (seed
# 19: from step 305). The oracle stops such a run at --max-steps as a crash, and step-replay
# does the same at the same step; 3000 steps is well above the longest run that ends (about 1150)
SWA_BUG = dict(swa_tokens=400, window=128, max_steps=3000)
SHAPES = {
    "plain-swa-bug": LARGE,
    "overlap-swa-bug": LARGE,
    "plain-no-swa": NO_SWA_SHAPE,
    "overlap-no-swa": NO_SWA_SHAPE,
}
"""Workload shapes other than ``COMPACT``."""
CI_WORKLOADS: dict[str, int] = {}
"""Configurations that run fewer than ``KVPLAN_SCHED_WORKLOADS`` workloads in CI."""

# name -> (knobs, workload style, refresh, what its workloads must exercise)
CONFIGS: dict[str, tuple[dict[str, Any], str, str, tuple[str, ...]]] = {
    "plain-fcfs-page1": (dict(PLAIN, **POOLS), "mixed", "on", ("refresh",)),
    "plain-lpm-page1": (dict(PLAIN, schedule_policy="lpm", **POOLS), "mixed", "on", ("lpm",)),
    "overlap-fcfs-page1": (dict(POOLS), "mixed", "on", ("refresh",)),
    "overlap-lpm-page1": (dict(schedule_policy="lpm", **POOLS), "mixed", "on", ("lpm",)),
    "plain-refresh-off": (dict(PLAIN, **POOLS), "mixed", "off", ("no-refresh",)),
    "overlap-refresh-off": (dict(POOLS), "mixed", "off", ("no-refresh",)),
    "plain-fcfs-page16": (dict(PLAIN, page_size=16, **POOLS), "mixed", "on", ("refresh",)),
    "plain-lpm-page16": (dict(PLAIN, schedule_policy="lpm", page_size=16, **POOLS), "mixed", "on", ("lpm",)),
    "overlap-fcfs-page16": (dict(page_size=16, **POOLS), "mixed", "on", ("refresh",)),
    "overlap-lpm-page16": (dict(schedule_policy="lpm", page_size=16, **POOLS), "mixed", "on", ("lpm",)),
    "plain-swa-bug": (dict(PLAIN, **SWA_BUG), "mixed", "on", ("swa-bug",)),
    "overlap-swa-bug": (dict(SWA_BUG), "mixed", "on", ("swa-bug",)),
    "plain-no-swa": (dict(PLAIN, **NO_SWA), "eos", "on", ("batch-full",)),
    "overlap-no-swa": (dict(NO_SWA), "eos", "on", ("batch-full",)),
    "plain-eos": (dict(PLAIN, **EOS), "eos", "on", ("stop",)),
    "overlap-eos": (dict(EOS), "eos", "on", ("stop",)),
    "plain-idle": (dict(PLAIN, **POOLS), "idle", "on", ("reset",)),
    "overlap-idle": (dict(POOLS), "idle", "on", ("reset",)),
}

# the test file each configuration runs in (tests/test_scheduler_differential{,_page16,_models}.py)
GROUPS = {
    "page1": ("plain-fcfs-page1", "plain-lpm-page1", "overlap-fcfs-page1", "overlap-lpm-page1",
              "plain-refresh-off", "overlap-refresh-off"),
    "page16": ("plain-fcfs-page16", "plain-lpm-page16", "overlap-fcfs-page16", "overlap-lpm-page16",
               "plain-swa-bug", "overlap-swa-bug"),
    "models": ("plain-no-swa", "overlap-no-swa", "plain-eos", "overlap-eos", "plain-idle", "overlap-idle"),
}  # fmt: skip


class Workers:
    """One long-lived oracle worker per refresh setting, started on first use."""

    def __init__(self) -> None:
        self._by_refresh: dict[str, SchedOracle] = {}

    def __getitem__(self, refresh: str) -> SchedOracle:
        if refresh not in self._by_refresh:
            self._by_refresh[refresh] = SchedOracle(refresh)
        return self._by_refresh[refresh]

    def close(self) -> None:
        for w in self._by_refresh.values():
            w.close()
        self._by_refresh.clear()


def _batch_full_passes(lines: list[dict]) -> int:
    """Steps where requests waited but no pass reached ``calc_priority`` (batch_is_full kept)."""
    return sum(
        1
        for x in lines
        if x["type"] == "step" and x["waiting"] and x["batch_is_full"] and x["queue_order"] is None
    )


def check_exercised(needs: tuple[str, ...], totals: dict[str, int], slow: bool = False) -> None:
    """Each configuration exercises what it can, counted from the oracle's run lines: chunking
    and retraction everywhere, the SWA cap (and SGLang's bug) only where the SWA pool is at most
    one chunk plus a page, and what the configuration is for (retraction: see below)."""
    assert totals["chunked_steps"] > 0, totals
    # --no-swa retracts in few workloads (3 of CI's 30; none of slow seeds 1000-1049): a slow
    # slice of the full-attention configurations need not retract
    assert totals["retractions"] > 0 or (slow and "batch-full" in needs), totals
    if "swa-bug" not in needs:  # pools > chunk + page
        assert totals["swa_chunk_capped"] == 0 and totals["anomalies"] == 0 and totals["crashes"] == 0
    checks = {
        "swa-bug": totals["swa_chunk_capped"] > 0 and totals["anomalies"] > 0 and totals["crashes"] > 0,
        "refresh": totals["refreshes"] > 0,
        "no-refresh": totals["refreshes"] == 0,
        "lpm": totals["refreshes"] == 0 and totals["lpm_deprioritized"] > 0,
        "batch-full": totals["batch_full_passes"] > 0,
        "stop": totals["stops"] > 0,
        "reset": totals["ratio_resets"] > 1,
    }
    assert all(checks[n] for n in needs), ({n: checks[n] for n in needs}, totals)


def _add_counts(totals: dict[str, int], lines: list[dict]) -> None:
    for k, v in lines[-1]["counts"].items():
        totals[k] = totals.get(k, 0) + v
    totals["batch_full_passes"] += _batch_full_passes(lines)
    totals["crashes"] += lines[-1].get("crashed") is not None
    totals["stops"] += sum(
        1 for x in lines if x["type"] == "request" and (x["finish_reason"] or {}).get("type") == "stop"
    )


def compare(workers: Workers, name: str, seeds: range, check: bool = True) -> dict[str, int]:
    """Replay ``seeds``' workloads of configuration ``name`` in SGLang and kvplan, assert 0
    differences and (``check``) the exercised counts; the summed oracle counts."""
    knobs, style, refresh, needs = CONFIGS[name]
    oracle = workers[refresh]
    knobs = dict(knobs, waiting_prefix_refresh=refresh == "on")
    flags, _ = knob_flags(knobs)
    totals: dict[str, int] = {"batch_full_passes": 0, "stops": 0, "crashes": 0}
    for seed in seeds:
        rows = generate(seed, style=style, shape=SHAPES.get(name, COMPACT))
        ans = oracle.run(rows, flags)
        assert ans["ok"], ans.get("error")
        lines = ans["lines"]
        _add_counts(totals, lines)
        ours = kvplan_lines(rows, knobs)
        diff = first_differences(lines, ours)
        assert diff == [], f"{name} seed {seed}: {diff}"
        assert (ours[-1].get("crashed") is None) == (lines[-1].get("crashed") is None), f"seed {seed}"
    if check:
        check_exercised(needs, totals)
    return totals


def compare_slow(workers: Workers, name: str, request: pytest.FixtureRequest) -> None:
    """The slow run's slice of configuration ``name``, recorded in the report file if set."""
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("slow: run with -m slow")
    seeds = range(SLOW_FIRST, SLOW_FIRST + SLOW_WORKLOADS)
    t0 = time.perf_counter()
    totals = compare(workers, name, seeds, check=False)
    report = os.environ.get("KVPLAN_SCHED_SLOW_REPORT")
    if report:  # recorded before the exercised counts are checked: a short slice may lack one
        line = dict(config=name, first=seeds.start, workloads=len(seeds), differences=0, counts=totals)
        line["seconds"] = round(time.perf_counter() - t0, 1)
        with open(report, "a") as f:
            f.write(json.dumps(line) + "\n")
    check_exercised(CONFIGS[name][3], totals, slow=True)
