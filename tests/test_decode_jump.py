"""DecodeJump: the closed-form record of a fast-forwarded jump and its per-step arrays."""

from __future__ import annotations

import numpy as np
from controller_proxy import strict_controller  # noqa: F401
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine.decode_clock import DecodeClock
from simulator.engine.decode_jump import DecodeJump, JumpSegment, materialize
from simulator.engine.metrics import Recorder
from simulator.engine.observer import PoolCapacity, ServerObserver
from simulator.engine.request import SimRequest


@st.composite
def jumps(draw) -> DecodeJump:
    page = draw(st.sampled_from([1, 16, 64]))
    cuts = sorted(set(draw(st.lists(st.integers(1, 300), min_size=1, max_size=4))))
    planned = cuts[-1] + draw(st.integers(0, 50))  # the clock may price more steps than ran
    steps = cuts[-1]
    bounds = [0, *cuts]
    priced = [
        (b - a, draw(st.floats(1e-4, 1e-2)), draw(st.integers(1, 32)), draw(st.integers(0, 10**6)), 0, 0)
        for a, b in zip(bounds, bounds[1:], strict=False)
    ]
    priced[-1] = (priced[-1][0] + planned - steps, *priced[-1][1:])
    clock = DecodeClock(draw(st.floats(0, 1e4)), priced, 1e-10, 3e-10, 2e-10, 1e-10)
    opens = sorted(draw(st.lists(st.integers(0, steps - 1), max_size=20)))
    frees = draw(st.lists(st.tuples(st.integers(0, steps - 1), st.integers(1, 5)), max_size=6))
    segments = [
        JumpSegment(a, b, [], draw(st.integers(0, 10**6)), draw(st.integers(0, 10**5)))
        for a, b in zip(bounds, bounds[1:], strict=False)
    ]
    return DecodeJump(clock, steps, page, opens, frees, segments, draw(st.integers(0, 3)))


def _by_loop(jump: DecodeJump) -> tuple[list[int], list[int]]:
    """#full / #swa token per step, straight from JumpSegment's definition."""
    full, swa = [], []
    for seg in jump.segments:
        for s in range(seg.first, seg.end):
            opened = sum(1 for x in jump.opens if seg.first <= x <= s)
            freed = sum(pages for x, pages in jump.swa_frees if seg.first <= x <= s)
            full.append(seg.full_base + jump.page_size * opened)
            swa.append(seg.swa_base + jump.page_size * (opened - freed))
    return full, swa


@settings(max_examples=150, deadline=None)
@given(st.lists(jumps(), min_size=1, max_size=4))
def test_materialize_equals_each_jump_and_the_definition(batch) -> None:
    """All jumps at once equal each jump alone; times are the clock's floats bit for bit; the
    token counts are the segment definition's."""
    times, full, swa = materialize(batch)
    pos = 0
    for jump in batch:
        end = pos + jump.steps
        assert times[pos:end].tolist() == jump.clock.ends(jump.steps).tolist()
        exp_full, exp_swa = _by_loop(jump)
        assert full[pos:end].tolist() == exp_full
        assert swa[pos:end].tolist() == exp_swa
        one = jump.arrays()
        assert [a.tolist() for a in one] == [times[pos:end].tolist(), exp_full, exp_swa]
        pos = end
    assert pos == len(times) == len(full) == len(swa)


def test_a_recorder_that_keeps_jumps_gives_the_stepwise_frame() -> None:
    """Recorder keeps jumps in closed form; handing the same jumps over step by step (the
    observer default, used with --log-decode) gives the same decode frame."""
    reqs = [SimRequest(f"r{i}", np.zeros(0, np.int64), 10, 5, round=i % 2) for i in range(3)]
    clock = DecodeClock(1.0, [(4, 1e-3, 3, 300, 30, 0), (3, 1e-3, 2, 200, 20, 0)], 1e-9, 2e-9, 1e-9, 2e-9)
    jump = DecodeJump(
        clock,
        7,
        16,
        [0, 2, 5],
        [(3, 1)],
        [JumpSegment(0, 4, reqs, 1000, 500), JumpSegment(4, 7, reqs[:2], 900, 420)],
        queue=2,
    )
    frames = []
    for keep in (True, False):
        rec = Recorder()
        rec.on_start(PoolCapacity(4096, 2048), {})
        rec.on_decode_steps(np.array([0.5]), reqs, np.array([990]), np.array([490]), 1)
        if keep:
            rec.on_decode_jump(jump)
        else:
            ServerObserver.on_decode_jump(rec, jump)
        rec.on_decode_steps(np.array([9.0]), reqs[:1], np.array([800]), np.array([400]), 0)
        frames.append(rec.frames()["decode_steps"])
    assert frames[0].equals(frames[1])
    assert frames[0]["queue"].tolist() == [1, 0, 0, 0, 0, 0, 0, 2, 0]
    assert frames[0]["running"].tolist() == [3, 3, 3, 3, 3, 2, 2, 2, 1]
    assert frames[0]["full_token"].tolist()[1:8] == [1016, 1016, 1032, 1032, 900, 916, 916]
