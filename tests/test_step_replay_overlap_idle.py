"""``kvplan step-replay`` under overlap, when the server falls idle after an EOS finish.

The finisher is already in the next decode step when its EOS is processed, so the pass after
its finish still has a batch in flight to process; SGLang's loop blocks (runs ``on_idle``) only
one pass later. The step driver woke a server that had not blocked yet and crashed
(AttributeError on the server's wake-up event): no generated workload had an idle gap after an
EOS finish."""

from __future__ import annotations

from simulator.engine.step_replay import run_lines
from simulator.engine.step_workload import StepKnobs


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
