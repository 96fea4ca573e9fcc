# cython: boundscheck=False, wraparound=False
"""Typed packing of the recorder's rows and grouping of its decode steps (issue 14).

The recorder keeps its records as tuples of Python numbers (prefill batches, decode-call
constants, finished requests) and packs them into float64 arrays now and then; the summary
groups the decode steps by round. Both were numpy calls with a per-element cost far above the
work (``np.fromiter`` over chained tuples, a stable ``argsort`` of a million-step column). The
compiled build (record_pack.pxd) does them as typed loops with the same results bit for bit
(without bounds checks: every index is checked or in range by construction):

* :func:`float_rows` converts each value as numpy's float64 setitem does (``float(value)``:
  ``PyFloat_AsDouble``, correctly rounded for ints, ``__float__`` for numpy scalars);
* :func:`group_by_key` is a counting sort, stable like ``argsort(kind="stable")``, so each
  key's values keep their step order and numpy's pairwise mean of a key's slice is unchanged.

Pure Python (no Cython, or ``KVPLAN_PURE_PYTHON=1``) runs the numpy calls.
"""

from __future__ import annotations

from itertools import chain

import numpy as np

try:  # the compiled build: Cython's compile-time module; pure Python: Cython's shadow, or none
    import cython

    COMPILED = bool(cython.compiled)
except ImportError:  # pragma: no cover - Cython is a build dependency of the dev install
    COMPILED = False

#: Keys spread over more values than this (and than the steps) are grouped by ``argsort``.
MAX_KEY_SPAN = 1 << 16


def float_rows(rows: list, width: int) -> np.ndarray:
    """``rows`` (tuples of ``width`` numbers) as a C-contiguous ``(len(rows), width)`` float64
    array: ``np.fromiter(chain.from_iterable(rows), np.float64, ...)``, reshaped."""
    n = len(rows)
    if not COMPILED:
        return np.fromiter(chain.from_iterable(rows), np.float64, width * n).reshape(-1, width)
    arr = np.empty((n, width), dtype=np.float64)
    try:
        _fill(arr, rows, width)
    except OverflowError:  # an int beyond int64: numpy converts it (or raises) as before
        return np.fromiter(chain.from_iterable(rows), np.float64, width * n).reshape(-1, width)
    return arr


def _fill(out, rows: list, width: int) -> None:
    """:func:`float_rows`'s loop. An exact int goes through a C ``long long`` (exact; the C
    conversion to double rounds to nearest as ``float(int)`` does) and a bool is 0.0 or 1.0:
    neither makes a float object, as ``float(v)`` would; anything else is ``float(v)``."""
    for i in range(len(rows)):
        row = rows[i]
        if len(row) != width:
            raise ValueError(f"a row of {len(row)} values where {width} were expected")
        for j in range(width):
            v = row[j]
            if type(v) is int:
                iv = v  # OverflowError beyond int64
                out[i, j] = iv
            elif v is True:
                out[i, j] = 1.0
            elif v is False:
                out[i, j] = 0.0
            else:
                out[i, j] = v


def group_by_key(keys: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(``keys``, ``a``, ``b``) reordered by ``keys`` (int64), stably: what ``order =
    np.argsort(keys, kind="stable")`` and ``keys[order], a[order], b[order]`` give."""
    n = len(keys)
    if not COMPILED or n == 0 or keys.dtype != np.int64:
        order = np.argsort(keys, kind="stable")
        return keys[order], a[order], b[order]
    lo = int(keys.min())
    span = int(keys.max()) - lo + 1
    if span > max(n, MAX_KEY_SPAN):
        order = np.argsort(keys, kind="stable")
        return keys[order], a[order], b[order]
    counts = np.bincount(keys - lo, minlength=span)
    starts = np.zeros(span, dtype=np.int64)
    np.cumsum(counts[: span - 1], out=starts[1:])
    a_out, b_out = _scatter(
        np.ascontiguousarray(keys),
        np.ascontiguousarray(a, dtype=np.float64),
        np.ascontiguousarray(b, dtype=np.float64),
        starts,
        lo,
    )
    sorted_keys = np.repeat(np.arange(lo, lo + span, dtype=np.int64), counts)
    return sorted_keys, a_out, b_out


def _scatter(keys, a, b, starts, lo: int) -> tuple[np.ndarray, np.ndarray]:
    """Counting sort's placement pass: value i goes to its key's next free slot (``starts`` is
    advanced in place), so equal keys keep their order."""
    n = len(keys)
    a_arr = np.empty(n, dtype=np.float64)
    b_arr = np.empty(n, dtype=np.float64)
    a_out, b_out = a_arr, b_arr
    for i in range(n):
        k = keys[i] - lo
        pos = starts[k]
        starts[k] = pos + 1
        a_out[pos] = a[i]
        b_out[pos] = b[i]
    return a_arr, b_arr
