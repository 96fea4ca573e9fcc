"""Draw a report's figures from their data (:mod:`simulator.reports.figures`) with matplotlib's
Agg backend (no display, no network); each function returns a Figure, :func:`png` its bytes.

Notebooks call the same functions, so a figure looks the same in a notebook and in a report.
"""

from __future__ import annotations

import io
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

_TITLES = {
    "cache_hit_rate": "prefix-cache hit rate",
    "ttft.p90": "p90 TTFT (s)",
    "latency.p90": "p90 latency (s)",
}


def title_of(path: str) -> str:
    return _TITLES.get(path, path)


def png(fig: Figure) -> bytes:
    """The figure as PNG bytes (no timestamp or software tag, so equal figures give equal bytes
    on one matplotlib version); the figure is closed."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def _tick(v: Any) -> str:
    if v is None:
        return "unset"
    return f"{v:g}" if isinstance(v, float) else str(v)


def plot_heatmap(data: dict[str, Any], cmap: str = "viridis") -> Figure:
    """The metric over the two axes; grey cells: refused or no such point; a cross: the point
    failed requests."""
    z = np.array([[np.nan if v is None else v for v in row] for row in data["z"]], dtype=float)
    xs, ys = data["x"]["values"], data["y"]["values"]
    fig, ax = plt.subplots(figsize=(1.2 + 0.75 * len(xs), 1.4 + 0.5 * len(ys)))
    cm = plt.get_cmap(cmap).with_extremes(bad="#dddddd")
    im = ax.imshow(np.ma.masked_invalid(z), cmap=cm, aspect="auto", origin="lower")
    for i in range(len(ys)):
        for j in range(len(xs)):
            if not np.isnan(z[i, j]):
                mark = " ×" if data["failed"][i][j] else ""
                r, g, b, _ = cm(im.norm(z[i, j]))
                ink = "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.55 else "white"
                ax.text(j, i, f"{z[i, j]:.3g}{mark}", ha="center", va="center", fontsize=7, color=ink)
    ax.set_xticks(range(len(xs)), [_tick(v) for v in xs])
    ax.set_yticks(range(len(ys)), [_tick(v) for v in ys] if data["y"]["field"] else [""])
    ax.set_xlabel(data["x"]["flag"] or "(no axis)")
    ax.set_ylabel(data["y"]["flag"] or "(no second axis)")
    ax.set_title(title_of(data["metric"]))
    fig.colorbar(im, ax=ax)
    return fig


def plot_capacity(data: dict[str, Any]) -> Figure:
    """Hit rate against full-pool capacity: optimal bound, LRU's curve, the sweep's runs."""
    fig, ax = plt.subplots(figsize=(7, 4))
    caps = np.array(data["capacity_tokens"], dtype=float)
    ax.plot(caps, data["bound"], "o-", color="tab:green", label="optimal bound (batch 1)")
    ax.plot(caps, data["lru"], "s--", color="tab:blue", label="LRU hit-ratio curve (batch 1)")
    if data["sweep"]:
        sx = [s["full_tokens"] for s in data["sweep"]]
        sy = [s["hit_rate"] for s in data["sweep"]]
        ax.scatter(sx, sy, color="tab:orange", zorder=3, s=18, label="sweep points (served runs)")
    ax.axhline(data["infinite_capacity_hit_rate"], color="grey", ls=":", label="unbounded pools")
    ax.axvline(data["recommended_full_tokens"], color="tab:red", lw=1, label="recommended full pool")
    ax.set_xscale("log")
    ax.set_xlabel("full-pool capacity (tokens)")
    ax.set_ylabel("prefix-cache hit rate")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    return fig


def plot_usage(data: dict[str, Any]) -> Figure:
    """Tokens held in each pool over time for one run, with the pool capacities."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    colors = {"full_token": "tab:blue", "swa_token": "tab:orange"}
    names = {"full_token": "full pool", "swa_token": "SWA pool"}
    for col, values in data["series"].items():
        ax.plot(data["t"], values, lw=1, color=colors.get(col), label=names.get(col, col.replace("_", " ")))
    for key, col in (("full_tokens", "full_token"), ("swa_tokens", "swa_token")):
        if key in data["capacity"]:
            ax.axhline(
                data["capacity"][key], ls="--", lw=0.8, color=colors[col], label=f"{names[col]} capacity"
            )
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("tokens in use")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(alpha=0.3)
    return fig


def plot_pareto(data: dict[str, Any], recommended: tuple[float, float | None] | None = None) -> Figure:
    """Memory cost against one metric: every point served without failure, the frontier, and
    the recommended point."""
    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    ax.scatter(data["cost"], data["value"], s=14, color="tab:grey", label="configurations")
    ax.step(
        data["frontier_cost"],
        data["frontier_value"],
        "o-",
        where="post",
        color="tab:purple",
        label="Pareto frontier",
    )
    if recommended is not None and recommended[1] is not None:
        ax.scatter(
            [recommended[0]],
            [recommended[1]],
            marker="*",
            s=160,
            color="tab:red",
            zorder=4,
            label="recommended",
        )
    ax.set_xlabel("KV memory cost (USD / hour)")
    ax.set_ylabel(title_of(data["metric"]) + (" (lower is better)" if data["lower_is_better"] else ""))
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig


def _bars(ax: Any, labels: list[str], values: list[float | None], color: str, offset: float = 0.0) -> None:
    xs = np.arange(len(labels)) + offset
    ax.bar(xs, [v or 0.0 for v in values], width=0.38 if offset else 0.6, color=color)
    for x, v in zip(xs, values, strict=True):
        ax.text(
            x, (v or 0.0) + 0.005, "error" if v is None else f"{v:.3f}", ha="center", fontsize=7, rotation=90
        )


def plot_policies(replay_rows: list[dict], hicache_rows: list[dict], bound: dict[str, Any]) -> Figure:
    """Batch-1 hit rates: tombstoning × SWA eviction (left) and HiCache write policies (right,
    all hits and device hits), each against its optimal bound."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8), gridspec_kw={"width_ratios": [2.2, 1]})
    labels = [f"{r['tombstone']}\n{r['swa_eviction']}" for r in replay_rows]
    _bars(left, labels, [r["hit_rate"] for r in replay_rows], "tab:blue")
    left.set_xticks(range(len(labels)), labels, fontsize=8)
    left.axhline(bound["device"], color="tab:green", label="optimal bound (device)")
    left.set_ylabel("hit rate (batch 1)")
    left.set_title("tombstoning × SWA eviction")
    left.legend(fontsize=8, loc="lower right")
    wl = [r["write_policy"].replace("_", "\n") for r in hicache_rows]
    _bars(right, wl, [r["hit_rate"] for r in hicache_rows], "tab:purple", -0.2)
    _bars(right, wl, [r["device_hit_rate"] for r in hicache_rows], "tab:cyan", 0.2)
    right.set_xticks(range(len(wl)), wl, fontsize=8)
    right.axhline(bound["device_plus_host"], color="tab:green", ls="--", label="bound (device + host)")
    right.axhline(bound["device"], color="tab:green", label="bound (device)")
    right.set_title("HiCache write policy (all / device hits)")
    right.legend(fontsize=7, loc="lower right")
    for ax in (left, right):
        ax.set_ylim(0, max(bound["device_plus_host"], bound["device"]) * 1.25)
    return fig


def plot_served(rows: list[dict]) -> Figure:
    """Served runs per tombstoning × SWA eviction: hit rate (bars) and p90 TTFT (points)."""
    fig, ax = plt.subplots(figsize=(8, 3.6))
    labels = [f"{r['tombstone']}\n{r['swa_eviction']}" for r in rows]
    _bars(ax, labels, [r["cache_hit_rate"] for r in rows], "tab:blue")
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylabel("hit rate (served)")
    twin = ax.twinx()
    twin.plot(
        range(len(rows)),
        [np.nan if r["ttft_p90"] is None else r["ttft_p90"] for r in rows],
        "o",
        color="tab:red",
    )
    twin.set_ylabel("p90 TTFT (s)", color="tab:red")
    return fig
