"""Differential tests: kvplan's cache replay against SGLang's own cache classes.

For each of six configurations -- SGLang 0.5.23 (``tombstone="unified"``,
``swa_eviction="interval"``) and 0.5.15 (``tombstone="legacy"``, ``swa_eviction="iteration"``)
at page sizes 1, 16 and 64 -- Hypothesis generates multi-turn workloads
(``tests/workload_gen.py``), the SGLang oracle serves them one request at a time, kvplan's
``replay_requests`` serves them too, and every request's ``prefix_len`` and the six pool sizes
at every checkpoint must agree.  Each configuration must also show, over its examples, full
eviction, SWA eviction, SWA tombstones and tombstone healing -- a differential test that never
reaches those paths proves little.

Environment:

* ``KVPLAN_ORACLE_EXAMPLES`` -- examples per configuration (default 300).
* ``KVPLAN_ORACLE_SMOKE_EXAMPLES`` -- examples per configuration of the oracle-only generator
  check (default 20).
* ``KVPLAN_REQUIRE_ORACLE=1`` -- a missing oracle venv fails instead of skipping (CI).
* ``KVPLAN_ORACLE_TREE_CORE`` -- 0.5.23 tree core for the differential test: ``rust``
  (default, SGLang's default) or ``python`` (slower; lets the oracle count heals itself).
* ``KVPLAN_ORACLE_STRICT=0`` -- only count differences in the extras (per-request eviction
  counts and ``cached_tokens``, eviction totals, final tree statistics) instead of failing.
* ``KVPLAN_ORACLE_REPORT`` -- append one JSON line of coverage and timing per configuration.
* ``KVPLAN_ORACLE_FAILURES`` -- folder for the JSONL of a failing workload (default
  ``out/oracle-failures``).

Run: ``.venv/bin/pytest -m oracle tests/test_differential_oracle.py`` (see
docs/differential-testing.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from oracle_harness import (
    CHECKPOINTS,
    REPO_ROOT,
    SGLANG_EVICTION_POLICIES,
    SIZE_KEYS,
    VERSIONS,
    OracleProcess,
    OracleWorker,
    OracleWorkloadError,
    compare_extras,
    compare_records,
    oracle_command_line,
    oracle_dir,
    oracle_missing_reason,
    oracle_python,
)
from workload_gen import (
    SETTINGS,
    Plan,
    PoolSetting,
    Turn,
    Workload,
    build_workload,
    check_feasible,
    workloads_for_page,
)

from policies.eviction_order import EVICTION_ORDERS

pytestmark = pytest.mark.oracle

PAGE_SIZES = (1, 16, 64)
CONFIGS = [(version, page) for version in ("0.5.23", "0.5.15") for page in PAGE_SIZES]
CONFIG_IDS = [f"sglang{v}-page{p}" for v, p in CONFIGS]
MIN_EXAMPLES_FOR_COVERAGE = 50
FIXED_PLAN = Plan(
    style="fixed",
    system_lens=(120,),
    conv_system=(0, 0, 0),
    conv_turns=(
        (Turn("continue", 60, 300), Turn("branch", 20, 5, cut=0.4), Turn("continue", 30, 1)),
        (Turn("continue", 150, 10), Turn("fork", 40, 20), Turn("regenerate", 0, 3)),
        (Turn("continue", 100, 1), Turn("continue", 200, 12)),
    ),
    order="turn-major",
)
"""A fixed workload plan (long answer, branch, fork, regenerate, 1-token answers) for the
worker-vs-CLI check, which needs one workload rather than a Hypothesis search."""
"""Below this many examples the coverage tallies are reported but not asserted."""


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    return int(value) if value else default


def _require_oracle(version: str) -> None:
    """Skip (or fail, under ``KVPLAN_REQUIRE_ORACLE=1``) when ``version`` cannot run."""
    reason = oracle_missing_reason(version)
    if reason is None:
        return
    if os.environ.get("KVPLAN_REQUIRE_ORACLE") == "1":
        pytest.fail(f"KVPLAN_REQUIRE_ORACLE=1 but {reason}")
    pytest.skip(reason)


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="session")
def oracle_process() -> Iterator[Callable[[str], OracleProcess]]:
    """``get(version)``: one lazily started oracle subprocess per SGLang version, shared by
    every configuration and test of the session (the sglang import is the expensive part)."""
    procs: dict[str, OracleProcess] = {}

    def get(version: str) -> OracleProcess:
        _require_oracle(version)
        if version not in procs:
            procs[version] = OracleProcess(version)
            procs[version].start()
        return procs[version]

    yield get
    for proc in procs.values():
        proc.close()


@pytest.fixture(scope="session")
def oracle_worker(
    oracle_process: Callable[[str], OracleProcess],
) -> Callable[..., OracleWorker]:
    """``get(version, setting, tree_core="rust", eviction_policy="lru")``: an
    :class:`OracleWorker` for one pool setting on the shared process of its version."""

    def get(
        version: str,
        setting: PoolSetting,
        tree_core: str = "rust",
        eviction_policy: str = "lru",
        eviction_policy_config: dict[str, Any] | None = None,
    ) -> OracleWorker:
        return OracleWorker(
            version,
            setting.page_size,
            setting.full_tokens,
            setting.swa_tokens,
            setting.window,
            max_context_len=setting.max_context_len,
            tree_core=tree_core,
            eviction_policy=eviction_policy,
            eviction_policy_config=eviction_policy_config,
            process=oracle_process(version),
        )

    return get


# --------------------------------------------------------------------------- tallies
@dataclass
class Tally:
    """What the generated workloads of one configuration made the caches do.

    Why: the comparison is only as strong as the paths it reaches, so the tests assert that
    eviction, tombstoning and healing were actually exercised, and report how often."""

    config: str
    examples: int = 0
    requests: int = 0
    prompt_tokens: int = 0
    hit_tokens: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    oracle_s: float = 0.0
    kvplan_s: float = 0.0
    wall_s: float = 0.0

    def add_oracle(self, wl: Workload, result: dict[str, Any]) -> None:
        """Count one oracle result (examples with each kind of event, and totals)."""
        self.examples += 1
        self.requests += len(wl.requests)
        self.prompt_tokens += result["total_prompt_tokens"]
        self.hit_tokens += result["total_prefix_hit_tokens"]
        ev = result["evictions"]
        self.counts["with_eviction_call"] += ev["calls"] > 0
        self.counts["with_full_eviction"] += ev["full_evicted"] > 0
        self.counts["with_swa_eviction"] += ev["swa_evicted"] > 0
        self.counts["with_tombstones_at_end"] += result["tree"]["tombstones"] > 0
        self.counts["with_decode_past_trigger"] += any(
            len(r["output_ids"]) >= wl.setting.long_answer for r in wl.requests
        )
        self.counts["with_single_token_answer"] += any(len(r["output_ids"]) == 1 for r in wl.requests)
        heals = result.get("oracle_heals")
        if heals is not None:
            self.counts["oracle_heal_observed"] += 1
            self.counts["with_heal_oracle"] += heals > 0
            self.counts["heals_oracle"] += heals
        self.counts[f"style_{wl.shape.get('style')}"] += 1
        self.counts[f"setting_{wl.setting.name}"] += 1

    def add_kvplan(self, oracle: dict[str, Any], result: Any) -> None:
        """Count kvplan's own counters, and examples whose extras differ (see compare_extras)."""
        counters = getattr(result, "counters", {}) or {}
        healed = counters.get("tombstones_healed")
        if healed is not None:
            self.counts["kvplan_heal_observed"] += 1
            self.counts["with_heal_kvplan"] += healed > 0
            self.counts["heals_kvplan"] += healed
        created = counters.get("tombstones_created")
        if created is not None:
            self.counts["with_tombstone_created_kvplan"] += created > 0
        self.counts["with_extra_differences"] += bool(compare_extras(oracle, result))

    def summary(self) -> dict[str, Any]:
        """JSON-able summary for the report line and the test output."""
        return dict(
            config=self.config,
            examples=self.examples,
            requests=self.requests,
            hit_rate=round(self.hit_tokens / max(1, self.prompt_tokens), 4),
            oracle_s=round(self.oracle_s, 2),
            kvplan_s=round(self.kvplan_s, 2),
            wall_s=round(self.wall_s, 2),
            oracle_ms_per_example=round(1000 * self.oracle_s / max(1, self.examples), 1),
            **dict(sorted(self.counts.items())),
        )

    def coverage_problems(self) -> list[str]:
        """Paths that no example reached (empty when coverage is as required)."""
        c = self.counts
        problems = [
            f"no example with {what}"
            for what in (
                "with_full_eviction",
                "with_swa_eviction",
                "with_tombstones_at_end",
                "with_decode_past_trigger",
                "with_single_token_answer",
            )
            if c[what] == 0
        ]
        if c["kvplan_heal_observed"]:
            if c["with_heal_kvplan"] == 0:
                problems.append("kvplan counted no tombstone healing in any example")
        elif c["oracle_heal_observed"]:
            if c["with_heal_oracle"] == 0:
                problems.append("the oracle observed no tombstone healing in any example")
        else:
            problems.append(
                "healing not observable: kvplan counters lack 'tombstones_healed' "
                "and the oracle runs the Rust tree core"
            )
        return problems

    def report(self, record_property: Callable[[str, Any], None]) -> None:
        """Print the tally, attach it to the JUnit report, and append it to
        ``$KVPLAN_ORACLE_REPORT`` if set."""
        summary = self.summary()
        print(f"\n[oracle tally] {json.dumps(summary)}")
        record_property("oracle_tally", json.dumps(summary))
        path = os.environ.get("KVPLAN_ORACLE_REPORT")
        if path:
            with open(path, "a") as f:
                f.write(json.dumps(summary) + "\n")


def _check_oracle_result(result: dict[str, Any], wl: Workload) -> None:
    """The oracle run must be trustworthy: no GPU kernel reached, no aborts, no retraction."""
    assert result["triton_launch_attempts"] == [], f"GPU kernel reached: {result['triton_launch_attempts']}"
    assert result["errors"] == [], f"oracle errors {result['errors']} on {wl.summary()}"
    assert result.get("retractions", 0) == 0 and result.get("aborts", 0) == 0
    assert result["sanity_check_failures"] == 0
    assert [r["rid"] for r in result["requests"]] == [r["rid"] for r in wl.requests]


def _save_failure(wl: Workload, tag: str) -> Path:
    root = Path(os.environ.get("KVPLAN_ORACLE_FAILURES", REPO_ROOT / "out" / "oracle-failures"))
    root.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha1(json.dumps(wl.requests).encode()).hexdigest()[:10]
    return wl.to_jsonl(root / f"{tag}-{wl.setting.name}-{digest}.jsonl")


def _oracle_run(worker: OracleWorker, wl: Workload, tag: str) -> dict[str, Any]:
    try:
        return worker.run(wl.requests)
    except OracleWorkloadError as e:
        path = _save_failure(wl, tag)
        raise AssertionError(
            f"oracle failed on a generated workload (the generator must keep requests feasible): "
            f"{e.error_type}: {str(e.response.get('error'))[:300]}\n{wl.summary()}\n"
            f"rerun: {oracle_command_line(worker.version, path, worker)}"
        ) from None


# --------------------------------------------------------------------------- harness tests
@pytest.mark.parametrize("version", ["0.5.23", "0.5.15"])
def test_worker_matches_fresh_cli_run(
    version: str, oracle_worker: Callable[..., OracleWorker], tmp_path: Path
) -> None:
    """A long-lived worker that served other configurations first answers exactly as a fresh
    CLI run of the driver on the same file -- the premise of sharing one process."""
    _require_oracle(version)
    setting = SETTINGS[16][1]
    wl = build_workload(setting, FIXED_PLAN, seed=11, vocab=50)
    path = wl.to_jsonl(tmp_path / "w.jsonl")
    warm_up = [("a", list(range(100)), [1] * 20), ("b", list(range(150)), [2] * 5)]
    for other in (SETTINGS[1][0], SETTINGS[64][1]):  # leave state behind, if any could leak
        oracle_worker(version, other).run(warm_up)
    via_worker = oracle_worker(version, setting).run(wl.requests)
    cmd = oracle_command_line(version, path, oracle_worker(version, setting)).split()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    via_cli = json.loads(proc.stdout)
    assert via_worker["requests"] == via_cli["requests"]
    for key in ("evictions", "final_sizes", "num_requests", "hit_rate", "triton_launch_attempts"):
        assert via_worker[key] == via_cli[key], key
    for key in ("nodes", "leaves", "tombstones", "tombstone_tokens", "full_tokens", "swa_tokens"):
        assert via_worker["tree"][key] == via_cli["tree"][key], key


@pytest.mark.parametrize("version", ["0.5.23", "0.5.15"])
def test_worker_survives_failing_workload(version: str, oracle_worker: Callable[..., OracleWorker]) -> None:
    """An infeasible workload (prompt larger than the SWA pool) is reported as an error answer
    and the same process goes on serving."""
    _require_oracle(version)
    setting = SETTINGS[1][0]
    worker = oracle_worker(version, setting)
    too_long = [("big", list(range(1, setting.swa_tokens + 50)), [7, 8])]
    with pytest.raises(OracleWorkloadError, match="(?i)out of memory"):
        worker.run(too_long)
    bad_token = [{"rid": "x", "input_ids": [1, "2"], "output_ids": [3]}]
    assert worker.process is not None
    response = worker.process.request({"requests": bad_token, "args": worker.driver_args})
    assert not response["ok"] and response["error_type"] == "WorkloadError"
    ok = worker.run([("a", [1, 2, 3, 4], [5, 6]), ("b", np.array([1, 2, 3, 4, 9]), [5])])
    assert [r["prefix_len"] for r in ok["requests"]] == [0, 4]  # the tree got prompt + output - 1


@pytest.mark.parametrize(("version", "page_size"), CONFIGS, ids=CONFIG_IDS)
def test_generated_workloads_run_on_oracle(
    version: str, page_size: int, oracle_worker: Callable[..., OracleWorker], record_property: Any
) -> None:
    """Oracle-only check of the generator (runs without kvplan's cache): every generated
    workload is feasible, the oracle stays on CPU code, the Rust and Python tree cores agree
    request by request (0.5.23), and eviction, tombstones and healing occur."""
    _require_oracle(version)
    tally = Tally(config=f"smoke-sglang{version}-page{page_size}")
    n = _env_int("KVPLAN_ORACLE_SMOKE_EXAMPLES", 20)
    t0 = time.perf_counter()

    @settings(
        max_examples=n,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(wl=workloads_for_page(page_size))
    def check(wl: Workload) -> None:
        assert check_feasible(wl) == []
        result = _oracle_run(oracle_worker(version, wl.setting, tree_core="python"), wl, "smoke")
        tally.oracle_s += result["oracle_wall_s"]
        _check_oracle_result(result, wl)
        tally.add_oracle(wl, result)
        if version == "0.5.23":
            rust = _oracle_run(oracle_worker(version, wl.setting, tree_core="rust"), wl, "smoke-rust")
            diffs = compare_records(result["requests"], rust["requests"])
            assert diffs == [], "Python and Rust tree cores disagree:\n" + "\n".join(diffs)

    check()
    tally.wall_s = time.perf_counter() - t0
    tally.report(record_property)
    if n >= 10:
        for what in ("with_swa_eviction", "with_tombstones_at_end", "with_heal_oracle"):
            assert tally.counts[what] > 0, f"{tally.config}: no example {what}: {tally.summary()}"


# --------------------------------------------------------------------------- the comparison
def _load_replay() -> tuple[Any, Any]:
    """kvplan's cache replay, imported lazily so this module collects before it exists."""
    try:
        from simulator.cache_replay import CacheReplayConfig, replay_requests
    except ImportError as e:
        pytest.skip(f"simulator.cache_replay not available yet ({e})")
    return CacheReplayConfig, replay_requests


@pytest.mark.parametrize("page_size", PAGE_SIZES, ids=[f"sglang0.5.23-page{p}" for p in PAGE_SIZES])
def test_cache_replay_matches_sglang(
    page_size: int, oracle_worker: Callable[..., OracleWorker], record_property: Any
) -> None:
    """kvplan's replay equals SGLang 0.5.23's cache request by request on generated workloads
    (0.5.15: tests/test_differential_oracle_v015.py, a file of its own so that pytest-xdist's
    ``--dist loadfile`` runs the two versions side by side: together they were CI's longest file)."""
    check_cache_replay("0.5.23", page_size, oracle_worker, record_property)


def check_cache_replay(
    version: str, page_size: int, oracle_worker: Callable[..., OracleWorker], record_property: Any
) -> None:
    """Replay hypothesis-generated workloads through SGLang ``version`` and kvplan; compare."""
    _require_oracle(version)
    config_cls, replay_requests = _load_replay()
    ver = VERSIONS[version]
    tree_core = os.environ.get("KVPLAN_ORACLE_TREE_CORE", "rust")
    strict = os.environ.get("KVPLAN_ORACLE_STRICT", "1") != "0"
    tally = Tally(config=f"sglang{version}-page{page_size}")
    n = _env_int("KVPLAN_ORACLE_EXAMPLES", 300)
    t0 = time.perf_counter()

    @settings(
        max_examples=n,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(wl=workloads_for_page(page_size))
    def check(wl: Workload) -> None:
        s = wl.setting
        oracle = _oracle_run(oracle_worker(version, s, tree_core=tree_core), wl, f"sglang{version}")
        tally.oracle_s += oracle["oracle_wall_s"]
        _check_oracle_result(oracle, wl)
        cfg = config_cls(
            page_size=s.page_size,
            full_tokens=s.full_tokens,
            swa_tokens=s.swa_tokens,
            window=s.window,
            swa_eviction=ver.swa_eviction,
            tombstone=ver.tombstone,
            eviction_policy="lru",
            check_invariants=True,
        )
        requests = [
            (r["rid"], np.asarray(r["input_ids"], dtype=np.int64), list(r["output_ids"])) for r in wl.requests
        ]
        t1 = time.perf_counter()
        result = replay_requests(requests, cfg)
        tally.kvplan_s += time.perf_counter() - t1
        diffs = compare_records(oracle["requests"], result.records)
        if strict:  # every checkpoint must be reported, not only the ones kvplan chooses to
            diffs += [
                f"{r.get('rid')}: kvplan record lacks {cp}"
                for r in result.records
                for cp in CHECKPOINTS
                if cp not in r and (cp != "before_release" or r.get("answer_len", 2) > 1)
            ][:5]
        if diffs:
            path = _save_failure(wl, f"sglang{version}")
            raise AssertionError(
                f"kvplan != SGLang {version} ({ver.tombstone} + {ver.swa_eviction}) on "
                f"{wl.summary()}\n  "
                + "\n  ".join(diffs)
                + f"\nworkload: {path}"
                + f"\noracle: {oracle_command_line(version, path, oracle_worker(version, s))}"
                + f"\nkvplan: kvplan cache-replay {path} --page-size {s.page_size} --full-tokens "
                f"{s.full_tokens} --swa-tokens {s.swa_tokens} --window {s.window} --swa-eviction "
                f"{ver.swa_eviction} --tombstone {ver.tombstone} --json"
            )
        tally.add_oracle(wl, oracle)
        tally.add_kvplan(oracle, result)
        if strict:
            extras = compare_extras(oracle, result)
            if extras:
                path = _save_failure(wl, f"sglang{version}-extras")
                raise AssertionError(
                    f"sizes agree but extras differ from SGLang {version} on {wl.summary()}\n  "
                    + "\n  ".join(extras)
                    + f"\nworkload: {path} (KVPLAN_ORACLE_STRICT=0 reports these instead of failing)"
                )

    check()
    tally.wall_s = time.perf_counter() - t0
    tally.report(record_property)
    if n >= MIN_EXAMPLES_FOR_COVERAGE:
        problems = tally.coverage_problems()
        assert problems == [], f"{tally.config}: {problems}\n{tally.summary()}"


def test_compare_records_flags_each_kind_of_difference() -> None:
    """The comparison itself, without any oracle: order, prefix, a size at one checkpoint, a
    checkpoint present on one side only, and the extras."""
    sizes = dict.fromkeys(SIZE_KEYS, 0)
    rec = dict(rid="a", prompt_len=5, prefix_len=0, after_match=sizes, after_release=sizes, evict_calls=0)
    oracle = [rec, dict(rec, rid="b", prefix_len=4, before_release=sizes)]
    assert compare_records(oracle, [dict(r) for r in oracle]) == []
    assert "rid" in compare_records(oracle, oracle[::-1])[0]
    assert (
        "prefix_len oracle 4 != kvplan 3" in compare_records(oracle, [rec, dict(oracle[1], prefix_len=3)])[0]
    )
    bumped = dict(oracle[1], after_match=dict(sizes, swa_available=16))
    assert compare_records(oracle, [rec, bumped]) == ["b.after_match (oracle!=kvplan): swa_available 0!=16"]
    missing = {k: v for k, v in oracle[1].items() if k != "before_release"}
    assert compare_records(oracle, [rec, missing]) == []  # kvplan never reports it: skipped
    both = [dict(rec, before_release=sizes), oracle[1]]
    assert compare_records(both, [both[0], missing]) == ["b.before_release: present in oracle only"]
    assert len(compare_records(oracle, [rec])) == 1  # request count

    @dataclass
    class Result:
        records: list[dict[str, Any]]
        evictions: dict[str, int]
        tree_stats: dict[str, int]

    o = dict(requests=oracle, evictions=dict(calls=1, full_evicted=2, swa_evicted=3), tree=dict(nodes=4))
    same = Result([dict(r) for r in oracle], dict(o["evictions"]), dict(nodes=4))
    assert compare_extras(o, same) == []
    off = Result([rec, dict(oracle[1], evict_calls=2)], dict(o["evictions"], calls=9), dict(nodes=5))
    assert len(compare_extras(o, off)) == 3


def test_oracle_paths_resolve() -> None:
    """The oracle folder and venv locations follow the documented defaults and overrides."""
    assert oracle_dir().name == "oracle"
    for version in VERSIONS:
        assert oracle_python(version).parts[-3] in ("venv", "venv015")


# --------------------------------------------------------------------------- eviction orders
SGLANG_ORDERS = [name for name in EVICTION_ORDERS.names() if name in SGLANG_EVICTION_POLICIES]
"""Every registered order SGLang also has: each is checked against SGLang's own tree. The
others (kvplan's own, e.g. ``window-aware``) have hand-computed scenarios in
tests/test_eviction_orders.py, which also fails if a registered order has neither."""
ORDER_PAGES = (1, 16, 64)
KEEPS_THE_OLDEST = {"mru", "filo"}
"""In :func:`test_sglang_orders_pick_different_victims`, the orders that evict the newest
conversation and so keep the oldest one cached; every other SGLang order evicts the oldest (all
keys there tie on hits and priority, and TLRU's default budget makes no leaf TEL-safe)."""


def test_sglang_eviction_policy_list_is_current(oracle_worker: Callable[..., OracleWorker]) -> None:
    """SGLang names its orders when refusing an unknown one: the list must be ours."""
    _require_oracle("0.5.23")
    worker = oracle_worker("0.5.23", SETTINGS[1][0], eviction_policy="no-such-policy")
    response = worker.run_raw([("a", [1, 2, 3], [4])])
    assert not response["ok"]
    supported = str(response["error"]).split("Supported policies:")[1]
    assert sorted(x.strip(" '.") for x in supported.split(",")) == sorted(SGLANG_EVICTION_POLICIES)


@pytest.mark.parametrize("page_size", ORDER_PAGES)
@pytest.mark.parametrize("order", SGLANG_ORDERS)
def test_eviction_order_matches_sglang(
    order: str, page_size: int, oracle_worker: Callable[..., OracleWorker], record_property: Any
) -> None:
    """kvplan's unified tree with ``--radix-eviction-policy ORDER`` equals SGLang 0.5.23's
    ``UnifiedRadixCache(eviction_policy=ORDER)`` request by request, on workloads whose FULL
    pool is small enough that FULL leaves are evicted (asserted, so the test cannot pass
    without running the order). Also counts examples where ORDER's victims change SGLang's
    records compared with LRU's, to show the orders are told apart."""
    _require_oracle("0.5.23")
    config_cls, replay_requests = _load_replay()
    tally = Tally(config=f"order-{order}-page{page_size}")
    n = _env_int("KVPLAN_ORACLE_ORDER_EXAMPLES", 12)

    @settings(
        max_examples=n,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(wl=workloads_for_page(page_size))
    def check(wl: Workload) -> None:
        s = wl.setting
        oracle = _oracle_run(oracle_worker("0.5.23", s, eviction_policy=order), wl, f"order-{order}")
        _check_oracle_result(oracle, wl)
        cfg = config_cls(
            page_size=s.page_size,
            full_tokens=s.full_tokens,
            swa_tokens=s.swa_tokens,
            window=s.window,
            eviction_policy=order,
            check_invariants=True,
        )
        result = replay_requests(wl.replay_requests(), cfg)
        diffs = compare_records(oracle["requests"], result.records) + compare_extras(oracle, result)
        if diffs:
            path = _save_failure(wl, f"order-{order}")
            rerun = oracle_command_line("0.5.23", path, oracle_worker("0.5.23", s, eviction_policy=order))
            raise AssertionError(
                f"kvplan --radix-eviction-policy {order} != SGLang on {wl.summary()}\n  "
                + "\n  ".join(diffs)
                + f"\noracle: {rerun}"
            )
        tally.add_oracle(wl, oracle)
        tally.counts["full_leaves_deleted_kvplan"] += result.counters["leaves_deleted"]
        if order != "lru" and oracle["evictions"]["full_evicted"] > 0:
            lru = _oracle_run(oracle_worker("0.5.23", s), wl, "order-lru")
            tally.counts["differs_from_lru"] += lru["requests"] != oracle["requests"]

    check()
    tally.report(record_property)
    assert tally.counts["with_full_eviction"] > 0, f"FULL eviction never bound: {tally.summary()}"
    assert tally.counts["full_leaves_deleted_kvplan"] > 0


@pytest.mark.parametrize("page_size", ORDER_PAGES)
def test_tlru_with_a_tail_budget_matches_sglang(
    page_size: int, oracle_worker: Callable[..., OracleWorker], monkeypatch: pytest.MonkeyPatch
) -> None:
    """TLRU with SGLang's ``threshold`` / ``next_prompt_estimate`` set (passed to
    ``CacheInitParams.eviction_policy_config``): TEL-safe leaves go first. A leaf at its branch's
    deepest point is safe when it is at most ``threshold - next_prompt_estimate`` tokens long,
    so :data:`TLRU_BUDGET` makes some leaves safe and some not; kvplan's ``TLRU`` must follow
    SGLang exactly. The tally counts examples whose records differ from LRU's; a difference is
    pinned by hand in :func:`test_sglang_orders_pick_different_victims`."""
    _require_oracle("0.5.23")
    config_cls, replay_requests = _load_replay()
    tlru = TLRU_BUDGET
    _configure_tlru(monkeypatch, tlru)
    counts: Counter[str] = Counter()

    @settings(
        max_examples=_env_int("KVPLAN_ORACLE_ORDER_EXAMPLES", 12),
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(wl=workloads_for_page(page_size))
    def check(wl: Workload) -> None:
        s = wl.setting
        worker = oracle_worker("0.5.23", s, eviction_policy="tlru", eviction_policy_config=tlru)
        oracle = _oracle_run(worker, wl, "order-tlru-budget")
        _check_oracle_result(oracle, wl)
        cfg = config_cls(
            page_size=s.page_size,
            full_tokens=s.full_tokens,
            swa_tokens=s.swa_tokens,
            window=s.window,
            eviction_policy="tlru",
            check_invariants=True,
        )
        result = replay_requests(wl.replay_requests(), cfg)
        diffs = compare_records(oracle["requests"], result.records) + compare_extras(oracle, result)
        if diffs:
            path = _save_failure(wl, "order-tlru-budget")
            raise AssertionError(
                f"kvplan tlru {tlru} != SGLang on {wl.summary()}\n  " + "\n  ".join(diffs) + f"\n{path}"
            )
        if oracle["evictions"]["full_evicted"] > 0:
            counts["with_full_eviction"] += 1
            lru = _oracle_run(oracle_worker("0.5.23", s), wl, "order-lru")
            counts["differs_from_lru"] += lru["requests"] != oracle["requests"]

    check()
    print(f"\n[tlru budget page {page_size}] {dict(counts)}")
    assert counts["with_full_eviction"] > 0


TLRU_BUDGET = {"threshold": 140, "next_prompt_estimate": 40}
"""A tail budget of 100 tokens: a branch whose deepest insert reached L tokens needs L - 100
cached, so a leaf is TEL-safe when the nodes above it hold at least that many."""


def _configure_tlru(monkeypatch: pytest.MonkeyPatch, config: dict[str, int]) -> None:
    """Make the cache replay build ``tlru`` with ``config`` (as SGLang's policy config does)."""
    import simulator.cache_replay as cache_replay

    class Configured:
        def create(self, name: str, **kwargs: Any) -> Any:
            return EVICTION_ORDERS.create(name, **(config if name == "tlru" else {}), **kwargs)

    monkeypatch.setattr(cache_replay, "EVICTION_ORDERS", Configured())


def test_sglang_orders_pick_different_victims(
    oracle_worker: Callable[..., OracleWorker], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hand-built workload on which the orders must disagree, so the order tests above can
    tell a wrong order from a right one. Page 1, W = 32, FULL pool 1024, SWA pool 1024 (no SWA
    pressure). A, B, C: 150-token prompts (the tree keeps 150 each), then D: 370 tokens (fits:
    1024 - 450 = 574 free), then E: 300 tokens, 96 short, so FULL eviction picks victims. Oldest
    first (lru, fifo, ...) removes A's two nodes (32-token tail, then the 118-token rest: 150 >=
    96); newest first (mru, filo) removes D's. Last, F = A's prompt plus one token: its prefix is
    0 where A went and 150 where A stayed. TLRU with :data:`TLRU_BUDGET`: each 32-token tail sits
    under enough cached tokens (118 >= 150 - 100, 338 >= 370 - 100) and is TEL-safe, each upper
    part is not (0 above it); the tails go first, oldest first (A, B, C: 32 * 3 = 96), so A keeps
    its 118-token upper part, which still holds live SWA: F's prefix is 118."""
    _require_oracle("0.5.23")
    config_cls, replay_requests = _load_replay()
    setting = PoolSetting(name="orders", page_size=1, full_tokens=1024, swa_tokens=1024, window=32)
    base = {"A": 1000, "B": 2000, "C": 3000, "D": 4000, "E": 5000}
    lens = {"A": 150, "B": 150, "C": 150, "D": 370, "E": 300}
    requests = [
        {"rid": k, "input_ids": list(range(base[k], base[k] + lens[k])), "output_ids": [7]} for k in base
    ]
    requests.append({"rid": "F", "input_ids": list(range(1000, 1150)) + [9], "output_ids": [7]})
    cases = [(order, None, 150 if order in KEEPS_THE_OLDEST else 0) for order in SGLANG_ORDERS]
    cases.append(("tlru", TLRU_BUDGET, 118))
    for order, config, want_f in cases:
        oracle = oracle_worker("0.5.23", setting, eviction_policy=order, eviction_policy_config=config).run(
            requests
        )
        assert oracle["evictions"]["full_evicted"] >= 96
        assert [r["prefix_len"] for r in oracle["requests"]] == [0, 0, 0, 0, 0, want_f], (order, config)
        _configure_tlru(monkeypatch, config or {})
        cfg = config_cls(page_size=1, full_tokens=1024, swa_tokens=1024, window=32, eviction_policy=order)
        result = replay_requests([(r["rid"], r["input_ids"], r["output_ids"]) for r in requests], cfg)
        assert compare_records(oracle["requests"], result.records) == [], (order, config)
