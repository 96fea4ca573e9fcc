"""decode_clock's typed build (decode_clock.pxd, issue 14) gives what its source gives: the
segment sums by hand, and clock prices from numpy and Python numbers alike."""

from __future__ import annotations

import numpy as np

from simulator.engine.decode_clock import DecodeClock, segment_sums


def test_segment_sums_by_hand() -> None:
    # requests 0 and 2 run past step 0; at step 0 they attend over 11 and 31 tokens, window 25
    assert segment_sums([10, 20, 30], [5, -1, 7], 0, 25) == ([0, 2], 42, 36, 1)
    # at step 6 only request 2 is left: 37 tokens, the window caps its SWA context
    assert segment_sums([10, 20, 30], [5, -1, 7], 6, 25) == ([2], 37, 25, 0)
    assert segment_sums([], [], 0, 25) == ([], 0, 0, 0)


def test_a_clock_prices_numpy_numbers_as_python_numbers() -> None:
    args = (4, 1e-3, 3, 300, 30, 3)
    plain = DecodeClock(1.0, [args], 1e-9, 2e-9, 1e-9, 2e-9)
    numpy_args = (np.int64(4), np.float64(1e-3), np.int64(3), np.int64(300), np.int64(30), np.int64(3))
    other = DecodeClock(np.float64(1.0), [numpy_args], 1e-9, 2e-9, 1e-9, 2e-9)
    assert plain.pieces == other.pieces and plain.steps == other.steps == 4
    assert [plain.end(s) for s in range(4)] == plain.ends().tolist()
    assert plain.steps_ended_by(plain.end(2)) == 3 and plain.steps_ended_by(0.5) == 0
