"""record_pack's typed loops give numpy's former answers bit for bit (issue 14): the row packer
is ``np.fromiter`` over the chained tuples, the grouping is a stable ``argsort``. Run under both
builds (tests/test_compiled_core.py, KVPLAN_PURE_PYTHON=1)."""

from __future__ import annotations

from itertools import chain

import numpy as np
import pytest

from simulator.engine import record_pack
from simulator.engine.record_pack import float_rows, group_by_key


def _fromiter(rows: list, width: int) -> np.ndarray:
    return np.fromiter(chain.from_iterable(rows), np.float64, width * len(rows)).reshape(-1, width)


def _same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape and got.flags.c_contiguous
    assert got.tobytes() == want.tobytes()


def test_float_rows_converts_every_kind_of_number_as_numpy() -> None:
    row = (
        1,
        -7,
        0,
        2.5,
        np.int64(3),
        True,
        False,
        np.bool_(True),
        2**40,
        2**53 + 1,  # rounds to even, as float(int) does
        2**63 - 1,  # the largest int64: rounds up to 2**63
        -(2**63),
        np.float32(0.1),
        float("nan"),
        float("-inf"),
        -0.0,
    )
    _same(float_rows([row, row[::-1]], len(row)), _fromiter([row, row[::-1]], len(row)))


@pytest.mark.parametrize("seed", range(5))
def test_float_rows_of_random_ints_and_floats(seed: int) -> None:
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(300):
        bits = int(rng.integers(1, 63))
        rows.append(
            (
                int(rng.integers(-(2**bits), 2**bits)),
                float(rng.normal() * 10.0 ** int(rng.integers(-300, 300))),
                bool(rng.random() < 0.5),
                int(rng.integers(0, 2**62)) * 2 + 1,  # odd, above 2**53: rounded
                int(rng.integers(-5, 5)),
            )
        )
    _same(float_rows(rows, 5), _fromiter(rows, 5))


def test_float_rows_beyond_int64_and_empty() -> None:
    rows = [(2**64, 1), (-(2**70) - 3, 2.0)]  # no C long long holds these: numpy's way
    _same(float_rows(rows, 2), _fromiter(rows, 2))
    _same(float_rows([], 5), _fromiter([], 5))
    with pytest.raises(OverflowError):
        float_rows([(10**400,)], 1)


def test_float_rows_refuses_a_short_row() -> None:
    if not record_pack.COMPILED:
        pytest.skip("numpy's fromiter reads the chained values; only the typed loop checks rows")
    with pytest.raises(ValueError):
        float_rows([(1, 2, 3), (1, 2)], 3)


@pytest.mark.parametrize("n", [0, 1, 2, 9, 1000, 70_000])
def test_group_by_key_is_the_stable_argsort(n: int) -> None:
    rng = np.random.default_rng(n)
    for lo, hi in ((-1, 7), (0, 1), (5, 6), (-3, 200_000)):
        keys = rng.integers(lo, hi, n).astype(np.int64)
        a, b = rng.random(n), rng.normal(size=n)
        order = np.argsort(keys, kind="stable")
        got = group_by_key(keys, a, b)
        for g, w in zip(got, (keys[order], a[order], b[order]), strict=True):
            _same(g, w)
