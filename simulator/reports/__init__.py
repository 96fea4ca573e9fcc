"""Capacity reports from a sweep's result store or a plan directory (docs/reports.md).

Data assembly (:mod:`~simulator.reports.source`, :mod:`~simulator.reports.recommend`,
:mod:`~simulator.reports.figures`, :mod:`~simulator.reports.data`) is kept apart from drawing
(:mod:`~simulator.reports.plots`, matplotlib Agg) and from rendering
(:mod:`~simulator.reports.render`, Markdown and self-contained HTML); :func:`build_report`
wires them and writes the directory atomically. Notebooks call the same functions.

Importing this package does not import matplotlib; :mod:`~simulator.reports.plots` does.
"""

from pathlib import Path
from typing import Any

from simulator.reports.data import ReportOptions, assemble
from simulator.reports.recommend import Prices, parse_slo
from simulator.reports.source import ReportSource, load_source


def build_report(
    source: str | Path, out_dir: str | Path, opts: ReportOptions | None = None
) -> dict[str, Any]:
    """:func:`simulator.reports.build.build_report` (imported on call: it imports matplotlib)."""
    from simulator.reports.build import build_report as _build

    return _build(source, out_dir, opts)


__all__ = ["Prices", "ReportOptions", "ReportSource", "assemble", "build_report", "load_source", "parse_slo"]
