"""``kvplan run`` and ``kvplan bench-multiturn``: option plumbing (with a fake server) and end to end.

The end-to-end tests need the server model (``simulator.engine.simulate``) and skip without it;
the plumbing tests swap in ``fake_simulate`` so they run regardless.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest
import typer
from test_engine_clients import fake_simulate
from typer.testing import CliRunner

import simulator.run
from simulator.cli import bench_multiturn_cmd, run_cmd
from simulator.engine.config import SimConfig

REPO = Path(__file__).resolve().parents[1]
MOONCAKE = REPO / "traces" / "data" / "mooncake_arxiv_head800.jsonl"
TOKENS = REPO / "traces" / "data" / "tokens_multiturn.jsonl"
runner = CliRunner()

app = typer.Typer(pretty_exceptions_enable=False)
app.command("run")(run_cmd.run)
app.command("bench-multiturn")(bench_multiturn_cmd.bench_multiturn)


def _has_server() -> bool:
    try:
        return importlib.util.find_spec("simulator.engine.simulate") is not None
    except ImportError:
        return False


needs_server = pytest.mark.skipif(not _has_server(), reason="server model not yet available")

TINY_BENCH = [
    "bench-multiturn",
    "--num-clients", "3",
    "--num-rounds", "2",
    "--request-length", "256",
    "--output-length", "64",
    "--request-rate", "16",
    "--max-parallel", "3",
    "--enable-round-barrier",
    "--disable-random-sample",
    "--page-size", "64",
]  # fmt: skip


@pytest.fixture
def fake(monkeypatch):
    """Replace the server model by the fake one; records the configs it was called with."""
    calls: list[SimConfig] = []

    def serve(trace, cfg, observer):
        calls.append(cfg)
        fake_simulate(trace, cfg, observer)
        return None  # no pool sizing behind the fake server

    monkeypatch.setattr(simulator.run, "_serve", serve)
    return calls


def _json(args: list[str]) -> dict:
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 1, res.stdout[:2000]
    return json.loads(lines[0])


# --- plumbing (fake server) --------------------------------------------------------------------------


def test_run_passes_sglang_flags_into_simconfig(fake):
    summary = _json(
        [
            "run", "--trace", str(TOKENS), "--json",
            "--model", "MiMo-V2-Flash", "--gpu", "H100", "--tp", "4",
            "--page-size", "32", "--swa-full-tokens-ratio", "0.2", "--mem-fraction-static", "0.7",
            "--max-total-tokens", "894000", "--max-running-requests", "7", "--chunked-prefill-size", "4096",
            "--max-prefill-tokens", "8192", "--schedule-policy", "lpm", "--disable-radix-cache",
            "--radix-eviction-policy", "lfu", "--enable-overlap-schedule",
            "--swa-eviction", "window", "--tombstone", "legacy", "--profile", "p.json",
            "--time-scale", "0.5", "--think-time", "2", "--seed", "5", "--check-invariants",
            "--kv-budget-gib", "30", "--schedule-conservativeness", "0.5", "--swa-eviction-interval", "64",
        ]
    )  # fmt: skip
    (cfg,) = fake
    assert cfg == SimConfig(
        model="MiMo-V2-Flash",
        gpu="H100",
        tp=4,
        page_size=32,
        swa_full_tokens_ratio=0.2,
        mem_fraction_static=0.7,
        max_total_tokens=894000,
        max_running_requests=7,
        chunked_prefill_size=4096,
        max_prefill_tokens=8192,
        schedule_policy="lpm",
        disable_radix_cache=True,
        radix_eviction_policy="lfu",
        disable_overlap_schedule=False,
        swa_eviction="window",
        tombstone="legacy",
        profile="p.json",
        time_scale=0.5,
        think_time_s=2.0,
        seed=5,
        check_invariants=True,
        kv_budget_gib=30.0,
        schedule_conservativeness=0.5,
        swa_eviction_interval=64,
    )
    assert summary["requests"] == 18 and summary["request_rate"] is None  # sequential replay


def test_run_defaults_are_simconfig_defaults(fake):
    _json(["run", "--trace", str(TOKENS), "--json"])
    assert fake == [SimConfig()]


def test_run_text_report_and_outputs(fake, tmp_path):
    res = runner.invoke(app, ["run", "--trace", str(MOONCAKE), "--limit", "30", "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[:2] == ["All requests completed", "Performance metrics summary:"]
    assert lines[2].startswith("  Total requests: 30 at ") and lines[2].endswith(" requests per second")
    assert "Per-round metrics:" not in res.stdout  # only with bench_multiturn's round barrier
    assert "Server metrics (kvplan):" in res.stdout
    out = tmp_path / "o"
    for name in ("requests", "decode_steps", "prefill_batches", "retractions"):
        assert (out / f"{name}.parquet").is_file() and (out / f"{name}.csv").is_file()
    assert len(pd.read_parquet(out / "requests.parquet")) == 30
    assert json.loads((out / "summary.json").read_text())["requests"] == 30


def test_run_request_rate_override(fake):
    s = _json(["run", "--trace", str(MOONCAKE), "--limit", "20", "--request-rate", "3", "--json"])
    assert fake[0].request_rate == 3.0 and s["request_rate"] == 3.0


def test_bench_multiturn_flags_build_the_scripts_workload(fake):
    s = _json([*TINY_BENCH, "--json", "--seed", "3", "--tombstone", "legacy", "--swa-eviction", "none"])
    assert s["requests"] == 6 and s["heartbeats"] == 2 and s["request_rate"] == 16.0
    assert [r["requests"] for r in s["per_round"]] == [3, 3]
    assert s["per_round"][1]["cache_hit_rate"] > 0.5
    assert fake[0].seed == 3 and fake[0].tombstone == "legacy" and fake[0].page_size == 64


def test_bench_multiturn_text_has_per_round_block(fake):
    res = runner.invoke(app, TINY_BENCH)
    assert res.exit_code == 0, res.output
    assert "  Total requests: 6 at 16.0 requests per second" in res.stdout
    assert "Per-round metrics:\n  Round 0: Average TTFT = " in res.stdout
    assert "(3 requests)\n  Round 1: Average TTFT = " in res.stdout


def test_log_decode_goes_to_stderr_with_json(fake):
    res = runner.invoke(app, [*TINY_BENCH, "--json", "--log-decode"])
    assert res.exit_code == 0, res.output
    json.loads(res.stdout)  # stdout is exactly one JSON object
    assert "TP0] Decode batch, #running-req: " in res.stderr


def test_log_decode_on_stdout_without_json(fake):
    res = runner.invoke(app, [*TINY_BENCH, "--log-decode"])
    assert res.exit_code == 0, res.output
    first = res.stdout.splitlines()[0]
    assert first.startswith("[2026-01-01 00:00:") and " TP0] Decode batch, #running-req: " in first


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--swa-eviction", "sometimes"), ("--tombstone", "nope"), ("--radix-eviction-policy", "random")],
)
def test_unknown_policy_lists_the_registry(fake, flag, value):
    res = runner.invoke(app, ["run", "--trace", str(TOKENS), flag, value])
    assert res.exit_code == 2
    assert value in res.output and "one of" in res.output
    assert not fake


_FORMATS = ["mooncake", "ragpulse", "azure", "dynamo-events", "tokens", "parquet"]


@pytest.mark.parametrize(
    ("command", "flag", "value", "allowed"),
    [
        ("run", "--format", "bogus", _FORMATS),
        ("run", "--schedule-policy", "sjf", ["fcfs", "lpm"]),
        ("run", "--gpu", "V100", ["H100", "H200"]),
        ("bench-multiturn", "--schedule-policy", "sjf", ["fcfs", "lpm"]),
        ("bench-multiturn", "--gpu", "V100", ["H100", "H200"]),
    ],
)
def test_bad_enumerated_value_names_the_option_and_the_allowed_values(fake, command, flag, value, allowed):
    args = [command, flag, value] + (["--trace", str(TOKENS)] if command == "run" else [])
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    assert flag in res.output and f"{value!r} is not one of:" in res.output
    assert all(name in res.output for name in allowed)
    assert "Traceback" not in res.output and not fake


def test_invariant_violation_is_an_internal_error_with_a_traceback(monkeypatch):
    from simulator.invariants import InvariantViolation

    def broken(trace, cfg, observer):
        raise InvariantViolation(["FULL conservation: 3 + 4 != 8"])

    monkeypatch.setattr(simulator.run, "_serve", broken)
    res = runner.invoke(app, ["run", "--trace", str(TOKENS)])
    assert res.exit_code == 70
    assert "Traceback (most recent call last)" in res.stderr
    assert "InvariantViolation: FULL conservation: 3 + 4 != 8" in res.stderr
    assert "kvplan: internal error: InvariantViolation: this is a bug in kvplan" in res.stderr


def test_config_error_stays_a_one_line_user_error(monkeypatch):
    from simulator.errors import ConfigError

    def refused(trace, cfg, observer):
        raise ConfigError("SWA pool of 100 tokens cannot hold sliding window 127 + page 64")

    monkeypatch.setattr(simulator.run, "_serve", refused)
    res = runner.invoke(app, ["run", "--trace", str(TOKENS)])
    assert res.exit_code == 1
    assert res.stderr == "kvplan: error: SWA pool of 100 tokens cannot hold sliding window 127 + page 64\n"


def test_bench_multiturn_bad_arguments_are_one_line_errors(fake):
    res = runner.invoke(app, ["bench-multiturn", "--min-rounds", "3", "--max-rounds", "2"])
    assert res.exit_code == 1
    assert res.stderr.strip() == "kvplan: error: --min-rounds (3) must be <= --max-rounds (2)"
    res = runner.invoke(app, ["bench-multiturn", "--distribution", "gamma"])
    assert res.exit_code == 1 and "--distribution must be poisson or uniform" in res.stderr


def test_bad_timing_is_a_one_line_error(fake):
    res = runner.invoke(app, ["run", "--trace", str(MOONCAKE), "--limit", "5", "--request-rate", "-1"])
    assert res.exit_code == 1 and res.stderr.startswith("kvplan: error: --request-rate must be")


def test_missing_trace_is_one_clear_error():
    res = runner.invoke(app, ["run", "--trace", "/nonexistent/trace.jsonl"])
    assert res.exit_code == 1 and "kvplan: error:" in res.stderr
    assert "Traceback" not in res.output


# --- end to end (real server model) ------------------------------------------------------------------


@needs_server
def test_run_end_to_end_on_the_bundled_mooncake_sample(tmp_path):
    s = _json(
        [
            "run",
            "--trace",
            str(MOONCAKE),
            "--limit",
            "100",
            "--page-size",
            "64",
            "--json",
            "--out",
            str(tmp_path),
        ]
    )
    assert s["requests"] + s["aborted"] == 100 and s["unfinished"] == 0
    assert 0.0 <= s["cache_hit_rate"] < 1.0
    assert s["ttft"]["p50"] <= s["ttft"]["p90"] <= s["ttft"]["p99"] <= s["ttft"]["max"]
    assert s["decode_steps"] > 0 and s["decode_full_token_usage"] is not None
    assert s["input_throughput"] > 0 and s["output_throughput"] > 0
    req = pd.read_parquet(tmp_path / "requests.parquet")
    assert len(req) == 100 and (req["ttft_s"] > 0).all()
    again = _json(["run", "--trace", str(MOONCAKE), "--limit", "100", "--page-size", "64", "--json"])
    assert again == s  # deterministic


@needs_server
def test_run_end_to_end_sequential_token_jsonl():
    s = _json(["run", "--trace", str(TOKENS), "--page-size", "16", "--json"])
    assert s["requests"] == 18 and s["request_rate"] is None


@needs_server
def test_bench_multiturn_end_to_end():
    s = _json([*TINY_BENCH, "--json"])
    assert s["requests"] == 6 and s["heartbeats"] == 2
    assert [r["round"] for r in s["per_round"]] == [0, 1]
    assert s["per_round"][0]["cache_hit_rate"] == 0.0
    # round 1 reuses round 0's prompt + output: at least floor_page(256 + 64 - 1) of 576 tokens
    assert s["per_round"][1]["cached_tokens"] >= 3 * 256
    res = runner.invoke(app, TINY_BENCH)
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith(
        "All requests completed\nPerformance metrics summary:\n  Total requests: 6 at 16.0"
    )
