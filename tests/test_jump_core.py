"""The decode jump's server-typed steps (simulator.engine.jump_core, issue 14) and the helpers they
brought: each gives what the code it replaced gave (in the compiled build too)."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.engine.decode_clock import DecodeClock, segment_sums, segment_sums_from
from simulator.engine.decode_jump import DecodeJump, JumpColumns, JumpSegment
from simulator.engine.jump_core import new_jump, new_segment, picked


@pytest.mark.parametrize("seed", range(40))
def test_segment_sums_from_an_earlier_segment_equal_a_full_pass(seed: int) -> None:
    """Members of a later segment are among an earlier one's: visiting only those gives the same
    members, in the same order, and the same sums as visiting every request."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    seqs = [int(x) for x in rng.integers(0, 5000, n)]
    last = [int(x) for x in rng.integers(0, 300, n)]
    w = int(rng.choice([64, 128, 4096, 1 << 40]))
    cuts = sorted({int(x) for x in rng.integers(1, 300, 5)})
    prev = segment_sums(seqs, last, 0, w)[0]
    for a in cuts:
        want = segment_sums(seqs, last, a, w)
        got = segment_sums_from(seqs, last, prev, a, w)
        assert got == want
        prev = got[0]


def test_picked_segments_and_jumps_match_their_constructors() -> None:
    items = ["a", "b", "c", "d"]
    assert picked(items, [0, 2, 3]) == ["a", "c", "d"]
    assert picked(items, []) == []
    seg = new_segment(0, 9, ["x"], 640, 320)
    ref = JumpSegment(0, 9, ["x"], 640, 320)
    assert repr(seg) == repr(ref)
    clock = DecodeClock(0.0, [(9, 1.0, 1, 0, 0, 0)], 0.0, 0.0, 0.0, 0.0)
    jump = new_jump(clock, 9, 64, [3], [(4, 1)], [seg], 2)
    want = DecodeJump(clock, 9, 64, [3], [(4, 1)], [ref], 2)
    for name in ("clock", "steps", "page_size", "opens", "swa_frees", "queue"):
        assert getattr(jump, name) == getattr(want, name), name
    cols, ref_cols = JumpColumns(), JumpColumns()
    cols.add(jump)
    ref_cols.add(want)
    for got, exp in zip(cols.arrays(), ref_cols.arrays(), strict=True):
        np.testing.assert_array_equal(got, exp)


def test_jump_columns_keep_growing_after_a_read() -> None:
    """Reading the token counts leaves the columns as they were: later jumps extend them, and the
    counts of the earlier steps stay the same."""
    clock = DecodeClock(0.0, [(4, 1.0, 1, 0, 0, 0)], 0.0, 0.0, 0.0, 0.0)
    cols = JumpColumns()
    cols.add(DecodeJump(clock, 4, 64, [0, 2], [(1, 1)], [JumpSegment(0, 4, [], 640, 320, -64, 0)], 0))
    full, swa = cols.tokens()
    cols.add(DecodeJump(clock, 4, 64, [1], [], [JumpSegment(0, 4, [], 700, 300)], 0))
    full2, swa2 = cols.tokens()
    np.testing.assert_array_equal(full2[:4], full)
    np.testing.assert_array_equal(swa2[:4], swa)
    assert len(full2) == 8


class _Sim:
    def __init__(self, rnd: int, heartbeat: bool) -> None:
        self.round, self.heartbeat = rnd, heartbeat


@pytest.mark.parametrize("seed", range(60))
def test_jump_constants_follow_round_counts_down_the_segments(seed: int) -> None:
    """Batches of several rounds that shrink segment by segment (their labels come from the
    previous counts less the requests that left) get ``majority_round``'s answer, ties too."""
    from simulator.engine.rounds import jump_constants, majority_round

    rng = np.random.default_rng(seed)
    rounds = int(rng.integers(1, 5))
    sims = [_Sim(int(rng.integers(0, rounds)), bool(rng.random() < 0.15)) for _ in range(12)]
    segments, a, batch = [], 0, sims
    for _ in range(int(rng.integers(1, 7))):
        if rng.random() < 0.1:  # now and then a batch that is not a subsequence
            batch = [sims[int(i)] for i in rng.permutation(len(sims))[: len(batch)]]
        segments.append(JumpSegment(a, a + 3, batch, 0, 0))
        batch = [s for s in batch if rng.random() < 0.75]
        a += 3
    jump = DecodeJump(DecodeClock(0.0, [], 1e-9, 1e-9, 1e-9, 1e-9), a, 64, [], [], segments, 1)
    got: list = []
    jump_constants(got, jump)
    want: list = []
    for s in segments:
        label = majority_round(s.batch)
        if s.end == a:
            want.append((2, len(s.batch), 0, *label))
            want.append((1, len(s.batch), 1, *label))
        else:
            want.append((3, len(s.batch), 0, *label))
    assert got == want
