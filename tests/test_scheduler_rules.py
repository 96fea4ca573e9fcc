"""SGLang 0.5.23's scheduler rules, each on a small hand-computed scenario (``kvplan step-replay``
on the plain loop). Each test fails with its rule taken out of simulator/engine."""

from __future__ import annotations

from simulator.engine.step_replay import run_lines
from simulator.engine.step_workload import StepKnobs


def _tokens(start: int, n: int) -> list[int]:
    return list(range(start, start + n))


def _run(rows: list[dict], **knobs) -> tuple[list[dict], dict[str, dict]]:
    lines = run_lines(rows, StepKnobs(disable_overlap_schedule=True, **knobs))
    steps = [x for x in lines if x["type"] == "step"]
    reqs = {x["rid"]: x for x in lines if x["type"] == "request"}
    return steps, reqs


def test_max_new_tokens_clip_and_ignore_eos():
    """``init_req_max_new_tokens`` and the scripted EOS (SCHEDULER.md's 6-row check): prompts
    of 50, 10 script tokens, FULL pool 4096. M < L stops by length at M whatever ignore_eos;
    M > L stops at EOS after L without ignore_eos and runs to M with it; M = 100000 is clipped to
    min(max_req_len - 50 - 1, 4096 - 50 - 1 - 1) = min(4095 - 51, 4044) = 4044."""
    rows = [
        dict(rid="a", max_new_tokens=5, ignore_eos=True),
        dict(rid="b", max_new_tokens=20, ignore_eos=False),
        dict(rid="c", max_new_tokens=20, ignore_eos=True),
        dict(rid="d", max_new_tokens=5, ignore_eos=False),
        dict(rid="e", max_new_tokens=100000, ignore_eos=False),
    ]
    for i, r in enumerate(rows):
        r.update(input_ids=_tokens(1000 * i, 50), output_ids=_tokens(1000 * i + 500, 10))
    _, reqs = _run(rows, full_tokens=4096)
    got = {rid: (r["max_new_tokens"], r["output_len"], r["finish_reason"]["type"]) for rid, r in reqs.items()}
    assert got == {
        "a": (5, 5, "length"),
        "b": (20, 10, "stop"),
        "c": (20, 20, "length"),
        "d": (5, 5, "length"),
        "e": (4044, 10, "stop"),
    }


def test_new_token_ratio_resets_when_fully_idle():
    """``Scheduler.on_idle``: A (10 in, 5 out) prefills at step 0 and decodes at steps 1-4, each
    decaying the ratio by (0.7 - 0.098) / 600; it finishes at step 4, step 5 is idle and fully
    idle, so the ratio is back at 0.7 there, and B (arriving at 20) is admitted with 0.7."""
    rows = [
        dict(rid="A", input_ids=_tokens(0, 10), output_ids=_tokens(100, 5)),
        dict(rid="B", input_ids=_tokens(200, 10), output_ids=_tokens(300, 5), arrival_step=20),
    ]
    steps, _ = _run(rows)
    decay = (0.7 - 0.7 * 0.14) / 600
    assert [s["kind"] for s in steps[:6]] == ["prefill", "decode", "decode", "decode", "decode", "idle"]
    assert abs(steps[4]["new_token_ratio"] - (0.7 - 4 * decay)) < 1e-12
    assert steps[5].get("fully_idle") and steps[5]["new_token_ratio"] == 0.7
    assert steps[20]["kind"] == "prefill" and steps[20]["new_token_ratio"] == 0.7


def _no_token_rows() -> list[dict]:
    """A (100 in, 50 out, max_new 800, stops at EOS) and B (the same sizes) at step 0, pool
    1000: A reserves 100 + 1 + 800 = 901, so B's 100 + 800 + 1 < 1000 - 901 fails: NO_TOKEN with
    A admitted, batch_is_full is set."""
    return [
        dict(rid=r, input_ids=_tokens(1000 * i, 100), output_ids=_tokens(1000 * i + 500, 50),
             max_new_tokens=800, ignore_eos=False)
        for i, r in enumerate("AB")
    ]  # fmt: skip


def test_batch_is_full_persists_on_a_full_attention_model():
    """``_get_new_batch_prefill_raw``: a full-attention model keeps batch_is_full until a request
    leaves. Step 1 starts clear (A's prefill batch became the running batch, a new object), B is
    refused again; from step 2 on no pass reaches ``calc_priority`` (queue_order null) until A
    finishes; a hybrid SWA model clears it every pass and re-orders the queue each time."""
    steps, reqs = _run(_no_token_rows(), full_tokens=1000, swa_tokens=1000, no_swa=True)
    assert steps[0]["batch_is_full"] and steps[0]["rids"] == ["A"]
    assert steps[1]["queue_order"] == ["B"] and steps[1]["batch_is_full"]
    a_done = reqs["A"]["finish_step"]
    assert all(s["queue_order"] is None and s["batch_is_full"] for s in steps[2 : a_done + 1])
    assert reqs["B"]["first_prefill_step"] == a_done + 1
    steps, _ = _run(_no_token_rows(), full_tokens=1000, swa_tokens=1000)
    assert all(s["queue_order"] == ["B"] for s in steps[1:10])


def test_waiting_prefix_refresh_keeps_a_waiting_prefix_cached():
    """SCHEDULER.md's ``refresh`` scenario (pools 600/600, window 256, 8 rows): warmA and warmB
    leave prefixes A and B (200 + 3 tokens each, A older). X (max_new 250) is refused at the head
    of the queue while big decodes; W = A + 100 waits behind it. With the refresh, W's prefix A
    is touched every 32 passes, so big's decode evicts B instead and W is admitted with prefix
    200; without it A goes first (the LRU) and W gets prefix 0."""
    a, b = _tokens(10_000, 200), _tokens(20_000, 200)
    rows = [
        dict(rid="warmA", input_ids=a, output_ids=_tokens(30_000, 4), arrival_step=0),
        dict(rid="warmB", input_ids=b, output_ids=_tokens(30_010, 4), arrival_step=8),
        dict(rid="big", input_ids=_tokens(40_000, 60), output_ids=_tokens(41_000, 250), arrival_step=16),
        dict(rid="X", input_ids=_tokens(50_000, 50), output_ids=_tokens(51_000, 10), arrival_step=16,
             max_new_tokens=250, ignore_eos=False),
        dict(rid="W", input_ids=a + _tokens(60_000, 100), output_ids=_tokens(61_000, 10), arrival_step=16),
    ]  # fmt: skip
    knobs = dict(full_tokens=600, swa_tokens=600, window=256, max_running_requests=8)
    _, on = _run(rows, **knobs)
    _, off = _run(rows, waiting_prefix_refresh=False, **knobs)
    assert on["W"]["prefix_len_first"] == 200 and on["W"]["cached_tokens"] == 200
    assert off["W"]["prefix_len_first"] == 0


def test_lpm_deprioritises_a_request_sharing_an_uncached_prefix():
    """``_compute_prefix_matches``: nothing is cached; A and B share their first 40 tokens (>= 32)
    and C shares nothing, so B waits behind C: the queue is A, C, B and LPM reports B."""
    shared = _tokens(0, 40)
    rows = [
        dict(rid="A", input_ids=shared + _tokens(100, 10), output_ids=_tokens(200, 3)),
        dict(rid="B", input_ids=shared + _tokens(300, 10), output_ids=_tokens(400, 3)),
        dict(rid="C", input_ids=_tokens(500, 50), output_ids=_tokens(600, 3)),
    ]
    steps, _ = _run(rows, schedule_policy="lpm")
    assert steps[0]["queue_order"] == ["A", "C", "B"]
    assert steps[0]["lpm_deprioritized"] == ["B"]
    assert steps[0]["rids"] == ["A", "C", "B"]


def test_overlap_keeps_a_chunk_whose_next_chunk_is_already_scheduled():
    """Overlap loop, chunk 512: step 0 prefills A (400) whole and B's first 112 tokens; step 1
    schedules B's last 225 before step 0's result is processed. That result must treat B as a
    chunk (stashed, no token): only A's checkpoint frees SWA, its 400 - 129 out-of-window slots,
    so 737 - 271 = 466 SWA slots stay allocated (465 used, A's 1 evictable), as SGLang has them.
    (kvplan took B for a finished prefill because extend_end had moved on: a bug.)"""
    rows = [
        dict(rid="A", input_ids=_tokens(0, 400), output_ids=_tokens(5000, 5)),
        dict(rid="B", input_ids=_tokens(1000, 337), output_ids=_tokens(6000, 5)),
    ]
    lines = run_lines(rows, StepKnobs(disable_overlap_schedule=False))
    steps = [x for x in lines if x["type"] == "step"]
    assert steps[0]["rids"] == ["A", "B"] and steps[0]["chunked"] == "B"
    assert steps[1]["extend_lens"] == [225] and steps[1]["prefix_lens"] == [112]
    assert (steps[1]["swa_used"], steps[1]["swa_evictable"]) == (465, 1)
    b = next(x for x in lines if x["type"] == "request" and x["rid"] == "B")
    assert (b["output_len"], b["prefill_chunks"]) == (5, 2)


def test_overlap_eos_finisher_commits_the_extra_decode_slot():
    """A (50 in, 10 script tokens, max_new 100, stops at EOS) alone. The plain loop inserts 50 +
    10 - 1 = 59 tokens (the EOS token gets no KV); under overlap A is already in the next
    decode step when its EOS is processed, that step writes the EOS token's KV, and all
    50 + 10 = 60 enter the tree, as SGLang 0.5.23 has it."""
    rows = [dict(rid="A", input_ids=_tokens(0, 50), output_ids=_tokens(500, 10), max_new_tokens=100,
                 ignore_eos=False)]  # fmt: skip
    for overlap, tree in ((False, 59), (True, 60)):
        lines = run_lines(rows, StepKnobs(disable_overlap_schedule=not overlap))
        last = [x for x in lines if x["type"] == "step"][-1]
        assert (last["full_used"], last["full_evictable"]) == (0, tree)
