"""``--allow-auto-truncate``: prompts that do not fit are cut as SGLang 0.5.23 cuts them."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from simulator.cli.main import app
from simulator.engine.config import SimConfig
from simulator.engine.metrics import Recorder
from simulator.engine.simulate import simulate
from simulator.engine.truncation import Truncation, auto_truncate, truncated_pages
from traces import load_trace

CTX = 131_072  # gpt-oss-120b


@pytest.mark.parametrize(
    ("prompt", "output", "max_new", "kv", "want"),
    [
        # tokenizer keeps context_len tokens and max_new_tokens drops to 0 (prefill-only, served
        # as one token); validate_input_length then keeps max_req_input_len = 131071 - 5
        (200_000, 300, 300, 10**7, Truncation(131_066, 1, 1)),
        (200_000, 300, None, 10**7, Truncation(131_066, 1, 1)),
        # fits the context, but prompt + max_new_tokens does not: max_new_tokens = 131072 - 131000
        # = 72, then init_req_max_new_tokens bounds it by max_req_len - prompt - 1 = 70
        (131_000, 300, 300, 10**7, Truncation(131_000, 70, 70)),
        (131_000, 8, 300, 10**7, Truncation(131_000, 8, 70)),
        # the KV pool binds: max_req_len = 49_999, prompt kept to 49_994, nothing left to generate
        (60_000, 100, 100, 50_000, Truncation(49_994, 1, 1)),
        # at the input limit of validate_input_length only
        (131_067, 1, None, 10**7, Truncation(131_066, 1, 1)),
    ],
)
def test_auto_truncate_follows_sglang(prompt, output, max_new, kv, want):
    assert auto_truncate(prompt, output, max_new, CTX, kv) == want


def test_truncated_pages_keep_the_prompt_prefix_and_make_the_rest_unique():
    pages = list(range(100, 120))  # 20 pages of 4 tokens: an 80-token sequence
    cut = Truncation(prompt_len=30, output_len=5, max_new_tokens=5)
    got = truncated_pages(pages, cut, 4, -1)
    assert got.tolist() == [100, 101, 102, 103, 104, 105, 106, -1]  # 7 prompt pages, then 35 // 4 = 8


def _tokens_trace(tmp_path, prompt_lens):
    lines = [
        {"rid": f"r{i}", "input_ids": [(7919 * i + j) % 50_000 for j in range(n)], "output_ids": [7] * 8}
        for i, n in enumerate(prompt_lens)
    ]
    p = tmp_path / "w.jsonl"
    p.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return p


def _run(trace, **kw):
    cfg = SimConfig(model="gpt-oss-120b", gpu="H200", tp=8, page_size=64, **kw)
    rec = Recorder.from_config(cfg)
    simulate(trace, cfg, rec)
    return rec.report_summary(), rec.report_frames()["requests"].set_index("rid")


def test_prompt_over_the_context_is_cut_and_served(tmp_path):
    trace = load_trace(_tokens_trace(tmp_path, [500, 140_000, 700]))
    refused, _ = _run(trace)
    assert (refused["rejected"], refused["truncated"]) == (1, 0)
    served, frame = _run(trace, allow_auto_truncate=True)
    assert (served["rejected"], served["failed"], served["truncated"]) == (0, 0, 1)
    assert served["requests"] == 3
    assert frame.loc["r1", "truncated"] and not frame.loc["r0", "truncated"]
    assert (frame.loc["r1", "prompt_len"], frame.loc["r1", "output_len"]) == (131_066, 1)


def test_max_new_tokens_over_the_context_is_cut(tmp_path):
    trace = load_trace(_tokens_trace(tmp_path, [131_000]))
    refused, _ = _run(trace, max_new_tokens=300)
    assert refused["rejected"] == 1
    served, frame = _run(trace, max_new_tokens=300, allow_auto_truncate=True)
    assert (served["rejected"], served["truncated"], served["requests"]) == (0, 1, 1)
    assert (frame.loc["r0", "prompt_len"], frame.loc["r0", "output_len"]) == (131_000, 8)


def test_cli_accepts_the_flag_and_reports_the_count(tmp_path):
    path = _tokens_trace(tmp_path, [500, 140_000])
    args = ["run", "--trace", str(path), "--tp", "8", "--page-size", "64"]
    res = CliRunner().invoke(app, [*args, "--allow-auto-truncate", "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output)
    assert (summary["truncated"], summary["failed"]) == (1, 0)
    text = CliRunner().invoke(app, [*args, "--allow-auto-truncate"])
    assert text.exit_code == 0 and "TRUNCATED REQUESTS: 1 prompts were cut" in text.output
    assert CliRunner().invoke(app, args).exit_code == 3  # without the flag: rejected, the run fails


def test_bench_multiturn_takes_the_flag():
    """bench_multiturn sends max_new_tokens with ignore_eos: 200k-token prompts are cut to the
    input limit and served (rejected without the flag)."""
    args = ["bench-multiturn", "--num-clients", "2", "--num-rounds", "2", "--request-length", "200000"]
    args += ["--output-length", "16", "--tp", "8", "--page-size", "64", "--json", "--no-progress"]
    res = CliRunner().invoke(app, [*args, "--allow-auto-truncate"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output)
    assert (summary["truncated"], summary["failed"], summary["requests"]) == (4, 0, 4)
    assert summary["average_prompt_len"] == 131_066
    assert CliRunner().invoke(app, args).exit_code == 3
