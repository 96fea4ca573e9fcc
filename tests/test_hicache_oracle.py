"""Differential tests of kvplan's HiCache host tier (L2) against SGLang 0.5.23's own HiCache.

The oracle is ``../shared/oracle/drive_hicache.py`` (HICACHE.md), served by one long-lived
``oracle_worker.py --driver drive_hicache`` process; kvplan is
:func:`simulator.radix.hicache_replay.replay_hicache`. Every per-request key of the oracle's
record (device prefix, host hits, loaded length, prefix, used tokens per tier after the acks,
backed-up nodes, cached tokens per tier) and every whole-run count must agree; the counts summed
over a configuration's workloads must show that it exercised demotion, host eviction, deletion
(write-through policies) and load-back.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hicache_workloads import HiPools, hicache_workload
from oracle_harness import OracleProcess, oracle_missing_reason

from simulator.cache_replay import requests_from_tokens
from simulator.radix.hicache_replay import AFTER_KEYS, HiCacheReplayConfig, replay_hicache

pytestmark = pytest.mark.oracle

N_WORKLOADS = int(os.environ.get("KVPLAN_HICACHE_WORKLOADS", "30"))

POOLS = {
    1: HiPools(1, 1024, 512, 64),
    16: HiPools(16, 1024, 512, 64),
    64: HiPools(64, 1024, 768, 80),
}

SHORT_KEYS = (
    "rid",
    "prompt_len",
    "device_prefix_len",
    "host_hit_len",
    "swa_host_hit_len",
    "host_loaded_len",
    "prefix_len",
)
TIER_KEYS = ("cached_tokens", "cached_tokens_device", "cached_tokens_host")


@dataclass(frozen=True)
class L2Config:
    """One HiCache configuration of issue 10 item 8."""

    policy: str
    ratio: float
    page: int
    eviction: str = "lru"
    size_gb: float = 0.0
    max_conv: int = 8  # more conversations where the host pool is large
    storage: str | None = None  # L3: "file" (the oracle's --storage file)
    prefetch_policy: str = "wait_complete"
    prefetch_threshold: int = 64

    @property
    def id(self) -> str:
        size = f"-size{self.size_gb:g}" if self.size_gb else ""
        l3 = f"-L3{self.storage}-{self.prefetch_policy}" if self.storage else ""
        return f"{self.policy}-r{self.ratio:g}-p{self.page}-{self.eviction}{size}{l3}"

    def storage_args(self) -> dict[str, Any]:
        if self.storage is None:
            return {}
        return dict(
            storage=self.storage,
            prefetch_policy=self.prefetch_policy,
            prefetch_threshold=self.prefetch_threshold,
        )

    def oracle_args(self, pools: HiPools) -> dict[str, Any]:
        return dict(
            page_size=pools.page_size,
            full_size=pools.full_tokens,
            swa_size=pools.swa_tokens,
            window=pools.window,
            max_context_len=4096,
            max_reqs=16,
            write_policy=self.policy,
            hicache_ratio=self.ratio,
            hicache_size=self.size_gb,
            eviction_policy=self.eviction,
            per_request=True,
            batch=1,
            **self.storage_args(),
        )

    def kvplan(self, pools: HiPools, check_invariants: bool = True) -> HiCacheReplayConfig:
        return HiCacheReplayConfig(
            page_size=pools.page_size,
            full_tokens=pools.full_tokens,
            swa_tokens=pools.swa_tokens,
            window=pools.window,
            eviction_policy=self.eviction,
            write_policy=self.policy,
            hicache_ratio=self.ratio,
            hicache_size=self.size_gb,
            check_invariants=check_invariants,
            storage_backend=self.storage,
            prefetch_policy=self.prefetch_policy,
            prefetch_threshold=self.prefetch_threshold,
        )


CI_CONFIGS = [
    L2Config("write_through", 2, 1),
    L2Config("write_through", 1, 16),
    L2Config("write_through", 4, 64, max_conv=14),
    L2Config("write_through", 2, 64, eviction="lfu"),
    L2Config("write_through_selective", 2, 1),
    L2Config("write_through_selective", 3, 16, max_conv=20),
    L2Config("write_back", 2, 1),
    L2Config("write_back", 2, 16),
    L2Config("write_through", 2, 16, size_gb=0.0002),
]

# L3 (the oracle's SGLang HiCacheFile) at page 16: prefetch on enqueue, threshold 64 tokens
L3_CONFIGS = [
    L2Config("write_through", 1, 16, storage="file", prefetch_policy="wait_complete"),
    L2Config("write_through_selective", 1, 16, storage="file", prefetch_policy="best_effort"),
    L2Config("write_back", 2, 16, max_conv=20, storage="file", prefetch_policy="wait_complete"),
]
CI_CONFIGS += L3_CONFIGS

SLOW_CONFIGS = [
    L2Config(policy, ratio, page, storage=storage)
    for storage in (None, "file")
    for policy in ("write_through", "write_through_selective", "write_back")
    for ratio in (1, 2, 3, 4)
    for page in (1, 16, 64)
]


def slow_seeds() -> range:
    """The slow run's workloads: ``KVPLAN_HICACHE_SLOW_WORKLOADS`` (default 200) seeds from
    ``KVPLAN_HICACHE_SLOW_FIRST`` (default 0), so a long run can be split into shards."""
    first = int(os.environ.get("KVPLAN_HICACHE_SLOW_FIRST", "0"))
    return range(first, first + int(os.environ.get("KVPLAN_HICACHE_SLOW_WORKLOADS", "200")))


class HiCacheOracle(OracleProcess):
    """The 0.5.23 oracle worker serving ``drive_hicache``'s per-workload ``run``."""

    def start(self) -> None:
        import subprocess
        import tempfile
        import time

        import oracle_harness as h

        if self.proc is not None and self.proc.poll() is None:
            return
        self._stderr_file = tempfile.TemporaryFile()
        cmd = [str(h.oracle_python("0.5.23")), str(h.WORKER_SCRIPT), "--oracle-dir", str(h.oracle_dir())]
        cmd += ["--driver", "drive_hicache", "--", *self.base_flags]
        env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1")
        env.pop("PYTHONPATH", None)
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr_file, env=env, bufsize=0
        )
        self._buf = b""
        t0 = time.perf_counter()
        self.ready = self._read_json(self.start_timeout_s)
        self.ready["startup_s"] = round(time.perf_counter() - t0, 3)

    def run(self, requests: list[dict], args: dict[str, Any]) -> dict[str, Any]:
        answer = self.request({"requests": requests, "args": args})
        assert answer.get("ok"), answer.get("traceback") or answer
        return answer["result"]


@pytest.fixture(scope="module")
def hicache_oracle() -> Iterator[HiCacheOracle]:
    reason = oracle_missing_reason("0.5.23")
    if reason:
        if os.environ.get("KVPLAN_REQUIRE_ORACLE", "1") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    proc = HiCacheOracle("0.5.23", base_flags=())
    with proc:
        yield proc


def oracle_view(rec: dict[str, Any]) -> dict[str, Any]:
    """The compared keys of one oracle record (full form)."""
    out = {k: rec[k] for k in SHORT_KEYS + TIER_KEYS}
    for k in ("cached_tokens_storage", "storage_loaded_len"):
        if k in rec:
            out[k] = rec[k]
    out["after"] = {k: rec["after_acks"][k] for k in AFTER_KEYS}
    out["backed_up_nodes"] = rec["tree"]["backed_up_nodes"]
    return out


def compare(oracle: dict[str, Any], sim: dict[str, Any]) -> list[str]:
    """Readable differences: per request, then whole-run counts and host capacities."""
    diffs = []
    if len(oracle["requests"]) != len(sim["requests"]):
        diffs.append(f"{len(oracle['requests'])} oracle records, {len(sim['requests'])} kvplan records")
    for o_rec, k_rec in zip(oracle["requests"], sim["requests"], strict=False):
        o = oracle_view(o_rec)
        for key, value in o.items():
            if k_rec.get(key) != value:
                diffs.append(f"{o['rid']}.{key}: oracle {value} kvplan {k_rec.get(key)}")
    for key, value in oracle["counts"].items():
        if sim["counts"].get(key, 0) != value:
            diffs.append(f"counts.{key}: oracle {value} kvplan {sim['counts'].get(key, 0)}")
    for key in ("host_full_capacity", "host_swa_capacity"):
        if oracle["hicache"][key] != sim["hicache"][key]:
            diffs.append(f"{key}: oracle {oracle['hicache'][key]} kvplan {sim['hicache'][key]}")
    return diffs


def run_config(oracle: HiCacheOracle, cfg: L2Config, seeds: range, invariants_every: int = 1) -> Counter:
    """Replay ``seeds`` on both sides; assert 0 differences; the summed oracle counts. kvplan
    checks its invariants after every step of every ``invariants_every``-th workload (the
    check walks the tree at every step: it costs 7x the replay)."""
    pools = POOLS[cfg.page]
    total: Counter = Counter()
    for seed in seeds:
        reqs = hicache_workload(pools, seed, cfg.max_conv)
        o = oracle.run(reqs, cfg.oracle_args(pools))
        assert not o["errors"], o["errors"][:3]
        workload = requests_from_tokens(
            [(r["rid"], r["input_ids"], r["output_ids"]) for r in reqs], pools.page_size
        )
        k = replay_hicache(workload, cfg.kvplan(pools, check_invariants=seed % invariants_every == 0))
        diffs = compare(o, k)
        assert not diffs, f"{cfg.id} seed {seed}: {len(diffs)} differences, first: {diffs[:8]}"
        total.update(o["counts"])
    return total


@pytest.mark.parametrize("cfg", CI_CONFIGS, ids=[c.id for c in CI_CONFIGS])
def test_hicache_matches_sglang(hicache_oracle: HiCacheOracle, cfg: L2Config) -> None:
    total = run_config(hicache_oracle, cfg, range(N_WORKLOADS), invariants_every=3)
    assert total["demoted_nodes"] > 0, total
    assert total["load_back_ok"] > 0, total
    assert total["host_evicted_full_tokens"] + total["host_evicted_swa_tokens"] > 0, total
    if cfg.policy == "write_through_selective":
        assert total["deleted_nodes"] > 0, total
    if cfg.policy == "write_back":
        assert total["write_back_deferred"] > 0, total
    if cfg.storage:
        assert total["storage_backup_acks"] > 0 and total["prefetch_issued"] > 0, total
        if cfg.prefetch_policy == "wait_complete":
            assert total["prefetch_done"] > 0 and total["prefetch_tokens"] > 0, total


@pytest.mark.slow
@pytest.mark.parametrize("cfg", SLOW_CONFIGS, ids=[c.id for c in SLOW_CONFIGS])
def test_hicache_full_matrix(hicache_oracle: HiCacheOracle, cfg: L2Config, request) -> None:
    if "slow" not in (request.config.option.markexpr or ""):
        pytest.skip("the full HiCache matrix runs only with -m slow")
    report = os.environ.get("KVPLAN_HICACHE_SLOW_REPORT")
    seeds = slow_seeds()
    total = run_config(hicache_oracle, cfg, seeds)
    if report:  # one line per configuration: workloads compared (0 differences) and counts
        import json

        with open(report, "a") as f:
            f.write(json.dumps(dict(config=cfg.id, seeds=[seeds.start, seeds.stop], counts=total)) + "\n")


@pytest.mark.parametrize(
    "cfg", [CI_CONFIGS[1], CI_CONFIGS[6], CI_CONFIGS[8], L3_CONFIGS[0], L3_CONFIGS[2]], ids=lambda c: c.id
)
def test_cli_json_matches_sglang(hicache_oracle: HiCacheOracle, cfg: L2Config, tmp_path) -> None:
    """``kvplan cache-replay --enable-hierarchical-cache --json`` with SGLang's flag names prints
    the oracle's short-form records and counts."""
    import json

    from typer.testing import CliRunner

    from simulator.cli.main import app

    pools = POOLS[cfg.page]
    reqs = hicache_workload(pools, 1000 + cfg.page)
    path = tmp_path / "w.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in reqs))
    args = ["cache-replay", str(path), "--enable-hierarchical-cache", "--json", "--check-invariants"]
    args += ["--page-size", str(pools.page_size), "--full-tokens", str(pools.full_tokens)]
    args += ["--swa-tokens", str(pools.swa_tokens), "--window", str(pools.window)]
    args += ["--hicache-write-policy", cfg.policy, "--hicache-ratio", str(cfg.ratio)]
    args += ["--hicache-size", str(cfg.size_gb), "--radix-eviction-policy", cfg.eviction]
    if cfg.storage:
        args += ["--hicache-storage-backend", cfg.storage]
        args += ["--hicache-storage-prefetch-policy", cfg.prefetch_policy]
        extra = json.dumps({"prefetch_threshold": cfg.prefetch_threshold})
        args += ["--hicache-storage-backend-extra-config", extra]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in res.stdout.strip().splitlines()]
    sim = dict(requests=rows[:-1], counts=rows[-1]["summary"]["counts"])
    sim["hicache"] = {k: rows[-1]["summary"][k] for k in ("host_full_capacity", "host_swa_capacity")}
    assert not compare(hicache_oracle.run(reqs, cfg.oracle_args(pools)), sim)
