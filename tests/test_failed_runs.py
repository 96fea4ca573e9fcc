"""Failed runs look failed: rejected and aborted requests are counted, explained (with the right
reason) and reported first, and the commands exit with status 3 over ``--max-abort-fraction``.

Issue 9, defects 1 (failed runs reported success), 3 (the context length was never checked),
12 (open-loop bursts labelled "sequential replay") and 13 (impossible memory advice).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simulator import SimConfig, run_config
from simulator.cli.failed_runs import FAILED_REQUESTS_EXIT
from simulator.cli.main import app
from simulator.engine import failures
from simulator.engine.server_state import ServerPools
from simulator.sizing.advice import no_kv_budget_advice
from traces import load_trace

REPO = Path(__file__).resolve().parents[1]
MOONCAKE = REPO / "traces" / "data" / "mooncake_arxiv_head800.jsonl"
runner = CliRunner()


def _mooncake(tmp_path: Path, lengths: list[int], output: int = 10) -> Path:
    """A Mooncake JSONL with these prompt lengths (fresh 512-token blocks each), 1 s apart."""
    rows, block = [], 0
    for i, n in enumerate(lengths):
        k = -(-n // 512)
        rows.append(
            {
                "timestamp": 1000 * i,
                "input_length": n,
                "output_length": output,
                "hash_ids": list(range(block, block + k)),
            }
        )
        block += k
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


# --- defect 3: the model's context length -----------------------------------------------------


def test_prompt_over_the_context_is_rejected_not_served(tmp_path):
    # gpt-oss-120b's context is 131,072 tokens; SGLang's TokenizerManager._validate_one_request
    # refuses a prompt of that length or more
    trace = load_trace(_mooncake(tmp_path, [1000, 204_800, 2000]))
    result = run_config(trace, SimConfig(tp=8, page_size=64))
    s = result.summary
    assert (s["requests"], s["rejected"], s["aborted"], s["failed"]) == (2, 1, 0, 1)
    assert s["requests_submitted"] == 3
    assert s["failure_reasons"]["rejected"] == {failures.CONTEXT_EXCEEDED: 1}
    req = result.frames["requests"]
    row = req[req["prompt_len"] == 204_800].iloc[0]
    assert bool(row["rejected"]) and not bool(row["aborted"])
    assert "204800" in row["abort_reason"] and "131072" in row["abort_reason"]
    # served requests' numbers are the two others' only
    assert s["total_prompt_tokens"] == 3000


def test_reject_reason_follows_sglang_checks():
    # _validate_one_request: prompt >= context; prompt + max_new_tokens > context (when set);
    # validate_input_length: prompt >= min(context, KV pool) - 6 (tp_worker.get_worker_info)
    assert failures.reject_reason(131_071, None, 131_072, 10**7).startswith(failures.INPUT_TOO_LONG)
    assert failures.reject_reason(131_072, None, 131_072, 10**7).startswith(failures.CONTEXT_EXCEEDED)
    assert failures.reject_reason(131_065, None, 131_072, 10**7) is None
    assert failures.reject_reason(131_000, 100, 131_072, 10**7).startswith(failures.TOTAL_EXCEEDED)
    assert failures.reject_reason(131_000, 72, 131_072, 10**7) is None
    assert failures.reject_reason(4994, None, 131_072, 5000).startswith(failures.INPUT_TOO_LONG)
    assert failures.reject_reason(4993, None, 131_072, 5000) is None
    assert failures.reject_reason(10**9, None, None, 5000) is None  # no model: not checked


def test_bench_multiturn_request_length_over_the_context_is_rejected():
    res = runner.invoke(
        app,
        [
            "bench-multiturn",
            "--request-length",
            "200000",
            "--num-clients",
            "2",
            "--num-rounds",
            "1",
            "--json",
        ],
    )
    assert res.exit_code == FAILED_REQUESTS_EXIT, res.output
    s = json.loads(res.stdout)
    assert (s["rejected"], s["aborted"], s["requests"], s["requests_submitted"]) == (2, 0, 0, 2)
    assert s["failure_reasons"]["rejected"] == {failures.CONTEXT_EXCEEDED: 2}


def test_bench_multiturn_prompt_plus_output_over_the_context_is_rejected():
    # bench_multiturn sends max_new_tokens = its output length: 130,000 + 2,000 > 131,072
    res = runner.invoke(
        app,
        ["bench-multiturn", "--request-length", "130000", "--output-length", "2000", "--num-clients", "1",
         "--num-rounds", "1", "--json", "--max-abort-fraction", "1"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)
    assert s["failure_reasons"]["rejected"] == {failures.TOTAL_EXCEEDED: 1}


# --- defect 1: failed runs ----------------------------------------------------------------------


def test_max_prefill_tokens_zero_aborts_with_the_right_reason():
    trace = load_trace(MOONCAKE).head(5)
    s = run_config(trace, SimConfig(max_prefill_tokens=0)).summary
    assert (s["aborted"], s["rejected"], s["requests"], s["requests_submitted"]) == (5, 0, 0, 5)
    assert s["failure_reasons"]["aborted"] == {failures.NO_PREFILL_BUDGET: 5}
    # the old reason blamed the pools ("... but the pools hold 1051165 FULL ...")
    assert "pools hold" not in s["failure_examples"][failures.NO_PREFILL_BUDGET]


def test_run_says_so_first_and_exits_3():
    # (--max-prefill-tokens 0 is now refused before the run by the flag checks; a 1,500-token
    # pool rejects the bundled trace's first four prompts on arrival instead)
    res = runner.invoke(app, ["run", "--limit", "4", "--max-total-tokens", "1500", "--no-progress"])
    assert res.exit_code == FAILED_REQUESTS_EXIT
    lines = res.stdout.splitlines()
    assert lines[0].startswith("FAILED REQUESTS: 4 of 4 requests were not served")
    assert "4 rejected" in lines[1] and "maximum allowed input length" in lines[1]
    assert "All requests completed" not in res.stdout
    assert "  Total requests: 4 " in res.stdout  # the failed ones count
    assert "4 of 4 requests failed" in res.stderr


def test_max_abort_fraction_sets_the_threshold():
    args = ["run", "--limit", "4", "--max-total-tokens", "1500", "--no-progress", "--json"]
    assert runner.invoke(app, [*args, "--max-abort-fraction", "1"]).exit_code == 0
    assert runner.invoke(app, [*args, "--max-abort-fraction", "0.99"]).exit_code == FAILED_REQUESTS_EXIT
    bad = runner.invoke(app, [*args, "--max-abort-fraction", "nan"])
    assert bad.exit_code == 2 and "--max-abort-fraction" in bad.output


def test_run_json_has_the_failure_report(tmp_path):
    path = _mooncake(tmp_path, [1000, 204_800])
    res = runner.invoke(
        app, ["run", "--trace", str(path), "--tp", "8", "--json", "--out", str(tmp_path / "o")]
    )
    assert res.exit_code == FAILED_REQUESTS_EXIT
    s = json.loads(res.stdout)
    assert {"aborted", "rejected", "failed", "failure_reasons"} <= set(s)
    assert (s["rejected"], s["failed"]) == (1, 1)
    csv = (tmp_path / "o" / "requests.csv").read_text().splitlines()
    assert "rejected" in csv[0].split(",")


def test_a_run_without_failures_reads_as_before():
    res = runner.invoke(app, ["run", "--limit", "20", "--no-progress"])
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith(
        "All requests completed\nPerformance metrics summary:\n  Total requests: 20 at"
    )
    assert "FAILED" not in res.stdout and "Served requests" not in res.stdout


def test_unservable_reason_names_the_pool_that_is_too_small():
    class Cache:  # an idle server's controller: nothing cached, nothing locked
        def capacity(self):
            return (5000, 4000)

        def room_tokens(self):
            return (5000, 4000)

        def lock_footprint(self, req):
            return (512, 0)

    class Req:
        fill_len, prefix_len, max_new_tokens, num_outputs, last_node = 5000, 512, 353, 0, object()

    pools = ServerPools(
        page_size=1,
        full_tokens=5000,
        swa_tokens=4000,
        window=127,
        max_running_requests=8,
        chunked_prefill_size=0,
    )
    why = failures.unservable_reason(Req(), Cache(), pools, 16384)
    assert why.startswith(failures.FULL_TOO_SMALL)
    assert "512 locked prefix tokens + 4488 new prompt tokens + 353 reserved output tokens" in why
    big_page = ServerPools(
        page_size=8192,
        full_tokens=5000,
        swa_tokens=4000,
        window=127,
        max_running_requests=8,
        chunked_prefill_size=0,
    )
    assert failures.unservable_reason(Req(), Cache(), big_page, 16384).startswith(failures.PAGE_OVER_POOL)


def test_demo_with_small_pools_shows_the_failures():
    res = runner.invoke(app, ["demo", "--max-total-tokens", "5000"])
    assert res.exit_code == FAILED_REQUESTS_EXIT
    assert res.stdout.startswith("FAILED REQUESTS: ")
    assert "rejected" in res.stdout and "aborted" in res.stdout


def test_cache_replay_defaults_serve_the_bundled_trace():
    res = runner.invoke(app, ["cache-replay", str(MOONCAKE), "--json"])
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout.strip().splitlines()[-1])["summary"]
    assert s["requests"] == 800 and s["aborted"] == 0
    assert s["hit_rate"] > 0.2


def test_cache_replay_aborts_are_reported_and_fail_the_run():
    args = ["cache-replay", str(MOONCAKE), "--full-tokens", "4096", "--swa-tokens", "1024", "--window", "128"]
    res = runner.invoke(app, args)
    assert res.exit_code == FAILED_REQUESTS_EXIT
    assert res.stdout.startswith("FAILED REQUESTS: 763 of 800 requests were aborted")
    res = runner.invoke(app, [*args, "--json", "--max-abort-fraction", "1"])
    assert res.exit_code == 0
    rows = [json.loads(x) for x in res.stdout.strip().splitlines()]
    assert sum(1 for r in rows[:-1] if r.get("aborted")) == 763
    assert rows[-1]["summary"]["failure_reasons"]["aborted"] == {failures.OUT_OF_MEMORY: 763}


# --- defect 12: the "Total requests" label ---------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "label"),
    [
        (["--time-scale", "0", "--limit", "3"], "Total requests: 3 (open loop, all sent at the same time)"),
        (["--limit", "1"], "Total requests: 1 (open loop, one request)"),
    ],
)
def test_open_loop_without_a_rate_is_not_called_sequential(args, label):
    res = runner.invoke(app, ["run", "--no-progress", *args])
    assert res.exit_code == 0, res.output
    assert label in res.stdout and "sequential" not in res.stdout


# --- defect 13: memory advice -----------------------------------------------------------------------


def test_memory_advice_never_suggests_an_impossible_fraction():
    res = runner.invoke(app, ["pools", "--tp", "1024"])
    assert res.exit_code == 1
    assert "above -" not in res.output and "more GPUs" not in res.output
    res = runner.invoke(app, ["demo", "--gpu", "L40S", "--tp", "1"])
    assert res.exit_code == 1
    assert "--tp 2 or more" in res.output
    assert "above 1." not in res.output  # the old advice: "above 1.388"


def test_memory_advice_is_computed():
    gib = 1 << 30
    # 30 GiB of weights per rank (60 at tp 1), 44 GiB free: a fraction above 0.682 or tp 4 at 0.5
    advice = no_kv_budget_advice(fraction=0.5, tp=2, pre_bytes=44 * gib, model_bytes=60 * gib, mm_bytes=0)
    assert "raise --mem-fraction-static above 0.682" in advice.lower()
    assert "--tp 4 or more" in advice
    # weights over the whole GPU: no fraction helps, only TP
    advice = no_kv_budget_advice(fraction=0.8, tp=1, pre_bytes=44 * gib, model_bytes=60 * gib, mm_bytes=0)
    assert "fraction-static above" not in advice and "--tp 2 or more" in advice
