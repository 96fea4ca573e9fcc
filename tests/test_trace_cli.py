"""``kvplan trace`` end to end, including the issue's acceptance check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simulator.cli.main import app

SAMPLES = Path(__file__).resolve().parents[1] / "traces" / "data"
runner = CliRunner()


def test_acceptance_mooncake_synthetic(shared_traces):
    res = runner.invoke(
        app, ["trace", "stats", str(shared_traces / "mooncake" / "synthetic_trace.jsonl"), "--json"]
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["requests"] == 3993
    assert out["infinite_cache_hit_rate"] == pytest.approx(0.65, abs=0.01)


def test_stats_human_and_json():
    path = str(SAMPLES / "mooncake_arxiv_head800.jsonl")
    res = runner.invoke(app, ["trace", "stats", path, "--page-size", "16"])
    assert res.exit_code == 0 and "infinite-cache hit" in res.stdout and "800" in res.stdout
    res = runner.invoke(app, ["trace", "stats", path, "--json"])
    out = json.loads(res.stdout)
    for key in (
        "requests",
        "time_span_s",
        "request_rate_per_s",
        "input_len",
        "output_len",
        "sessions",
        "distinct_pages",
        "infinite_cache_hit_rate",
    ):
        assert key in out


def test_convert_then_head(tmp_path):
    out = tmp_path / "t.parquet"
    res = runner.invoke(app, ["trace", "convert", str(SAMPLES / "ragpulse"), "-o", str(out)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["trace", "head", str(out), "-n", "3"])
    assert res.exit_code == 0
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 4 and "session_id" in lines[0]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["trace", "stats", "/nonexistent/trace.jsonl"], "no such file"),
        (["trace", "head", "BAD"], "line 1"),
        (["trace", "stats", "BAD", "--format", "azure"], "expected header"),
    ],
)
def test_errors_are_one_line(tmp_path, args, needle):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1]}\n')
    args = [str(bad) if a == "BAD" else a for a in args]
    res = runner.invoke(app, args)
    assert res.exit_code == 1
    err = res.stderr.strip().splitlines()
    assert (
        len(err) == 1
        and err[0].startswith("kvplan: error:")
        and needle.replace("line 1", "bad.jsonl:1") in err[0]
    )
    assert "Traceback" not in res.output


def test_unknown_format_option_is_rejected():
    res = runner.invoke(app, ["trace", "stats", str(SAMPLES / "azure_conv_head1000.csv"), "--format", "xml"])
    assert res.exit_code != 0 and "unknown format" in res.output
