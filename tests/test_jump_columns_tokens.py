"""JumpColumns.tokens (running sums with per-segment constants, issue 14) gives the counts of
the per-segment repeat it replaced (``_tokens_general``), for random jumps, for mixed page sizes
(which take the general path), and for counts near int64's ends (both wrap alike)."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.engine.decode_clock import DecodeClock
from simulator.engine.decode_jump import DecodeJump, JumpColumns, JumpSegment


def _jump(rng: np.random.Generator, page: int, big: bool) -> DecodeJump:
    m = int(rng.integers(1, 60))
    cuts = sorted({int(x) for x in rng.integers(1, m, size=int(rng.integers(0, 4)))} - {0}) if m > 1 else []
    bounds = [0, *cuts, m]
    lim = 1 << 61 if big else 10_000
    segs = []
    for a, b in zip(bounds, bounds[1:], strict=False):
        seg = JumpSegment(a, b, [], int(rng.integers(-lim, lim)), int(rng.integers(-lim, lim)))
        if rng.random() < 0.4:
            seg.full_released, seg.swa_released = -int(rng.integers(0, 500)), -int(rng.integers(0, 500))
        segs.append(seg)
    opens = sorted(int(x) for x in rng.integers(0, m, size=int(rng.integers(0, 3 * m))))
    frees = [(int(x), int(rng.integers(1, 5))) for x in rng.integers(0, m, size=int(rng.integers(0, 4)))]
    clock = DecodeClock(0.0, [(m, 1e-3, 1, 1, 1, 1)], 1e-6, 1e-6, 1e-6, 1e-6)
    return DecodeJump(clock, m, page, opens, frees, segs, 0)


@pytest.mark.parametrize("seed", range(30))
def test_tokens_equal_the_repeated_segments(seed: int) -> None:
    rng = np.random.default_rng(seed)
    mixed = seed % 5 == 4
    cols = JumpColumns()
    for _ in range(int(rng.integers(1, 40))):
        page = int(rng.choice([1, 16, 64])) if mixed else 64
        cols.add(_jump(rng, page, big=seed % 3 == 2))
    full, swa = cols.tokens()
    ref_full, ref_swa = cols._tokens_general()
    assert full.dtype == ref_full.dtype == np.int64 and swa.dtype == np.int64
    assert np.array_equal(full, ref_full) and np.array_equal(swa, ref_swa)


def test_no_steps_and_one_step() -> None:
    cols = JumpColumns()
    full, swa = cols.tokens()
    assert len(full) == len(swa) == 0
    clock = DecodeClock(0.0, [(1, 1e-3, 1, 1, 1, 1)], 1e-6, 1e-6, 1e-6, 1e-6)
    cols.add(DecodeJump(clock, 1, 64, [0], [(0, 1)], [JumpSegment(0, 1, [], 640, 320, -64, 0)], 0))
    full, swa = cols.tokens()
    assert full.tolist() == [640 + 64 - 64] and swa.tolist() == [320 + 64 - 64]
