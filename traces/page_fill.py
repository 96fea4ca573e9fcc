"""A trace's page keys written in one pass (issue 14): a typed loop in the compiled build.

Every page of block ``j`` gets a key: the block's first page ``base[j]``, then one more
``page_size`` per page (:func:`traces.pages._packed_page_keys`). numpy builds that from a repeat
and an arange, three passes over millions of pages and two arrays of temporaries; the compiled
build (page_fill.pxd) writes each key once. Both are exact integer arithmetic on the same
values, so the keys are the same. Pure Python keeps numpy: a Python loop per page would be slow.
"""

from __future__ import annotations

import numpy as np

#: Whether this module runs as its compiled extension (``simulator.compiled_modules``).
COMPILED = not __file__.endswith(".py")


def block_page_keys(base: np.ndarray, n: np.ndarray, page_size: int) -> np.ndarray:
    """int64 keys, block after block: ``base[j] + k * page_size`` for ``k < n[j]``."""
    base = np.ascontiguousarray(base, dtype=np.int64)
    n = np.ascontiguousarray(n, dtype=np.int64)
    if COMPILED:
        keys = np.empty(int(n.sum()), dtype=np.int64)
        fill_keys(keys, base, n, page_size)
        return keys
    start = np.zeros(len(n), dtype=np.int64)  # each block's first page among all pages
    np.cumsum(n[:-1], out=start[1:])
    keys = np.repeat(base - start * page_size, n)
    keys += np.arange(0, len(keys) * page_size, page_size, dtype=np.int64)
    return keys


def fill_keys(keys: np.ndarray, base: np.ndarray, n: np.ndarray, page_size: int) -> None:
    """:func:`block_page_keys`' keys written into ``keys`` (the compiled build's loop)."""
    p = 0
    for j in range(len(n)):
        v = base[j]
        m = n[j]
        while m > 0:
            keys[p] = v
            v += page_size
            p += 1
            m -= 1
