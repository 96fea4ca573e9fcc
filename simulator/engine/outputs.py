"""A run's tables and summary on disk (``--out``): one writer for the Recorder and RunResult."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from traces.output import umask_mode


def write_tables(out_dir: str | Path, frames: Mapping[str, Any], summary: dict) -> list[Path]:
    """Write every frame as parquet and CSV, and ``summary`` as ``summary.json``, into
    ``out_dir``. Each file is written under a temporary name in ``out_dir`` and renamed into
    place, so a reader never sees a half-written file. Returns the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for name, frame in frames.items():
        written.append(_atomic(out / f"{name}.parquet", lambda p, f=frame: f.to_parquet(p, index=False)))
        written.append(_atomic(out / f"{name}.csv", lambda p, f=frame: f.to_csv(p, index=False)))
    text = json.dumps(summary, indent=2) + "\n"
    written.append(_atomic(out / "summary.json", lambda p: p.write_text(text)))
    return written


def _atomic(path: Path, write: Callable[[Path], Any]) -> Path:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write(tmp)
        os.chmod(tmp, umask_mode())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path
