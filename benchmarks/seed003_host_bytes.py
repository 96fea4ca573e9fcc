"""Seed 003's claim, computed: does SWA make ~5x more tokens cacheable per HiCache host byte?

The seed's setup: a 4096-token sliding window against 20,480-token sequences; only one window of
SWA is backed up per node, "so you transfer 4096 instead of 20480 = 5x". kvplan computes the host
bytes of one cached sequence for every SWA preset from its sizing code
(:func:`simulator.sizing.swa_host.host_bytes_per_sequence`), with and without the one-window
backup, and prints a Markdown table; ``--plot`` writes the figure for docs/validation.md.

    .venv/bin/python benchmarks/seed003_host_bytes.py --plot docs/img/seed003_host_bytes.png
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simulator.models import load_model, model_names  # noqa: E402
from simulator.sizing.swa_host import HostBytesPerSequence, host_bytes_per_sequence  # noqa: E402

SEED_WINDOW, SEED_SEQ = 4096, 20480
SEQ_LENS = (4096, 8192, 16384, 20480, 32768, 65536, 131072)


def rows(window: int | None, seq_len: int) -> list[HostBytesPerSequence]:
    """One row per MHA preset with SWA layers (DeepSeek-V4's compressed pools are sized apart)."""
    out = []
    for name in model_names():
        model = load_model(name)
        if model.is_dsv4 or not model.num_swa_layers:
            continue
        out.append(host_bytes_per_sequence(model, seq_len, window=window))
    return out


def table(window: int | None, seq_len: int) -> str:
    lines = [
        "| model | hybrid pools under HiCache | full / SWA host B per token | window | "
        "host MB per sequence, one-window SWA | whole sequence | tokens per host byte |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows(window, seq_len):
        lines.append(
            f"| {r.model} | {'yes' if r.hybrid_swa else 'no (SGLang override)'} | "
            f"{r.full_bytes_per_token:,} / {r.swa_bytes_per_token:,} | {r.window} | "
            f"{r.bytes_one_window / 1e6:,.0f} | {r.bytes_whole_sequence / 1e6:,.0f} | "
            f"{r.cacheable_multiplier:.2f}x |"
        )
    return "\n".join(lines)


def plot(path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.6))
    seed = rows(SEED_WINDOW, SEED_SEQ)
    names = [r.model for r in seed]
    ax1.bar(names, [r.cacheable_multiplier for r in seed], color="tab:blue", label="window 4096 (seed)")
    own = rows(None, SEED_SEQ)
    ax1.scatter(
        names, [r.cacheable_multiplier for r in own], color="tab:orange", zorder=3, label="model's own window"
    )
    ax1.axhline(SEED_SEQ / SEED_WINDOW, color="tab:red", ls="--", label="claim: 20480 / 4096 = 5x")
    ax1.set_ylabel("x tokens per host byte (vs. whole-sequence SWA)")
    ax1.set_title("20,480-token sequences")
    ax1.tick_params(axis="x", rotation=30)
    ax1.legend(fontsize=8)
    for name in names:
        series = [host_bytes_per_sequence(load_model(name), s, window=SEED_WINDOW) for s in SEQ_LENS]
        if series[0].hybrid_swa:
            ax2.plot(SEQ_LENS, [r.cacheable_multiplier for r in series], marker="o", label=name)
    ax2.plot(SEQ_LENS, [max(1.0, s / SEED_WINDOW) for s in SEQ_LENS], "k--", label="S / W (all layers SWA)")
    ax2.set_xscale("log", base=2)
    ax2.set_xlabel("sequence length S (tokens), window W = 4096")
    ax2.set_ylabel("multiplier")
    ax2.set_title("Multiplier vs. sequence length")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--plot", type=Path, default=None, help="write the figure (PNG) here")
    a = p.parse_args(argv)
    print(f"Window {SEED_WINDOW}, sequences of {SEED_SEQ} tokens (seed 003's setup), TP 1, page 1:\n")
    print(table(SEED_WINDOW, SEED_SEQ))
    print(f"\nEach model's own window, sequences of {SEED_SEQ} tokens:\n")
    print(table(None, SEED_SEQ))
    if a.plot is not None:
        plot(a.plot)
        print(f"\nplot: {a.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
