"""The result store: keys that change with everything a result depends on, atomic run files,
a reader that keeps one row per key, compaction; provenance in every output."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest

import simulator
from simulator.engine.config import SimConfig
from simulator.planner.keys import RunIdentity, cached_profile_identity, point_key, run_key
from simulator.planner.store import ResultStore, make_row
from simulator.provenance import SGLANG_VERSION, provenance, trace_hash
from traces import load_trace

MOONCAKE = Path(__file__).resolve().parents[1] / "traces" / "data" / "mooncake_arxiv_head800.jsonl"


@pytest.fixture(scope="module")
def trace():
    return load_trace(MOONCAKE).head(20)


def _profile(tmp_path, name, peak):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"version": 1, "name": name, "coefficients": {"peak_tflops": peak}}))
    return str(path)


def test_key_changes_with_config_trace_version_source_and_profile(trace, tmp_path, monkeypatch):
    cfg = SimConfig(tp=8, page_size=64)
    ident = RunIdentity.for_trace(trace)
    key = run_key(cfg, ident)
    assert run_key(SimConfig(tp=8, page_size=64), RunIdentity.for_trace(trace)) == key  # stable
    assert run_key(dataclasses.replace(cfg, page_size=32), ident) != key
    assert run_key(dataclasses.replace(cfg, seed=1), ident) != key
    assert point_key(dataclasses.replace(cfg, seed=1), ident) == point_key(cfg, ident)  # seeds share it
    # the trace's content, not its name: one request shorter is another trace
    shorter = load_trace(MOONCAKE).head(19)
    assert run_key(cfg, RunIdentity.for_trace(shorter)) != key
    assert trace_hash(load_trace(MOONCAKE).head(20)) == ident.trace_hash
    # the kvplan version and sources
    monkeypatch.setattr(simulator, "__version__", "9.9.9")
    assert run_key(cfg, RunIdentity.for_trace(trace)) != key
    monkeypatch.undo()
    assert run_key(cfg, dataclasses.replace(ident, kvplan_source_hash="0" * 16)) != key
    # the profile, by content: the same content at another path keeps the key
    a, b = _profile(tmp_path, "a", 900.0), _profile(tmp_path, "b", 950.0)
    (tmp_path / "copy").mkdir()
    a_copy = str(tmp_path / "copy" / "a.json")
    (tmp_path / "copy" / "a.json").write_text((tmp_path / "a.json").read_text())
    ka = run_key(dataclasses.replace(cfg, profile=a), ident)
    assert ka != key
    assert run_key(dataclasses.replace(cfg, profile=b), ident) != ka
    assert run_key(dataclasses.replace(cfg, profile=a_copy), ident) == ka
    assert cached_profile_identity(a)[0] == "a"


def test_provenance_fields(trace):
    prov = provenance(trace)
    assert prov["sglang_version"] == SGLANG_VERSION == "0.5.23"
    assert prov["kvplan_version"] == simulator.__version__
    assert prov["trace_hash"] == trace_hash(trace) and len(prov["trace_hash"]) == 64
    assert prov["profile"]["name"] == "roofline-defaults" and len(prov["profile"]["hash"]) == 64


def _row(key, seed=0, summary=None):
    summary = {"cache_hit_rate": 0.25, "ttft": {"p90": 1.5}} if summary is None else summary
    prov = {
        "kvplan_version": "0.1.0",
        "kvplan_source_hash": "s",
        "sglang_version": "0.5.23",
        "trace_hash": "t",
        "profile": {"name": "p", "hash": "h"},
    }
    config = {**dataclasses.asdict(SimConfig()), "seed": seed}
    return make_row(
        key=key, point_key="pk", config=config, summary=summary, error=None, provenance=prov, run_s=0.1
    )


def test_store_rows_compaction_and_duplicates(tmp_path):
    store = ResultStore(tmp_path / "s")
    for i in range(3):
        store.write_run(_row(f"k{i}", seed=i))
    assert store.keys() == {"k0", "k1", "k2"}
    frame = store.read()
    assert list(frame["key"]) == ["k0", "k1", "k2"]
    assert frame["metrics.ttft.p90"].tolist() == [1.5] * 3 and frame["profile_hash"].tolist() == ["h"] * 3
    assert json.loads(frame["summary"][0]) == {"cache_hit_rate": 0.25, "ttft": {"p90": 1.5}}
    assert not list(store.runs.glob(".*"))  # no temporary file left
    # a compaction killed after writing its file, before removing the runs: nothing doubles
    part = store.compact()
    assert part is not None and not list(store.runs.glob("*.parquet"))
    store.write_run(_row("k1", seed=1))  # as if left behind by the interrupted compaction
    store.write_run(_row("k3", seed=3))
    again = ResultStore(tmp_path / "s")
    assert list(again.read()["key"]) == ["k0", "k1", "k2", "k3"]
    assert list(again.read(["k3", "k0"])["key"]) == ["k0", "k3"]
    again.compact()
    assert len(list(again.compacted.glob("*.parquet"))) == 1 and again.keys() == {"k0", "k1", "k2", "k3"}


def test_store_refuses_foreign_directory(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "notes.txt").write_text("mine")
    with pytest.raises(simulator.errors.ConfigError, match="not a kvplan result store"):
        ResultStore(tmp_path / "x")


def test_float_metrics_roundtrip_exactly(tmp_path):
    store = ResultStore(tmp_path / "s")
    value = 0.1 + 0.2  # 0.30000000000000004
    store.write_run(_row("k", summary={"x": value, "nan": float("nan")}))
    got = json.loads(store.read()["summary"][0])
    assert got["x"] == value and got["nan"] != got["nan"]
    assert isinstance(store.read(), pd.DataFrame)


def test_run_json_carries_provenance():
    from typer.testing import CliRunner

    from simulator.cli.main import app

    res = CliRunner().invoke(app, ["run", "--trace", str(MOONCAKE), "--limit", "5", "--tp", "8", "--json"])
    assert res.exit_code == 0, res.output
    prov = json.loads(res.stdout)["provenance"]
    assert prov == provenance(load_trace(MOONCAKE).head(5))
