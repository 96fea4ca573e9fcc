"""HiCache flags: SGLang 0.5.23's defaults, its resolution (hicache_hook.py) and the extra-config
parsing of HybridCacheController.parse_storage_backend_extra_config; the flags on the CLI."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from simulator.cli.main import app
from simulator.errors import ConfigError
from simulator.hicache_args import (
    HiCacheArgs,
    _resolve_storage_layout,
    resolve_hicache_args,
)

runner = CliRunner()


def resolved(**kw):
    return resolve_hicache_args(HiCacheArgs(enable_hierarchical_cache=True, **kw))


def test_defaults_are_sglangs():
    r = resolved()
    assert (r.write_policy, r.io_backend, r.mem_layout, r.prefetch_policy) == (
        "write_through",
        "kernel",
        "page_first",
        "timeout",
    )
    assert r.storage is None and r.write_through_threshold == 1
    assert resolved(hicache_write_policy="write_through_selective").write_through_threshold == 2


def test_layout_io_rewrites():
    r = resolved(hicache_io_backend="kernel", hicache_mem_layout="page_first_direct")
    assert (r.io_backend, r.mem_layout) == ("direct", "page_first_direct") and r.notes
    r = resolved(hicache_io_backend="direct", hicache_mem_layout="page_first")
    assert (r.io_backend, r.mem_layout) == ("direct", "page_first_direct")
    r = resolved(hicache_io_backend="direct", hicache_mem_layout="layer_first")
    assert (r.io_backend, r.mem_layout, r.notes) == ("direct", "layer_first", ())


def test_storage_layout_rewrite_for_mooncake():
    notes: list[str] = []
    assert _resolve_storage_layout("mooncake", "kernel", "layer_first", notes) == "page_first"
    assert _resolve_storage_layout("npu_memcache", "direct", "layer_first", notes) == "page_first_direct"
    assert _resolve_storage_layout("file", "kernel", "layer_first", notes) == "layer_first"
    assert len(notes) == 2


@pytest.mark.parametrize(
    "kw",
    [
        dict(hicache_io_backend="direct", hicache_mem_layout="page_head"),
        dict(hicache_mem_layout="page_first_kv_split"),
        dict(hicache_io_backend="kernel_ascend"),
        dict(hicache_storage_backend="mooncake"),
        dict(hicache_host_memory_mode="buffer_only"),
        dict(hicache_write_policy="write_around"),
    ],
)
def test_refusals(kw):
    with pytest.raises(ConfigError):
        resolved(**kw)


def test_buffer_only_rewrites_only_write_back():
    r = resolved(
        hicache_host_memory_mode="buffer_only",
        hicache_storage_backend="sim",
        hicache_write_policy="write_back",
    )
    assert r.write_policy == "write_through"
    r = resolved(
        hicache_host_memory_mode="buffer_only",
        hicache_storage_backend="sim",
        hicache_write_policy="write_through_selective",
    )
    assert r.write_policy == "write_through_selective"


def test_radix_cache_off_excludes_hicache():
    with pytest.raises(ConfigError, match="mutually exclusive"):
        resolve_hicache_args(HiCacheArgs(hicache_ratio=2.0), disable_radix_cache=True)


def test_extra_config_knobs_and_types(tmp_path):
    extra = {"prefetch_threshold": 64, "prefetch_timeout_base": 2, "prefetch_timeout_per_ki_token": 0.5}
    r = resolved(hicache_storage_backend="file", hicache_storage_backend_extra_config=json.dumps(extra))
    assert (r.prefetch_threshold, r.prefetch_timeout_base, r.prefetch_timeout_per_ki_token) == (64, 2.0, 0.5)
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"prefetch_threshold": 32}))
    assert (
        resolved(
            hicache_storage_backend="file", hicache_storage_backend_extra_config=f"@{path}"
        ).prefetch_threshold
        == 32
    )
    for bad in ('{"prefetch_threshold": 1.5}', '{"prefetch_timeout_base": "1"}', "[1]", "{nope"):
        with pytest.raises(ConfigError):
            resolved(hicache_storage_backend="file", hicache_storage_backend_extra_config=bad)
    # Without a storage backend SGLang never reads the extra config.
    r = resolved(hicache_storage_backend_extra_config="{nope")
    assert r.prefetch_threshold == 256 and r.notes


def test_storage_tier_from_sim_knobs_and_kvplan_flags():
    s = resolved(hicache_storage_backend="sim").storage
    assert (s.read_gbps, s.write_gbps, s.op_latency_s, s.capacity_bytes) == (5.0, 5.0, 100e-6, 0)
    s = resolved(
        hicache_storage_backend="sim", hicache_storage_backend_extra_config='{"sim_write_gbps": 2}'
    ).storage
    assert (s.read_gbps, s.write_gbps) == (2.0, 2.0)  # read defaults to write
    s = resolved(
        hicache_storage_backend="file",
        storage_read_gbps=7,
        storage_write_gbps=3,
        storage_op_latency_us=20,
        storage_capacity_gb=1.5,
    ).storage
    assert (s.read_gbps, s.write_gbps, s.op_latency_s, s.capacity_bytes) == (7, 3, 20e-6, 1_500_000_000)


def test_served_runs_serve_hicache_pools_shows_it():
    res = runner.invoke(app, ["run", "--limit", "2", "--enable-hierarchical-cache"])
    assert res.exit_code == 0 and "HiCache (kvplan; write_through" in res.output, res.output
    argv = ["bench-multiturn", "--hicache-ratio", "2", "--num-clients", "2", "--num-rounds", "2", "--json"]
    res = runner.invoke(app, argv)
    assert res.exit_code == 0, res.output
    h = json.loads(res.output)["hicache"]
    assert h["host_full_capacity"] > 0 and h["backups"] > 0
    argv = ["run", "--limit", "2", "--hicache-ratio", "2", "--hicache-storage-backend", "sim"]
    res = runner.invoke(app, argv)
    assert res.exit_code == 0 and "L3 (sim, prefetch timeout" in res.output, res.output
    res = runner.invoke(
        app,
        [
            "pools",
            "--hicache-ratio",
            "3",
            "--hicache-io-backend",
            "direct",
            "--hicache-storage-backend",
            "sim",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    h = out["hicache"]
    assert h["mem_layout"] == "page_first_direct" and h["storage"]["backend"] == "sim"
    assert h["host_bytes_per_gpu"] == out["host_full_bytes"] + out["host_swa_bytes"] > 0


@pytest.mark.parametrize(
    "argv",
    [
        ["--hicache-write-policy", "write_around"],
        [
            "--hicache-mem-layout",
            "page_head",
            "--hicache-io-backend",
            "direct",
            "--enable-hierarchical-cache",
        ],
        ["--hicache-storage-prefetch-policy", "never"],
        ["--storage-read-gbps", "-1"],
    ],
)
def test_pools_refuses_bad_hicache_values(argv):
    res = runner.invoke(app, ["pools", *argv])
    assert res.exit_code != 0
