"""The sweep's result store: a directory of parquet files, one row per (grid point, seed).

Layout (docs/planner.md)::

    STORE/kvplan-store.json         format marker {"format": "kvplan-sweep-store", "version": 1}
    STORE/runs/<key>.parquet        one finished run each, written as it finishes
    STORE/compacted/<id>.parquet    many runs, written by :meth:`ResultStore.compact`

Every file is written under a temporary name in its final directory and renamed into place
(``os.replace``, atomic on POSIX), so a reader never sees half a file and a killed sweep leaves
only whole runs behind. A run is identified by its key (:mod:`simulator.planner.keys`); the
reader keeps one row per key, so a compaction interrupted between writing its file and removing
the files it covers loses and duplicates nothing.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from simulator.errors import ConfigError
from simulator.planner.stats import numeric_leaves
from simulator.provenance import canonical_json, sha256_text

STORE_FORMAT = {"format": "kvplan-sweep-store", "version": 1}
_MARKER = "kvplan-store.json"
# The columns every row has; then config.<field> and metrics.<dotted path>.
BASE_COLUMNS = (
    "key",
    "point_key",
    "seed",
    "config",
    "summary",
    "error",
    "kvplan_version",
    "kvplan_source_hash",
    "sglang_version",
    "trace_hash",
    "trace_source",
    "profile_name",
    "profile_hash",
    "run_s",
)


def make_row(
    *,
    key: str,
    point_key: str,
    config: Mapping[str, Any],
    summary: Mapping[str, Any] | None,
    error: str | None,
    provenance: Mapping[str, Any],
    run_s: float,
) -> dict[str, Any]:
    """One store row. ``summary`` and ``config`` are kept whole as JSON (exact: floats round-trip)
    and also spread into ``config.<field>`` and numeric ``metrics.<path>`` columns for queries.
    ``run_s`` (wall seconds) is the one column that differs between two runs of the same key."""
    row: dict[str, Any] = {
        "key": key,
        "point_key": point_key,
        "seed": int(config["seed"]),
        "config": json.dumps(dict(config), sort_keys=True),
        "summary": None if summary is None else json.dumps(summary),
        "error": error,
        "kvplan_version": provenance["kvplan_version"],
        "kvplan_source_hash": provenance["kvplan_source_hash"],
        "sglang_version": provenance["sglang_version"],
        "trace_hash": provenance["trace_hash"],
        "trace_source": provenance.get("trace_source", ""),
        "profile_name": provenance["profile"]["name"],
        "profile_hash": provenance["profile"]["hash"],
        "run_s": float(run_s),
    }
    row.update({f"config.{k}": v for k, v in config.items()})
    if summary is not None:
        row.update({f"metrics.{k}": v for k, v in numeric_leaves(summary).items()})
    return row


class ResultStore:
    """A result store directory (created on first use)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.runs = self.path / "runs"
        self.compacted = self.path / "compacted"
        self._check_or_create()

    def _check_or_create(self) -> None:
        if self.path.exists() and not self.path.is_dir():
            raise ConfigError(f"--store {self.path}: exists and is not a directory")
        marker = self.path / _MARKER
        if self.path.is_dir() and any(self.path.iterdir()) and not marker.exists():
            raise ConfigError(f"--store {self.path}: a non-empty directory that is not a kvplan result store")
        if marker.exists():
            found = json.loads(marker.read_text())
            if (
                found.get("format") != STORE_FORMAT["format"]
                or found.get("version") != STORE_FORMAT["version"]
            ):
                raise ConfigError(
                    f"--store {self.path}: store format {found!r}, this kvplan reads {STORE_FORMAT}"
                )
            return
        self.runs.mkdir(parents=True, exist_ok=True)
        self.compacted.mkdir(exist_ok=True)
        _atomic_write_bytes(marker, (json.dumps(STORE_FORMAT) + "\n").encode())

    # ---- writing ---------------------------------------------------------------------------

    def write_run(self, row: Mapping[str, Any]) -> Path:
        """Store one finished run, atomically, under its key."""
        path = self.runs / f"{row['key']}.parquet"
        _atomic_write_frame(path, pd.DataFrame([dict(row)]))
        return path

    def compact(self) -> Path | None:
        """Union every run into one compacted file and remove the files it covers; returns the
        new file (None when there was nothing to compact). Safe to interrupt at any point."""
        run_files = sorted(self.runs.glob("*.parquet"))
        old_parts = sorted(self.compacted.glob("*.parquet"))
        if not run_files and len(old_parts) <= 1:
            return None
        frame = self.read()
        name = sha256_text(canonical_json(sorted(frame["key"])))[:16]
        out = self.compacted / f"{name}.parquet"
        _atomic_write_frame(out, frame)
        for path in [*run_files, *old_parts]:
            if path != out:
                path.unlink(missing_ok=True)
        return out

    # ---- reading ---------------------------------------------------------------------------

    def files(self) -> list[Path]:
        """Compacted parts first, then single runs (the first row of a key wins)."""
        return sorted(self.compacted.glob("*.parquet")) + sorted(self.runs.glob("*.parquet"))

    def keys(self) -> set[str]:
        """The keys of every stored run (cheap: run files by name, compacted parts by column)."""
        out = {p.stem for p in self.runs.glob("*.parquet")}
        for part in self.compacted.glob("*.parquet"):
            out.update(pd.read_parquet(part, columns=["key"])["key"])
        return out

    def read(self, keys: Iterable[str] | None = None) -> pd.DataFrame:
        """Every stored run (or those of ``keys``), one row per key, sorted by key."""
        wanted = None if keys is None else set(keys)
        frames = []
        for path in self.files():
            if wanted is not None and path.parent == self.runs and path.stem not in wanted:
                continue
            frame = pd.read_parquet(path)
            frames.append(frame if wanted is None else frame[frame["key"].isin(wanted)])
        frames = [f for f in frames if len(f)]
        if not frames:
            return pd.DataFrame(columns=list(BASE_COLUMNS))
        out = pd.concat(frames, ignore_index=True).drop_duplicates("key", keep="first")
        return out.sort_values("key", kind="stable").reset_index(drop=True)


def _atomic_write_frame(path: Path, frame: pd.DataFrame) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        frame.to_parquet(tmp, index=False)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
