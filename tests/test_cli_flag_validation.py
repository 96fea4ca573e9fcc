"""Issue 9: every flag value is checked before any work starts, with one line naming the flag.

Bad numbers (NaN, inf, negatives, zero where meaningless), impossible TP splits, unknown attention
backends, contradicting flags, unusable ``--out`` paths and SGLang flags kvplan does not model are
refused up front; ``--request-rate inf`` means no pacing; warnings print as ``kvplan: warning:``.
"""

from __future__ import annotations

import json
import math
import os
import signal
import types
import typing
from pathlib import Path

import pytest
from typer.testing import CliRunner

import simulator.run
from simulator.cli.checks import Check
from simulator.cli.main import app
from simulator.cli.output_files import OUT_FILES
from simulator.cli.server_flags import SERVER_FLAGS
from simulator.cli.unmodelled import UNMODELLED_FLAGS
from simulator.cli.validation import check_tp_split
from simulator.engine.config import SimConfig
from simulator.errors import ConfigError, FlagError
from simulator.hicache_args import HiCacheArgs
from simulator.run import run_config
from simulator.server_args import ServerArgs
from traces import load_trace
from traces.generators.bench_multiturn import BenchMultiturnArgs, generate_bench_multiturn

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "traces" / "data" / "mooncake_arxiv_head800.jsonl"


@pytest.fixture
def no_simulation(monkeypatch):
    """Fail the test if a command gets as far as serving the trace."""

    def refuse(*args, **kwargs):
        raise AssertionError("the simulation started before the flags were checked")

    monkeypatch.setattr(simulator.run, "run_config", refuse)
    monkeypatch.setattr(simulator.run, "_serve", refuse)


def _one_line_error(res, *needles: str) -> None:
    assert res.exit_code == 1, res.output
    assert "Traceback" not in res.output, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvplan: error: "), res.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


BAD_VALUES = [
    (["run", "--block-size", "-1"], "--block-size"),
    (["run", "--block-size", "0"], "--block-size"),
    (["run", "--seed", "-1"], "--seed"),
    (["run", "--limit", "-1"], "--limit"),
    (["run", "--request-rate", "nan"], "--request-rate"),
    (["run", "--request-rate", "-inf"], "--request-rate"),
    (["run", "--time-scale", "nan"], "--time-scale"),
    (["run", "--think-time", "inf"], "--think-time"),
    (["run", "--mem-fraction-static", "nan"], "--mem-fraction-static"),
    (["run", "--swa-full-tokens-ratio", "inf"], "--swa-full-tokens-ratio"),
    (["run", "--max-prefill-tokens", "0"], "--max-prefill-tokens"),
    (["run", "--max-running-requests", "0"], "--max-running-requests"),
    (["run", "--schedule-conservativeness", "nan"], "--schedule-conservativeness"),
    (["run", "--swa-eviction-interval", "0"], "--swa-eviction-interval"),
    (["run", "--page-size", "0"], "--page-size"),
    (["run", "--tp", "0"], "--tp"),
    (["run", "--tp", "3"], "--tp 3"),
    (["run", "--request-rate", "2", "--time-scale", "2"], "--time-scale"),
    (["demo", "--kv-budget-gib", "-1"], "--kv-budget-gib"),
    (["bench-multiturn", "--request-rate", "nan"], "--request-rate"),
    (["bench-multiturn", "--range-ratio", "nan"], "--range-ratio"),
    (["bench-multiturn", "--output-length", "0"], "--output-length"),
    (["bench-multiturn", "--seed", "-1"], "--seed"),
    (["cache-replay", str(TRACE), "--page-size", "0"], "--page-size"),
    (["cache-replay", str(TRACE), "--limit", "0"], "--limit"),
    (["cache-replay", str(TRACE), "--limit", "-1"], "--limit"),
    (["cache-replay", str(TRACE), "--window", "0"], "--window"),
    (["pools", "--kv-budget-gib", "nan"], "--kv-budget-gib"),
    (["pools", "--kv-budget-gib", "inf"], "--kv-budget-gib"),
    (["pools", "--hicache-ratio", "nan"], "--hicache-ratio"),
    (["pools", "--hicache-size", "inf"], "--hicache-size"),
    (["pools", "--context-length", "0"], "--context-length"),
    (["pools", "--tp", "3"], "64 attention heads"),
    (["pools", "--attention-backend", "foo"], "--attention-backend 'foo'"),
]


@pytest.mark.parametrize(
    ("args", "needle"), BAD_VALUES, ids=lambda x: " ".join(x) if isinstance(x, list) else x
)
def test_bad_values_are_one_line_errors_before_any_work(no_simulation, args, needle):
    _one_line_error(runner.invoke(app, args), needle)


@pytest.mark.parametrize("flag", UNMODELLED_FLAGS, ids=lambda f: f.flag)
@pytest.mark.parametrize("command", ["run", "bench-multiturn", "demo", "pools"])
def test_sglang_flags_kvplan_does_not_model_are_refused_by_name(no_simulation, command, flag):
    params = {p.name for p in typer_params(command)}
    if flag.param not in params:  # the command models the flag itself (pools --kv-cache-dtype)
        assert flag.field in params
        return
    value = {bool: [], int: ["2"], str: ["eagle" if "speculative" in flag.flag else "x"]}[flag.type]
    _one_line_error(runner.invoke(app, [command, flag.flag, *value]), flag.flag, "not modelled")


def typer_params(command: str) -> list:
    import typer.main

    return typer.main.get_command(app).commands[command].params  # type: ignore[attr-defined]


def test_unmodelled_flags_at_sglangs_default_are_accepted():
    res = runner.invoke(app, ["pools", "--dp-size", "1", "--json"])
    assert res.exit_code == 0, res.output


def test_every_numeric_server_flag_has_a_check():
    hints = typing.get_type_hints(SimConfig) | typing.get_type_hints(HiCacheArgs)
    for flag in SERVER_FLAGS:
        numeric = {int, float} & set(typing.get_args(hints[flag.field]) or (hints[flag.field],))
        if numeric:
            assert isinstance(flag.check, Check), flag.field


def test_tp_split_follows_sglangs_head_sharding(monkeypatch):
    check_tp_split("gpt-oss-120b", 8)
    check_tp_split("gpt-oss-120b", 16)  # 64 heads / 16; 8 KV heads each replicated twice
    for tp in (3, 5, 12):
        with pytest.raises(FlagError, match=f"--tp {tp}: gpt-oss-120b has 64 attention heads"):
            check_tp_split("gpt-oss-120b", tp)
    check_tp_split("Llama-4-Scout", 8)
    with pytest.raises(FlagError, match="40 attention heads"):
        check_tp_split("Llama-4-Scout", 16)
    # KV heads: fewer KV heads than ranks must divide tp; more must divide by tp.
    import simulator.models

    toy = types.SimpleNamespace(name="toy", num_attention_heads=12, num_kv_heads=3, swa_num_kv_heads=3)
    monkeypatch.setattr(simulator.models, "load_model", lambda name: toy)
    check_tp_split("toy", 6)
    with pytest.raises(FlagError, match="3 KV heads"):
        check_tp_split("toy", 2)
    with pytest.raises(FlagError, match="3 KV heads"):
        check_tp_split("toy", 4)


def test_server_args_refuse_nan_and_unknown_backend_for_library_callers():
    for kwargs in ({"hicache_ratio": math.nan}, {"hicache_size": math.inf}, {"attention_backend": "foo"}):
        with pytest.raises(ConfigError):
            ServerArgs(**kwargs)
    with pytest.raises(ConfigError, match="--kv-budget-gib"):
        SimConfig(kv_budget_gib=math.nan).pool_sizes()


# --- --out -------------------------------------------------------------------------------------


def test_out_that_is_a_file_is_refused_before_the_simulation(no_simulation, tmp_path):
    target = tmp_path / "report"
    target.write_text("keep me")
    _one_line_error(
        runner.invoke(app, ["run", "--limit", "2", "--out", str(target)]), "--out", "not a directory"
    )
    assert target.read_text() == "keep me"
    res = runner.invoke(app, ["bench-multiturn", "--out", str(target / "sub")])
    _one_line_error(res, "--out")


def test_out_never_replaces_a_symlink_or_fifo(no_simulation, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (out / "summary.json").symlink_to(victim)
    _one_line_error(runner.invoke(app, ["run", "--limit", "2", "--out", str(out)]), "symlink")
    (out / "summary.json").unlink()
    os.mkfifo(out / "requests.csv")
    _one_line_error(runner.invoke(app, ["run", "--limit", "2", "--out", str(out)]), "not a regular file")
    assert victim.read_text() == "precious"


def test_record_ops_path_checked_before_the_simulation(no_simulation, tmp_path):
    res = runner.invoke(app, ["run", "--limit", "2", "--record-ops", str(tmp_path)])
    _one_line_error(res, "--record-ops", "is a directory")


def test_out_files_are_the_ones_the_run_writes_with_the_umask_mode(tmp_path):
    out = tmp_path / "new" / "out"
    old = os.umask(0o027)
    try:
        res = runner.invoke(app, ["run", "--limit", "2", "--out", str(out), "--no-progress"])
    finally:
        os.umask(old)
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.iterdir()) == sorted(OUT_FILES)
    assert {oct(p.stat().st_mode & 0o777) for p in out.iterdir()} == {oct(0o640)}


# --- --request-rate inf ------------------------------------------------------------------------


@pytest.fixture
def hang_guard():
    """Turn a hang into a failure (SIGALRM after 60 s)."""

    def fail(*_):
        raise TimeoutError("the run did not finish")

    old = signal.signal(signal.SIGALRM, fail)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def test_bench_multiturn_rate_inf_sends_without_pacing_and_finishes(hang_guard):
    args = ["--num-clients", "6", "--num-rounds", "2", "--request-length", "256", "--output-length", "8"]
    res = runner.invoke(app, ["bench-multiturn", *args, "--max-parallel", "4", "--request-rate", "inf"])
    assert res.exit_code == 0, res.output
    trace = generate_bench_multiturn(
        BenchMultiturnArgs(
            num_clients=6,
            num_rounds=2,
            request_length=256,
            output_length=8,
            max_parallel=4,
            request_rate=math.inf,
        )
    )
    reqs = run_config(trace, SimConfig()).frames["requests"]
    reqs = reqs[~reqs["heartbeat"]]
    assert len(reqs) == 12 and not reqs["aborted"].any()
    # No pacing: the first --max-parallel requests are all sent at time 0, and every later one
    # at the moment a slot and its client's previous answer free up (never later than needed).
    arrivals = sorted(reqs["arrival_s"].tolist())
    assert arrivals[:4] == [0.0] * 4 and arrivals[4] > 0.0


def test_run_rate_inf_sends_every_request_at_once(hang_guard):
    res = runner.invoke(app, ["run", "--limit", "5", "--request-rate", "inf", "--no-progress"])
    assert res.exit_code == 0, res.output
    trace = load_trace(TRACE).head(5)
    reqs = run_config(trace, SimConfig(request_rate=math.inf)).frames["requests"]
    assert reqs["arrival_s"].tolist() == [0.0] * 5


# --- warnings ----------------------------------------------------------------------------------


def test_warnings_print_as_kvplan_warning_lines(tmp_path):
    rows = [
        {"timestamp": 1000, "input_length": 1024, "output_length": 4, "hash_ids": [1, 2]},
        {"timestamp": 0, "input_length": 512, "output_length": 4, "hash_ids": [1]},
    ]
    trace = tmp_path / "unsorted.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = runner.invoke(app, ["cache-replay", str(trace), "--json"])
    assert res.exit_code == 0, res.output
    assert "kvplan: warning: " in res.stderr and "timestamps are not sorted" in res.stderr
    assert ".py:" not in res.stderr and "TraceWarning" not in res.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["run", "--format", "csv"], "'csv' is not one of: mooncake"),
        (["run", "--seed", "abc"], "'--seed'"),
        (["run", "--no-such-flag"], "No such option: --no-such-flag"),
        (["trace", "head", "--nope"], "No such option: --nope"),
    ],
)
def test_malformed_command_lines_are_one_line_usage_errors(args, needle):
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvplan: error: ") and needle in lines[0], res.stderr
    assert f"(see 'kvplan {args[0]}" in lines[0]
