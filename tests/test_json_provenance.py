"""Every ``--json`` output carries the same provenance (issue 12, item 7): kvplan's version and
source hash, the SGLang version modelled, the trace's content hash where a trace is read, and the
cost-model profile. The trace hash is of content, so the commands that read one trace agree."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simulator.cli.common import DEFAULT_TRACE
from simulator.cli.main import app
from simulator.provenance import SGLANG_VERSION, trace_hash
from traces import load_trace

RUNNER = CliRunner()
SMALL = ["--limit", "40"]


def _last_json(args: list[str]) -> dict:
    res = RUNNER.invoke(app, args)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def bundled_hash() -> str:
    return trace_hash(load_trace(DEFAULT_TRACE))


def _check(prov: dict, trace_digest: str | None) -> None:
    assert prov["sglang_version"] == SGLANG_VERSION
    assert prov["kvplan_version"] and len(prov["kvplan_source_hash"]) == 16
    assert prov["profile"]["name"] and prov["profile"]["hash"]
    assert prov.get("trace_hash") == trace_digest


def test_trace_reading_commands_agree_on_the_trace_hash(bundled_hash: str) -> None:
    t = str(DEFAULT_TRACE)
    _check(_last_json(["trace", "stats", t, "--json"])["provenance"], bundled_hash)
    _check(_last_json(["demo", "--json"])["provenance"], bundled_hash)
    _check(_last_json(["cache-replay", t, "--page-size", "64", "--json"])["provenance"], bundled_hash)


def test_limited_trace_hashes_what_was_read(bundled_hash: str) -> None:
    prov = _last_json(["cache-replay", str(DEFAULT_TRACE), "--page-size", "64", "--json", *SMALL])
    assert prov["provenance"]["trace_hash"] == trace_hash(load_trace(DEFAULT_TRACE).head(40))
    assert prov["provenance"]["trace_hash"] != bundled_hash
    bound = _last_json(["bound", "--json", *SMALL])
    assert bound["provenance"]["trace_hash"] == prov["provenance"]["trace_hash"]


def test_hicache_cache_replay_carries_provenance(bundled_hash: str) -> None:
    args = ["cache-replay", str(DEFAULT_TRACE), "--page-size", "64", "--json"]
    out = _last_json([*args, "--enable-hierarchical-cache"])
    _check(out["provenance"], bundled_hash)


def test_traceless_commands_carry_provenance(tmp_path: Path) -> None:
    pools = _last_json(["pools", "--model", "gpt-oss-120b", "--gpu", "H200", "--tp", "8", "--json"])
    _check(pools["provenance"], None)
    ops = tmp_path / "ops.npz"
    res = RUNNER.invoke(app, ["run", "--limit", "20", "--record-ops", str(ops)])
    assert res.exit_code == 0, res.output
    _check(_last_json(["ops", "stats", str(ops), "--json"])["provenance"], None)
