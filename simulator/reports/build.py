"""``kvplan report``'s job: assemble, draw, render, and write the report directory atomically.

The directory gets ``report.md`` (images beside it under ``figures/``), ``index.html`` (one
self-contained file, images embedded), ``figures/*.png`` and ``figures.json`` (every number the
figures and tables show). It is written to a temporary sibling and renamed into place, so a
reader sees the old report or the new one, never half of one. Into a plan directory (which
holds ``plan.json`` and the store), only the report's own files are replaced.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from simulator.reports import plots
from simulator.reports.data import ReportOptions, assemble
from simulator.reports.render import blocks, figure_names, to_html, to_markdown
from simulator.reports.source import load_source


def draw(data: dict[str, Any]) -> dict[str, bytes]:
    """Every figure of the report as PNG bytes, by file name (:func:`figure_names`)."""
    fig = data["figures"]
    rec = data["recommended"]
    images = {
        "heatmap_hit_rate.png": plots.png(plots.plot_heatmap(fig["heatmap_hit_rate"])),
        "heatmap_ttft_p90.png": plots.png(plots.plot_heatmap(fig["heatmap_ttft_p90"], cmap="magma_r")),
        "capacity.png": plots.png(plots.plot_capacity(fig["capacity"])),
        "usage.png": plots.png(plots.plot_usage(fig["usage"])),
    }
    for p, name in zip(fig["pareto"], figure_names(data)[4:], strict=True):
        value = rec["metrics"].get(p["metric"])
        images[name] = plots.png(plots.plot_pareto(p, (rec["cost_per_hour"], value)))
    return images


REPORT_FILES = ("figures", "figures.json", "report.md", "index.html")
# A directory holding one of these is not the report's alone (a plan directory, a store).
FOREIGN = ("plan.json", "kvplan-store.json", "store")


def write_report(data: dict[str, Any], out_dir: str | Path) -> Path:
    """Draw and render ``data`` into ``out_dir``; returns the directory.

    A directory of its own is replaced as a whole. A directory that also holds other things (a
    plan directory: ``plan.json`` and its store) keeps them: only the report's files are
    replaced, each by a rename."""
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    shared = out.is_dir() and any((out / name).exists() for name in FOREIGN)
    images = draw(data)
    items = blocks(data)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out if shared else out.parent))
    try:
        (tmp / "figures").mkdir()
        for name, png in images.items():
            (tmp / "figures" / name).write_bytes(png)
        (tmp / "figures.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        (tmp / "report.md").write_text(to_markdown(items))
        (tmp / "index.html").write_text(to_html(items, images))
        os.chmod(tmp, 0o755)
        if shared:
            for name in REPORT_FILES:
                _swap_into_place(tmp / name, out / name)
        else:
            _swap_into_place(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _swap_into_place(tmp: Path, out: Path) -> None:
    """Rename ``tmp`` to ``out``; an existing directory ``out`` is moved aside first and removed
    after (a file is replaced by the rename itself)."""
    old = None
    if out.is_dir():
        old = out.with_name(f".{out.name}.old.{os.getpid()}")
        os.replace(out, old)
    os.replace(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def build_report(
    source: str | Path, out_dir: str | Path, opts: ReportOptions | None = None
) -> dict[str, Any]:
    """Read a sweep store or plan directory, and write its report to ``out_dir``; returns the
    assembled data (what ``figures.json`` holds)."""
    data = assemble(load_source(source), opts or ReportOptions())
    write_report(data, out_dir)
    return data
