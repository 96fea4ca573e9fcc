"""``kvplan cache-replay`` and ``kvplan demo`` from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simulator.cli.main import app

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "traces"
runner = CliRunner()
SIZE_KEYS = (
    "full_evictable",
    "full_protected",
    "swa_evictable",
    "swa_protected",
    "full_available",
    "swa_available",
)


def _jsonl(tmp_path: Path) -> Path:
    system = list(range(100, 260))
    lines = []
    prev = system + [1, 2, 3]
    for t in range(3):
        out = [500 + 10 * t + i for i in range(150)]
        lines.append({"rid": f"t{t}", "input_ids": prev, "output_ids": out})
        prev = prev + out + [7, 8, 9]
    p = tmp_path / "w.jsonl"
    p.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return p


def _run_json(args: list[str]) -> tuple[list[dict], dict]:
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in res.stdout.strip().splitlines()]
    return rows[:-1], rows[-1]["summary"]


def test_cache_replay_jsonl_format(tmp_path):
    rows, summary = _run_json(
        [
            "cache-replay",
            str(_jsonl(tmp_path)),
            "--page-size",
            "16",
            "--full-tokens",
            "2048",
            "--swa-tokens",
            "512",
            "--window",
            "64",
            "--json",
            "--check-invariants",
        ]
    )
    assert [r["rid"] for r in rows] == ["t0", "t1", "t2"]
    for r in rows:
        assert {"rid", "prompt_len", "prefix_len", *SIZE_KEYS} <= set(r)
    # multi-turn reuse: turn 1 matches turn 0's prompt + output - 1, page-floored
    assert rows[1]["prefix_len"] == (163 + 150 - 1) // 16 * 16
    assert summary["requests"] == 3
    assert 0 < summary["hit_rate"] < 1
    assert {"nodes", "tombstones"} <= set(summary["tree"])


def test_cache_replay_policies_by_name(tmp_path):
    path = str(_jsonl(tmp_path))
    outs = {}
    for tomb, swa in (("unified", "interval"), ("legacy", "iteration"), ("legacy", "none")):
        _, summary = _run_json(
            [
                "cache-replay",
                path,
                "--page-size",
                "16",
                "--full-tokens",
                "2048",
                "--swa-tokens",
                "512",
                "--window",
                "64",
                "--tombstone",
                tomb,
                "--swa-eviction",
                swa,
                "--json",
            ]
        )
        outs[(tomb, swa)] = summary["tree"]["tombstones"]
    # decode-time SWA eviction leaves the freed output span as tombstones in the tree;
    # without it only SWA pool pressure tombstones nodes
    assert outs[("legacy", "iteration")] > outs[("legacy", "none")]
    assert outs[("unified", "interval")] > outs[("legacy", "none")]


def test_cache_replay_unknown_policy_names_the_flag_and_the_registry(tmp_path):
    res = runner.invoke(app, ["cache-replay", str(_jsonl(tmp_path)), "--tombstone", "bogus"])
    assert res.exit_code == 2
    assert "--tombstone" in res.output and "'bogus' is not one of: legacy, unified" in res.output
    assert "Traceback" not in res.output


@pytest.mark.skipif(not (SHARED / "mooncake").exists(), reason="../shared/traces not present")
def test_cache_replay_on_shared_mooncake_trace():
    rows, summary = _run_json(
        [
            "cache-replay",
            str(SHARED / "mooncake" / "arxiv_trace_head1000.jsonl"),
            "--page-size",
            "64",
            "--full-tokens",
            "1000000",
            "--swa-tokens",
            "500000",
            "--window",
            "127",
            "--json",
        ]
    )
    assert summary["requests"] == 1000 == len(rows)
    assert summary["aborted"] == 0
    assert 0.2 < summary["hit_rate"] < 0.4  # infinite-cache bound is 0.39


def test_demo_runs_on_bundled_default():
    res = runner.invoke(app, ["demo", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["requests"] == 800
    assert out["full_tokens"] > out["swa_tokens"] > 0
    assert 0 < out["cache_hit_rate"] <= out["infinite_cache_hit_rate"] + 1e-9
