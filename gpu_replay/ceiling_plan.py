"""What bounds a bulk transfer of random pages (issue 13, ninth session): the arithmetic behind
:mod:`gpu_replay.scatter_ceiling`, testable without CUDA.

A bulk transfer of ``n_copies`` page copies (``nbytes`` in all) can go by the copy engines, by
the SMs, or split between them. Three measured numbers bound it, each against the run's copy
peak ``peak`` (bytes/s):

- ``e_ce``: the engines' execution rate of such copies once queued (gated: issued behind a
  sleeping kernel), as a fraction of the peak;
- ``issue_s``: the driver's host time per copy (the engines cannot run ahead of it);
- ``e_sm``: the SM kernel's rate on the same pages, a fraction of the peak (SM-issued PCIe
  requests are smaller than the engines', so this stays under ``e_ce``).

With a fraction ``f`` of the pages on the engines, the transfer takes at least the longest of:
the driver's issue of the engines' copies (``f n issue_s``), the engines' own execution of them
(``f B / (e_ce P)``), and the link's time for both sides' bytes (``f B / P + (1 - f) B / (e_sm P)``:
engine bytes at the peak's own efficiency, since the engines' shortfall on small copies is time
between copies that SM traffic may fill, SM bytes at the SMs' efficiency). Each term is measured
alone, and each is taken as perfectly overlapped with the others: the result is an upper bound
on what a split can reach. :func:`split_bound` maximises it over ``f``.
"""

from __future__ import annotations

__all__ = ["split_bound", "split_time"]


def split_time(f: float, nbytes: float, n_copies: int, peak: float, e_ce: float, e_sm: float, issue_s: float):
    """Lower bound on the seconds of a split with a fraction ``f`` of the copies on the engines."""
    if not 0.0 <= f <= 1.0:
        raise ValueError(f"f must be in [0, 1], got {f}")
    if min(peak, e_ce, e_sm) <= 0 or issue_s < 0:
        raise ValueError("peak and efficiencies must be positive, issue time non-negative")
    link = f * nbytes / peak + (1.0 - f) * nbytes / (e_sm * peak)
    return max(f * n_copies * issue_s, f * nbytes / (e_ce * peak), link)


def split_bound(
    nbytes: float, n_copies: int, peak: float, e_ce: float, e_sm: float, issue_s: float, steps=1000
):
    """(best fraction of the peak any split can reach, the engines' page fraction there), and the
    two ends: engines alone and SMs alone, as a dict."""
    ideal = nbytes / peak
    best_f, best_t = 0.0, float("inf")
    for i in range(steps + 1):
        f = i / steps
        t = split_time(f, nbytes, n_copies, peak, e_ce, e_sm, issue_s)
        if t < best_t:
            best_f, best_t = f, t
    return {
        "bound": ideal / best_t,
        "engine_fraction": best_f,
        "engines_alone": ideal / split_time(1.0, nbytes, n_copies, peak, e_ce, e_sm, issue_s),
        "sms_alone": ideal / split_time(0.0, nbytes, n_copies, peak, e_ce, e_sm, issue_s),
    }
