"""Impossible configurations fail at start; unservable requests are aborted and counted;
a run that stops making progress ends with a diagnostic, never a hang."""

from __future__ import annotations

import json

import pytest
import simpy
from typer.testing import CliRunner

from simulator.cli.main import app
from simulator.engine.config import SimConfig
from simulator.engine.metrics import Recorder
from simulator.engine.server import ServerModel, StuckSimulation
from simulator.engine.simulate import simulate
from simulator.errors import ConfigError
from traces import load_trace

runner = CliRunner()


def _tokens_trace(tmp_path, prompt_lens):
    lines = []
    for i, n in enumerate(prompt_lens):
        lines.append({"rid": f"r{i}", "input_ids": [1000 * i + j for j in range(n)], "output_ids": [7] * 8})
    p = tmp_path / "w.jsonl"
    p.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return p


def test_swa_pool_smaller_than_window_is_an_error_at_start(tmp_path):
    cfg = SimConfig(model="gpt-oss-120b", gpu="H200", tp=8, page_size=64, max_total_tokens=200)
    trace = load_trace(_tokens_trace(tmp_path, [100]))
    with pytest.raises(ConfigError, match="window"):
        simulate(trace, cfg, Recorder.from_config(cfg))
    res = runner.invoke(
        app,
        [
            "run",
            "--trace",
            str(tmp_path / "w.jsonl"),
            "--tp",
            "8",
            "--page-size",
            "64",
            "--max-total-tokens",
            "200",
        ],
    )
    assert res.exit_code == 1
    assert "kvplan: error:" in res.stderr and "Traceback" not in res.output


def test_request_that_can_never_fit_is_rejected_and_counted(tmp_path):
    # a 12k-token prompt against a 10k-token pool: SGLang's scheduler refuses it on arrival
    # (validate_input_length: max_req_input_len = min(context, KV pool) - 6)
    trace = load_trace(_tokens_trace(tmp_path, [500, 12_000, 700]))
    cfg = SimConfig(model="gpt-oss-120b", gpu="H200", tp=8, page_size=64, max_total_tokens=10_000)
    rec = Recorder.from_config(cfg)
    simulate(trace, cfg, rec)
    summary = rec.report_summary()
    assert (summary["aborted"], summary["rejected"]) == (0, 1)
    assert summary["requests"] == 2  # the two that fit completed
    assert summary["requests_submitted"] == 3
    frame = rec.report_frames()["requests"]
    assert frame.loc[frame["rid"] == "r1", "rejected"].item()
    assert not frame.loc[frame["rid"] == "r1", "aborted"].item()
    assert "the limit is 9978" in frame.loc[frame["rid"] == "r1", "abort_reason"].item()


def test_request_that_fits_the_input_limit_but_not_the_pool_is_aborted(tmp_path):
    # 9,950 prompt tokens pass validate_input_length (limit 9,978) but with its output and a
    # page they exceed the 9,984-token FULL pool: aborted as unservable, with that arithmetic
    trace = load_trace(_tokens_trace(tmp_path, [500, 9_950, 700]))
    cfg = SimConfig(model="gpt-oss-120b", gpu="H200", tp=8, page_size=64, max_total_tokens=10_000)
    rec = Recorder.from_config(cfg)
    simulate(trace, cfg, rec)
    summary = rec.report_summary()
    assert (summary["aborted"], summary["rejected"], summary["requests"]) == (1, 0, 2)
    reason = rec.frames()["requests"].set_index("rid").loc["r1", "abort_reason"]
    assert reason.startswith("request does not fit the FULL pool: ")


def test_a_lost_request_ends_the_run_with_a_diagnostic(tmp_path, monkeypatch):
    trace = load_trace(_tokens_trace(tmp_path, [300, 300]))
    cfg = SimConfig(model="gpt-oss-120b", gpu="H200", tp=8, page_size=64)
    real_submit = ServerModel.submit

    def losing_submit(self, sim):  # a bug that drops the second request on the floor
        if sim.rid == "r1":
            return simpy.Event(self.env)
        return real_submit(self, sim)

    monkeypatch.setattr(ServerModel, "submit", losing_submit)
    with pytest.raises(StuckSimulation, match="1 of 2 requests never finished"):
        simulate(trace, cfg, Recorder.from_config(cfg))


def test_a_broken_invariant_is_a_kvplan_bug_shown_with_its_traceback(tmp_path, monkeypatch):
    # the real engine under --check-invariants, with a checker that finds a (made-up) leak
    import simulator.invariants

    monkeypatch.setattr(simulator.invariants, "collect_violations", lambda cache, running=(): ["FULL leak"])
    _tokens_trace(tmp_path, [300])
    args = [
        "run",
        "--trace",
        str(tmp_path / "w.jsonl"),
        "--tp",
        "8",
        "--page-size",
        "64",
        "--check-invariants",
    ]
    res = runner.invoke(app, args)
    assert res.exit_code == 70
    assert "Traceback (most recent call last)" in res.stderr and "check_invariants" in res.stderr
    assert "InvariantViolation: FULL leak" in res.stderr
    assert res.stderr.rstrip().endswith("please report it with the command line and the traceback above")


def test_invariant_violation_raised_inside_a_simpy_process_keeps_its_message():
    """simpy re-raises a process's exception re-created from its args: the message must stay
    the joined errors, not a '; '-join of its characters."""
    from simulator.invariants import InvariantViolation

    env = simpy.Environment()

    def proc():
        yield env.timeout(1)
        raise InvariantViolation(["FULL pool: 3 pages leaked", "SWA list out of order"])

    env.process(proc())
    with pytest.raises(InvariantViolation) as info:
        env.run()
    assert str(info.value) == "FULL pool: 3 pages leaked; SWA list out of order"


@pytest.mark.parametrize("truncate", [False, True])
def test_a_client_max_new_tokens_beyond_64_bits_is_rejected_not_a_crash(tmp_path, truncate):
    # the compiled build keeps ServerReq.max_new_tokens in a C long long: the client's unclipped
    # value must not be stored there (it once raised OverflowError from inside the run)
    trace = load_trace(_tokens_trace(tmp_path, [500, 700]))
    cfg = SimConfig(
        model="gpt-oss-120b",
        gpu="H200",
        tp=8,
        page_size=64,
        max_total_tokens=10_000,
        max_new_tokens=str(10**30),
        allow_auto_truncate=truncate,
    )
    rec = Recorder.from_config(cfg)
    simulate(trace, cfg, rec)
    summary = rec.report_summary()
    assert summary["requests_submitted"] == 2
    if not truncate:  # prompt + max_new_tokens > context: refused on arrival, as SGLang does
        assert (summary["aborted"], summary["rejected"]) == (0, 2)
