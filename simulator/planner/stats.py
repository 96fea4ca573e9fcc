"""Mean and 95% confidence interval of a metric over a point's seeds (``--seeds N``).

The interval is Student's t interval of the mean: ``mean ± t(0.975, n-1) · s / √n`` with ``s``
the sample standard deviation (n - 1 in the denominator). With one seed it is the point itself.
The t quantiles for up to 30 degrees of freedom are the standard table values; beyond, the
Cornish-Fisher expansion around the normal quantile (error below 1e-5 there).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

# t(0.975, df) for df = 1..30 (two-sided 95%).
_T975 = (
    12.7062047,
    4.3026527,
    3.1824463,
    2.7764451,
    2.5705818,
    2.4469119,
    2.3646243,
    2.3060041,
    2.2621572,
    2.2281389,
    2.2009852,
    2.1788128,
    2.1603687,
    2.1447867,
    2.1314495,
    2.1199053,
    2.1098155,
    2.1009220,
    2.0930241,
    2.0859634,
    2.0796138,
    2.0738731,
    2.0686576,
    2.0638986,
    2.0595386,
    2.0555294,
    2.0518305,
    2.0484071,
    2.0452296,
    2.0422725,
)
_Z975 = 1.959963984540054


def t_quantile_975(df: int) -> float:
    """Two-sided 95% quantile of Student's t with ``df`` degrees of freedom."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    return (
        z
        + (z**3 + z) / (4 * df)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
    )


def mean_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, low, high) of the 95% t interval; NaN values make all three NaN."""
    n = len(values)
    if n == 0:
        raise ValueError("no values")
    mean = math.fsum(values) / n
    if n == 1 or any(math.isnan(v) for v in values):
        return mean, mean, mean
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    half = t_quantile_975(n - 1) * math.sqrt(var / n)
    return mean, mean - half, mean + half


def numeric_leaves(obj: Any, prefix: str = "") -> dict[str, float]:
    """The numeric scalars of a nested summary, by dotted path (``ttft.p90``); booleans are not
    numbers here."""
    out: dict[str, float] = {}
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            out.update(numeric_leaves(v, f"{prefix}{k}."))
    elif isinstance(obj, int | float) and not isinstance(obj, bool):
        out[prefix[:-1]] = float(obj)
    return out


def aggregate(summaries: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any], dict[str, list[float]]]:
    """The seeds' summaries as one: (the first summary with each numeric leaf replaced by the mean
    over seeds, {dotted path: [low, high]} of every numeric leaf present in all of them)."""
    leaves = [numeric_leaves(s) for s in summaries]
    common = [k for k in leaves[0] if all(k in leaf for leaf in leaves[1:])]
    stats = {k: mean_interval([leaf[k] for leaf in leaves]) for k in common}
    means = _replace_leaves(summaries[0], {k: m for k, (m, _, _) in stats.items()})
    return means, {k: [lo, hi] for k, (_, lo, hi) in stats.items()}


def _replace_leaves(obj: Any, values: Mapping[str, float], prefix: str = "") -> Any:
    if isinstance(obj, Mapping):
        return {k: _replace_leaves(v, values, f"{prefix}{k}.") for k, v in obj.items()}
    return values.get(prefix[:-1], obj)
