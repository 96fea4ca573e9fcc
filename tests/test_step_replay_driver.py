"""``kvplan step-replay``'s step driver where the server blocks or stalls.

Under overlap, when the server falls idle after an EOS finish: the finisher is already in the
next decode step when its EOS is processed, so the pass after its finish still has a batch in
flight to process; SGLang's loop blocks (runs ``on_idle``) only one pass later. The step driver
woke a server that had not blocked yet and crashed (AttributeError on the server's wake-up
event): no generated workload had an idle gap after an EOS finish."""

from __future__ import annotations

from simulator.engine.step_replay import run_lines
from simulator.engine.step_workload import StepKnobs
from tests.sched_oracle_harness import LARGE, generate


def test_idle_gap_after_an_overlap_eos_finish():
    """A (20 in, 5 script tokens, max_new 10, no ignore_eos) prefills at 0 and decodes at 1-5;
    step 5 processes its EOS (step 4's result) and releases 20 + 5 tokens (the EOS slot of
    step 5's decode is committed). Step 6 processes step 5's decode and runs no batch; step 7 is
    the second pass without one: ``on_idle`` finds the server fully idle and resets the ratio to
    0.7; steps 8-11 idle likewise, and B (arriving at 12) prefills there. As SGLang 0.5.23's loop
    gives it (drive_scheduler.py, the default pools)."""
    rows = [
        dict(rid="A", input_ids=list(range(20)), output_ids=list(range(500, 505)), max_new_tokens=10,
             ignore_eos=False),
        dict(rid="B", input_ids=list(range(1000, 1010)), output_ids=[600, 601], arrival_step=12),
    ]  # fmt: skip
    lines = run_lines(rows, StepKnobs())
    steps = [x for x in lines if x["type"] == "step"]
    assert [s["kind"] for s in steps] == ["prefill"] + ["decode"] * 5 + ["idle"] * 6 + [
        "prefill",
        "decode",
        "idle",
    ]
    assert steps[5]["finished"] == ["A"] and (steps[5]["full_used"], steps[5]["full_evictable"]) == (0, 25)
    assert [bool(s.get("fully_idle")) for s in steps[6:12]] == [False] + [True] * 5
    assert steps[6]["new_token_ratio"] < 0.7 and steps[7]["new_token_ratio"] == 0.7
    assert steps[12]["arrived"] == ["B"] and steps[14]["finished"] == ["B"]


def test_an_unservable_queue_head_stalls_sglang_until_max_steps():
    """SGLang's SWA-bug pools (SWA 400, window 128; large generated workload 19, plain loop):
    r23 was retracted with 392 + 22 tokens, more than the SWA pool, and heads the FCFS queue
    from step 305, when the last running request finished. SGLang 0.5.23 has no abort for a head
    that can never be admitted: every pass after it is idle with the same 10 requests waiting
    (its oracle: 0 differences from kvplan up to its --max-steps 3000). kvplan's server aborts
    such a head; the step clock must not, and stops at ``max_steps`` as the oracle does, with a
    RuntimeError crash at that step."""
    knobs = StepKnobs(swa_tokens=400, window=128, disable_overlap_schedule=True, max_steps=400)
    lines = run_lines(generate(19, style="mixed", shape=LARGE), knobs)
    steps = [x for x in lines if x["type"] == "step"]
    assert len(steps) == 401 and steps[-1]["crash"]["error"].startswith("RuntimeError: --max-steps 400")
    stalled = steps[305:400]
    assert all(s["kind"] == "idle" and s["waiting"] == 10 and not s["aborted"] for s in stalled)
    assert all(s["queue_order"][0] == "r23" for s in stalled)
    r23 = next(x for x in lines if x["type"] == "request" and x["rid"] == "r23")
    assert r23["finish_step"] is None and r23["retractions"] == 1
    assert lines[-1]["crashed"]["step"] == 400


def test_step_replay_cli_stops_at_max_steps(tmp_path):
    """``kvplan step-replay --max-steps``: the stalled workload above, through the CLI, prints
    the step clock's lines up to the crash at step 400 and exits 1 with the stall's reason (the
    CLI had no such flag: a stalled workload ran there to the default 1,000,000 steps)."""
    import json

    from typer.testing import CliRunner

    from simulator.cli.main import app

    path = tmp_path / "w.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in generate(19, style="mixed", shape=LARGE)))
    args = ["step-replay", str(path), "--swa-tokens", "400", "--window", "128", "--disable-overlap-schedule"]
    res = CliRunner().invoke(app, [*args, "--max-steps", "400", "--json"])
    assert res.exit_code == 1, res.output
    lines = [json.loads(x) for x in res.stdout.splitlines()]
    knobs = StepKnobs(swa_tokens=400, window=128, disable_overlap_schedule=True, max_steps=400)
    assert lines == run_lines(generate(19, style="mixed", shape=LARGE), knobs)
    assert lines[-1]["crashed"]["step"] == 400
    assert "stalls here too" in res.stderr and "SWA allocator" not in res.stderr
    res = CliRunner().invoke(app, [*args, "--max-steps", "0"])
    assert res.exit_code == 2 and "--max-steps" in res.output


def test_idle_leak_check_stops_the_swa_bug_run_where_sglang_does():
    """SGLang's SWA double-truncation bug (SWA 400, window 128, chunk 512; large generated
    workload 1001, plain loop) leaves the SWA pool's counters broken without any over-free: all
    24 requests finish, and at the first fully idle pass (step 911) available 4 + evictable 676
    exceeds the pool's 400. SGLang 0.5.23's ``on_idle`` leak check raises ValueError there before
    resetting the ratio (its oracle: 0 differences from kvplan up to that step); kvplan ran on,
    reset the ratio and reported a negative ``swa_used``. The check passes on every other idle
    pass (the idle-gap test above)."""
    knobs = StepKnobs(swa_tokens=400, window=128, disable_overlap_schedule=True, max_steps=3000)
    lines = run_lines(generate(1001, style="mixed", shape=LARGE), knobs)
    steps = [x for x in lines if x["type"] == "step"]
    last = steps[-1]
    assert last["step"] == 911 and last["kind"] == "idle" and last["fully_idle"]
    assert last["crash"]["error"].startswith("ValueError: pool memory leak detected! [full] total=4096")
    assert "[swa] total=400, available=4, evictable=676, protected=0" in last["crash"]["error"]
    assert last["new_token_ratio"] != 0.7  # the reset comes after the check: never reached
    assert all(r["finish_step"] is not None for r in lines if r["type"] == "request")


def test_no_idle_leak_check_in_the_pass_the_oracle_never_runs():
    """Overlap loop, same pools, large workload 1063: the SWA counters are broken at the end too
    (step 1103, the first batch-less pass, ``swa_used`` -190), but under overlap ``on_idle`` runs
    only at the second batch-less pass, and there the oracle's loop has already exited (every
    request finished, nothing in flight): SGLang raises nothing (0 errors, 1104 steps). kvplan's
    server still ran that pass and its leak check raised."""
    knobs = StepKnobs(swa_tokens=400, window=128, max_steps=3000)
    lines = run_lines(generate(1063, style="mixed", shape=LARGE), knobs)
    steps = [x for x in lines if x["type"] == "step"]
    assert lines[-1].get("crashed") is None and len(steps) == 1104
    assert (
        steps[-1]["kind"] == "idle" and steps[-1]["swa_used"] == -190 and steps[-1].get("fully_idle") is None
    )


def test_a_crash_while_scheduling_a_prefill_reports_sglangs_running_batch():
    """Plain loop, SWA-bug pools, large workload 1260: r14's last chunk prefills at step 543; at
    544 the eviction for the next prefill's allocation over-frees the SWA pool and both die.
    SGLang's ``get_next_batch_to_run`` had replaced its empty local running batch by the last
    prefill batch (a rebinding, not an in-place merge), and ``self.running_batch`` is assigned only
    after ``get_new_batch_prefill``: the oracle reports ``running`` 0 at the crash. kvplan had
    r14 in its running list since the end of 543 and reported 1."""
    knobs = StepKnobs(swa_tokens=400, window=128, disable_overlap_schedule=True, max_steps=3000)
    lines = run_lines(generate(1260, style="mixed", shape=LARGE), knobs)
    steps = [x for x in lines if x["type"] == "step"]
    assert steps[-2]["kind"] == "prefill" and steps[-2]["rids"] == ["r14"] and steps[-2]["chunked"] is None
    assert steps[-1]["step"] == 544 and steps[-1]["crash"]["error"].startswith("AssertionError")
    assert steps[-1]["running"] == 0
