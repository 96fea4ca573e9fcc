"""``kvplan plan`` end to end on a small slice of the bundled trace (docs/planner.md)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from simulator.cli.main import app
from simulator.planner.slo import judge, parse_slos

runner = CliRunner()
SLO = "cache_hit_rate>=0.2,ttft.p90<=2"
# 100 requests; memory levels down to 1/512 of SGLang's default budget, so memory binds.
COMMON = ["--model", "gpt-oss-120b", "--gpu", "H200", "--limit", "100"]
PLAN = [*COMMON, "--tp", "8", "--page-size", "64", "--levels", "10", "--swa-ratios", "0.1,0.8"]
PLAN += ["-j", "1", "--no-progress"]


def _invoke(args):
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    out = tmp_path_factory.mktemp("plan")
    result = _invoke(["plan", *PLAN, "--slo", SLO, "-o", str(out), "--json"])
    return json.loads(result.stdout), out


def _flag_args(flags):
    args = []
    for name, value in flags.items():
        args += [name] if value is True else [name, str(value)]
    return args


def test_json_shape_and_sglang_spelling(planned):
    plan, _ = planned
    assert list(plan)[:5] == ["recommended", "launch_flags", "slo", "met", "candidates"]
    assert "provenance" in plan and plan["provenance"]["trace_hash"]
    assert plan["met"] is True
    flags = plan["recommended"]["flags"]
    assert set(flags) >= {"--tp-size", "--page-size", "--mem-fraction-static", "--swa-full-tokens-ratio"}
    assert plan["launch_flags"] == " ".join(_flag_args(flags))  # a boolean flag stands alone
    assert set(plan["slo"]) == {"cache_hit_rate>=0.2", "ttft.p90<=2", "failed==0"}
    assert all(s["met"] for s in plan["slo"].values())
    assert plan["recommended"]["metrics"]["requests"] == 100
    assert plan["reasons"] and plan["reasons"][0].startswith("cheapest configuration meeting every SLO")


def test_recommended_flags_meet_the_slos_in_kvplan_run(planned):
    plan, _ = planned
    result = _invoke(["run", *COMMON, *_flag_args(plan["recommended"]["flags"]), "--json"])
    summary = json.loads(result.stdout)
    assert judge(summary, parse_slos(SLO)).met
    summary.pop("provenance")
    assert summary == plan["recommended"]["metrics"]


def test_the_next_cheaper_step_fails_and_is_the_reason(planned):
    plan, _ = planned
    rec = plan["recommended"]
    cheaper = [c for c in plan["candidates"] if c["cost"] and c["cost"]["per_hour"] < rec["cost"]["per_hour"]]
    assert cheaper and not any(c["met"] for c in cheaper)
    assert any("GPU memory binds" in r for r in plan["reasons"])
    stages = {c["stage"] for c in plan["candidates"]}
    assert {"coarse", "memory-bisection"} <= stages


def test_output_directory_and_resume(planned):
    plan, out = planned
    assert json.loads((out / "plan.json").read_text()) == plan
    assert (out / "store" / "kvplan-store.json").exists()
    assert len(list((out / "store" / "runs").glob("*.parquet"))) == plan["search"]["ran"]
    assert not list(out.glob(".*.tmp"))
    again = json.loads(_invoke(["plan", *PLAN, "--slo", SLO, "-o", str(out), "--json"]).stdout)
    assert again["search"]["ran"] == 0 and again["search"]["reused"] == plan["search"]["ran"]
    assert again["recommended"] == plan["recommended"]
    assert again["candidates"] == plan["candidates"]


def test_not_met_recommends_the_closest_candidate():
    args = ["plan", *COMMON, "--tp", "8", "--page-size", "64", "--levels", "2", "--swa-ratios", "0.5"]
    result = _invoke([*args, "-j", "1", "--no-progress", "--slo", "cache_hit_rate>=0.9", "--json"])
    plan = json.loads(result.stdout)
    assert plan["met"] is False
    best = min(plan["candidates"], key=lambda c: (c["violation"], c["cost"]["per_hour"]))
    assert plan["recommended"]["flags"] == best["flags"]
    assert plan["slo"]["cache_hit_rate>=0.9"]["met"] is False
    assert plan["reasons"][0].startswith("no configuration searched meets every SLO")
    assert any("the best any configuration reached" in r for r in plan["reasons"])


def test_text_output_prints_the_launch_flags():
    args = ["plan", *COMMON, "--tp", "8", "--page-size", "64", "--levels", "1", "--swa-ratios", "0.5"]
    result = _invoke([*args, "-j", "1", "--no-progress", "--slo", "ttft.p90<=100"])
    assert "--tp-size 8 --page-size 64 --swa-full-tokens-ratio 0.5 --mem-fraction-static" in result.output
    assert "why:" in result.output


def test_what_if_rate_changes_the_trace():
    args = ["plan", *COMMON, "--tp", "8", "--page-size", "64", "--levels", "1", "--swa-ratios", "0.5"]
    args += ["-j", "1", "--no-progress", "--slo", "ttft.p90<=100", "--json"]
    plain = json.loads(_invoke(args).stdout)
    fast = json.loads(_invoke([*args, "--what-if", "rate=2"]).stdout)
    assert fast["search"]["what_if"] == ["rate=2"]
    assert fast["provenance"]["trace_hash"] != plain["provenance"]["trace_hash"]
    assert fast["recommended"]["metrics"]["request_rate"] > plain["recommended"]["metrics"]["request_rate"]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--slo", "ttft.p91<=1"], "--slo ttft.p91: not a number of `kvplan run --json`; valid paths:"),
        (["--slo", "ttft.p90<=1", "--what-if", "speed=2"], "--what-if 'speed=2'"),
        (["--slo", "ttft.p90<=1", "--swa-ratios", "0,2"], "--swa-ratios: 0 is out of range"),
        (["--slo", "ttft.p90<=1", "--gpu-price", "-1"], "--gpu-price must be"),
    ],
)
def test_bad_flags_are_one_line_errors(extra, message):
    result = runner.invoke(app, ["plan", *COMMON, *extra])
    assert result.exit_code == 1
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_seeds_the_recommendation_meets_the_slos_at_every_seed():
    slo = "ttft.p90<=1.5"
    args = ["plan", *COMMON, "--tp", "8", "--page-size", "64", "--levels", "9", "--swa-ratios", "0.3"]
    args += ["--request-rate", "4", "--seeds", "3", "-j", "1", "--no-progress", "--slo", slo, "--json"]
    plan = json.loads(_invoke(args).stdout)
    rec = plan["recommended"]
    assert plan["met"] and rec["seeds"] == [0, 1, 2] and "ttft.p90" in rec["interval"]
    ttfts = []
    for seed in rec["seeds"]:
        run = ["run", *COMMON, *_flag_args(rec["flags"]), "--request-rate", "4", "--seed", str(seed)]
        summary = json.loads(_invoke([*run, "--json"]).stdout)
        assert judge(summary, parse_slos(slo)).met
        ttfts.append(summary["ttft"]["p90"])
    assert rec["metrics"]["ttft"]["p90"] == pytest.approx(sum(ttfts) / 3)
