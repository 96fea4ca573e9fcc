"""Seed 002 (SGLang PR 23391, "Support swa HiCache for unified radix cache"): kvplan's prediction
of its benchmark without and with HiCache, per round, on H200 and H100.

The PR's setup: gpt-oss-120b, TP 2, page 64; HiCache ratio 2, write_through, kernel io backend;
bench_multiturn with 140 clients x 12 rounds, request 2048, output 1024, max-parallel 32, rate 4,
random ready queue, round barrier. Each configuration is served by ``kvplan bench-multiturn``
(``--out`` tables kept under ``--work``); the per-round hit rate, mean TTFT and output
throughput (a round's output tokens over the time from its first send to its last finish) are
printed as a Markdown table and plotted.

    .venv/bin/python benchmarks/seed002_hicache.py --plot docs/img/seed002_hicache.png
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
BENCH = [
    "--model", "gpt-oss-120b", "--tp", "2", "--page-size", "64",
    "--request-length", "2048", "--output-length", "1024",
    "--num-clients", "140", "--num-rounds", "12", "--max-parallel", "32", "--request-rate", "4",
    "--ready-queue-policy", "random", "--disable-random-sample", "--enable-round-barrier",
]  # fmt: skip
HICACHE = [
    "--enable-hierarchical-cache", "--hicache-ratio", "2",
    "--hicache-write-policy", "write_through", "--hicache-io-backend", "kernel",
]  # fmt: skip
GPUS = ("H200", "H100")


def serve(gpu: str, hicache: bool, work: Path) -> pd.DataFrame:
    """The requests frame of one configuration (served once, then read from ``work``)."""
    out = work / f"{gpu}_{'on' if hicache else 'off'}"
    if not (out / "requests.parquet").exists():
        argv = [str(ROOT / ".venv" / "bin" / "kvplan"), "bench-multiturn", "--gpu", gpu, *BENCH]
        argv += [*(HICACHE if hicache else []), "--out", str(out), "--json", "--no-progress"]
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return pd.read_parquet(out / "requests.parquet")


def per_round(req: pd.DataFrame) -> pd.DataFrame:
    """Hit rate, mean TTFT and output throughput per round (served requests)."""
    req = req[~req["aborted"] & ~req["rejected"]]
    g = req.groupby("round")
    span = g["finish_s"].max() - g["arrival_s"].min()
    return pd.DataFrame(
        {
            "hit_rate": g["cached_tokens"].sum() / g["prompt_len"].sum(),
            "ttft_s": g["ttft_s"].mean(),
            "output_tok_s": g["output_len"].sum() / span,
        }
    )


def table(rounds: dict[tuple[str, bool], pd.DataFrame]) -> str:
    lines = [
        "| GPU | round | hit rate w/o | hit rate w/ | TTFT w/o (s) | TTFT w/ (s) | output tok/s w/o | w/ |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for gpu in GPUS:
        off, on = rounds[(gpu, False)], rounds[(gpu, True)]
        for r in off.index:
            a, b = off.loc[r], on.loc[r]
            lines.append(
                f"| {gpu} | {r} | {a.hit_rate:.3f} | {b.hit_rate:.3f} | {a.ttft_s:.2f} | {b.ttft_s:.2f} "
                f"| {a.output_tok_s:,.0f} | {b.output_tok_s:,.0f} |"
            )
    return "\n".join(lines)


def totals(frames: dict[tuple[str, bool], pd.DataFrame]) -> str:
    lines = ["| GPU | HiCache | hit rate | mean TTFT (s) | output tok/s | duration (s) |", "| --- " * 6 + "|"]
    for (gpu, hicache), req in frames.items():
        req = req[~req["aborted"] & ~req["rejected"]]
        dur = req["finish_s"].max() - req["arrival_s"].min()
        hit = req.cached_tokens.sum() / req.prompt_len.sum()
        lines.append(
            f"| {gpu} | {'ratio 2' if hicache else 'off'} | {hit:.3f} "
            f"| {req.ttft_s.mean():.2f} | {req.output_len.sum() / dur:,.0f} | {dur:.0f} |"
        )
    return "\n".join(lines)


def plot(rounds: dict[tuple[str, bool], pd.DataFrame], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    panels = [
        ("hit_rate", "cache hit rate"),
        ("ttft_s", "mean TTFT (s)"),
        ("output_tok_s", "output tokens/s"),
    ]
    colors = {"H200": "tab:blue", "H100": "tab:orange"}
    for ax, (col, label) in zip(axes, panels, strict=True):
        for (gpu, hicache), df in rounds.items():
            style = "-" if hicache else "--"
            name = f"{gpu} {'HiCache ratio 2' if hicache else 'no HiCache'}"
            ax.plot(df.index, df[col], style, color=colors[gpu], marker="o", ms=3, label=name)
        ax.set_xlabel("round")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("Seed 002 (PR 23391): gpt-oss-120b TP 2, bench_multiturn 140 clients x 12 rounds (kvplan)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/kvplan-seed002"))
    ap.add_argument("--plot", type=Path, default=None)
    args = ap.parse_args(argv)
    frames = {(gpu, hc): serve(gpu, hc, args.work) for gpu in GPUS for hc in (False, True)}
    rounds = {k: per_round(v) for k, v in frames.items()}
    print(totals(frames))
    print()
    print(table(rounds))
    if args.plot is not None:
        plot(rounds, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
