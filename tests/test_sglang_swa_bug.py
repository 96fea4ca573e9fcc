"""SGLang 0.5.23's own bug (SCHEDULER.md Finding 1): with an SWA pool no larger than one chunk
plus a page a second request is truncated in one prefill batch, and the SWA allocator's assert
stops the scheduler. kvplan reproduces it (``step-replay`` reports the crash at SGLang's step
and exits 1; the differential test compares the step with the oracle's), and ``run`` / ``pools``
warn about such configurations."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from simulator.cli.main import app
from simulator.engine.step_replay import run_lines
from simulator.engine.step_workload import StepKnobs
from simulator.sglang_bugs import swa_double_chunk_condition
from tests.sched_oracle_harness import generate

runner = CliRunner()
BUG = dict(swa_tokens=400, window=128, chunked_prefill_size=512)


def test_condition_is_the_pool_against_one_chunk_plus_a_page():
    assert swa_double_chunk_condition(513, 512, 1, True)
    assert not swa_double_chunk_condition(514, 512, 1, True)
    assert swa_double_chunk_condition(8192 + 64, 8192, 64, True)
    assert not swa_double_chunk_condition(400, 512, 1, False)  # one pool: no SWA budget
    assert not swa_double_chunk_condition(400, -1, 1, True)  # no chunking
    assert not swa_double_chunk_condition(400, None, 1, True)


@pytest.mark.parametrize("plain,step", [(True, 592), (False, 729)])
def test_step_replay_reports_sglangs_crash_at_its_step(plain, step):
    """Generated workload 0 on SWA 400 / chunk 512: SGLang's oracle raises at step 592 (normal
    loop) and 729 (overlap) in ``free_group_end`` under ``maybe_evict_swa``; kvplan's step lines
    stop at the same step with the same check, and anomalies came before."""
    lines = run_lines(generate(0), StepKnobs(disable_overlap_schedule=plain, **BUG))
    steps = [x for x in lines if x["type"] == "step"]
    crash = steps[-1]["crash"]
    assert crash["step"] == step == steps[-1]["step"]
    assert crash["error"].startswith("AssertionError")
    assert any(w.endswith(" free_group_end") for w in crash["where"])
    assert any("anomalies" in s for s in steps)
    assert lines[-1]["crashed"] == crash and lines[-1]["errors"]


def test_step_replay_cli_exits_1_on_the_crash(tmp_path):
    wl = tmp_path / "w.jsonl"
    wl.write_text("".join(json.dumps(r) + "\n" for r in generate(0)))
    args = ["step-replay", str(wl), "--swa-tokens", "400", "--window", "128", "--disable-overlap-schedule"]
    r = runner.invoke(app, [*args, "--json"])
    assert r.exit_code == 1
    assert json.loads(r.stdout.splitlines()[-1])["crashed"]["step"] == 592
    assert "stopped at step 592" in r.stderr and "SGLang 0.5.23's SWA allocator asserts" in r.stderr
    ok = runner.invoke(app, [*args[:3], "1200", *args[4:]])  # a larger SWA pool: no crash
    assert ok.exit_code == 0, ok.output


POOL_ARGS = [
    "--model", "gpt-oss-120b", "--gpu", "H200", "--tp", "8", "--max-total-tokens", "20000",
    "--swa-full-tokens-ratio", "0.2",
]  # fmt: skip
WARNING = "kvplan: warning: SGLang 0.5.23 misbehaves with this configuration: the SWA pool (4,000 tokens)"


def test_pools_warns_where_sglang_misbehaves():
    bad = runner.invoke(app, ["pools", *POOL_ARGS, "--chunked-prefill-size", "8192"])
    assert bad.exit_code == 0, bad.output
    assert WARNING in bad.stderr and "chunked_prefill_size + page_size (8,192 + 1)" in bad.stderr
    good = runner.invoke(app, ["pools", *POOL_ARGS, "--chunked-prefill-size", "2048"])
    assert good.exit_code == 0 and "warning" not in good.stderr


def test_run_warns_and_stops_where_sglang_crashes():
    r = runner.invoke(app, ["run", *POOL_ARGS, "--chunked-prefill-size", "8192", "--limit", "200"])
    assert r.exit_code == 1
    assert WARNING in r.stderr
    assert "kvplan: error: the simulated server stopped at t=" in r.stderr
    assert "SGLang 0.5.23's SWA allocator asserts too" in r.stderr


def test_an_idle_leak_on_a_bug_configuration_is_sglangs_crash():
    """``kvplan run``: the idle leak check (``PoolLeakError``, SGLang's ValueError) on a
    configuration of the bug is reported as SGLang's own stop; elsewhere it stays kvplan's bug."""
    from types import SimpleNamespace

    from simulator.sglang_bugs import PoolLeakError, SGLangCrash, raise_if_sglang_crash

    bug = SimpleNamespace(swa_tokens=400, chunked_prefill_size=512, page_size=1, hybrid=True)
    with pytest.raises(SGLangCrash, match="idle leak check raises too"):
        raise_if_sglang_crash(PoolLeakError("pool memory leak detected! [swa] ..."), bug, 1.5)
    fine = SimpleNamespace(swa_tokens=4000, chunked_prefill_size=512, page_size=1, hybrid=True)
    assert raise_if_sglang_crash(PoolLeakError("pool memory leak detected!"), fine, 1.5) is None
