"""``kvplan pools`` end to end through typer's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from simulator.cli.main import app

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, ["pools", *args])


def test_acceptance_json():
    r = run(
        "--model", "gpt-oss-120b", "--kv-budget-gib", "20", "--page-size", "64",
        "--swa-full-tokens-ratio", "0.8", "--json",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["full_tokens"] == 323584
    assert out["swa_tokens"] == 258816
    assert out["kv_budget_bytes"] == 20 * (1 << 30)
    assert out["gpu"] is None


def test_table_with_gpu_model_and_hicache():
    r = run("--model", "gpt-oss-120b", "--gpu", "H200", "--tp", "2", "--hicache-ratio", "2")
    assert r.exit_code == 0, r.output
    for text in ("device full", "device SWA", "host full", "host SWA", "mem_fraction_static 0.902"):
        assert text in r.stdout


def test_default_gpu_is_h200_as_in_every_command():
    r = run("--model", "gpt-oss-20b", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["gpu"] == "H200" and out["memory"]["mem_fraction_static"] == 0.903
    r = run("--model", "gpt-oss-20b", "--gpu", "H100", "--json")
    out = json.loads(r.stdout)
    assert out["gpu"] == "H100" and out["memory"]["mem_fraction_static"] == 0.83


def test_unknown_gpu_and_kv_dtype_name_the_flag_and_the_choices():
    r = run("--gpu", "V100")
    assert r.exit_code == 2 and "--gpu" in r.output and "H200" in r.output
    r = run("--kv-cache-dtype", "int4")
    assert r.exit_code == 2 and "--kv-cache-dtype" in r.output and "fp8_e4m3" in r.output


def test_gemma3_one_pool():
    r = run("--model", "Gemma-3-27B", "--kv-budget-gib", "10", "--json")
    out = json.loads(r.stdout)
    assert out["configurator"] == "DefaultPoolConfigurator" and out["swa_tokens"] == 0


def test_errors_are_one_line_exit_1():
    r = run("--model", "no-such-model")
    assert r.exit_code == 1
    assert "unknown model 'no-such-model'" in r.stderr and "Traceback" not in r.output
    r = run(
        "--model",
        "gpt-oss-120b",
        "--kv-budget-gib",
        "20",
        "--page-size",
        "64",
        "--swa-full-tokens-ratio",
        "0.0001",
    )
    assert r.exit_code == 1
    assert r.stderr.strip().count("\n") == 0 and "cannot hold even one request" in r.stderr
    r = run("--model", "MiMo-V2-Flash", "--gpu", "H100", "--tp", "4")
    assert r.exit_code == 1 and "Loaded weights leave no GPU memory" in r.stderr
    r = run("--model", "gpt-oss-120b", "--swa-full-tokens-ratio", "2")
    assert r.exit_code == 1 and "--swa-full-tokens-ratio must be in (0, 1], got 2.0" in r.stderr


def test_model_from_spec_file(tmp_path: Path):
    spec = tmp_path / "toy.json"
    spec.write_text(
        json.dumps(
            {
                "name": "toy",
                "layer_types": ["swa", "swa", "swa", "full"],
                "num_kv_heads": 8,
                "head_dim": 128,
                "sliding_window": 1024,
                "weight_gib": 4,
            }
        )
    )
    r = run("--model", str(spec), "--gpu", "L40S", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert (
        out["model"] == "toy"
        and out["full_bytes_per_token"] == 4096
        and out["swa_bytes_per_token"] == 3 * 4096
    )
