"""Attention work of a prefill batch in closed form: (query, key) pairs and KV tokens read,
for causal full layers and window-capped SWA layers (:meth:`CostModel._prefill_inputs`).
"""

from __future__ import annotations

import numpy as np


def capped_triangle(n: np.ndarray, w: int) -> np.ndarray:
    """Σ_{m=1}^{n} min(m, w), elementwise: keys seen by the first n queries of a window-w layer."""
    wf = float(w)
    return np.where(n <= wf, n * (n + 1.0) * 0.5, wf * (wf + 1.0) * 0.5 + (n - wf) * wf)


def capped_triangle_1(n: float, w: float) -> float:
    """Scalar :func:`capped_triangle`."""
    return n * (n + 1.0) * 0.5 if n <= w else w * (w + 1.0) * 0.5 + (n - w) * w


def prefill_sums_loop(
    extend: list[float], prefix: list[float], window: int | None
) -> tuple[float, float, float, float, float, float]:
    """The sums of :meth:`CostModel._prefill_inputs` for a small batch, one request at a time."""
    tokens = requests = full_pairs = swa_pairs = full_read = swa_read = 0.0
    wf = float(window) if window is not None else 0.0
    n = len(extend)
    if len(prefix) != n:
        raise ValueError(f"extend and prefix differ in length: {n} vs {len(prefix)}")
    # the compiled build keeps e and p as C doubles (prefill_sums.pxd): each sum below is then
    # the same correctly rounded IEEE result as Python's int/float mix, for lengths below 2**53
    for i in range(n):
        e = extend[i]
        p = prefix[i]
        if e < 0 or p < 0:
            raise ValueError("extend and prefix lengths must be >= 0")
        tokens += e
        if e > 0:
            requests += 1.0
        full_pairs += e * p + e * (e + 1.0) * 0.5
        full_read += p + e
        if window is not None:
            swa_pairs += capped_triangle_1(p + e, wf) - capped_triangle_1(p, wf)
            swa_read += min(p, wf) + e
    if window is None:
        swa_pairs, swa_read = full_pairs, full_read
    return tokens, requests, full_pairs, swa_pairs, full_read, swa_read
