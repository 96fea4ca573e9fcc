"""Output paths checked before a run starts, so a bad ``--out`` never loses a finished simulation.

``--out DIR`` receives the run's tables and ``summary.json`` (``RunResult.write_outputs``, which
writes each under a temporary name and renames it into place, so the mode comes from the umask).
Here, before any work: DIR must be a directory (or creatable as one) that we can write, and none
of the files the run will write may exist as anything but a regular file (a symlink, FIFO or
device there would be replaced). ``--record-ops FILE`` gets the same treatment for one file.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from simulator.errors import FlagError

# RunResult.frames (simulator/run.py) and summary.json: what --out DIR receives.
OUT_TABLES = ("requests", "decode_steps", "prefill_batches", "retractions")
OUT_FILES = tuple(f"{t}.{ext}" for t in OUT_TABLES for ext in ("parquet", "csv")) + ("summary.json",)


def check_out_dir(out: Path, flag: str = "--out") -> None:
    """Refuse ``out`` unless the run can write all of its files there."""
    if out.exists() or out.is_symlink():
        if not out.is_dir():
            raise FlagError(f"{flag} {out}: exists and is not a directory")
        if not os.access(out, os.W_OK | os.X_OK):
            raise FlagError(f"{flag} {out}: directory is not writable")
        for name in OUT_FILES:
            _refuse_non_regular(out / name, flag)
        return
    _check_creatable(out, flag)


def check_out_file(path: Path, flag: str) -> None:
    """Refuse ``path`` unless it can be written as a regular file (new, or replacing one)."""
    if path.exists() or path.is_symlink():
        if path.is_dir() and not path.is_symlink():
            raise FlagError(f"{flag} {path}: is a directory")
        _refuse_non_regular(path, flag)
    parent = path.parent if str(path.parent) else Path(".")
    if parent.exists():
        if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
            raise FlagError(f"{flag} {path}: directory {parent} is not writable")
        return
    _check_creatable(parent, flag)


def _refuse_non_regular(path: Path, flag: str) -> None:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        kind = "a symlink" if stat.S_ISLNK(mode) else "not a regular file"
        raise FlagError(f"{flag}: {path} is {kind}; kvplan replaces only regular files")


def _check_creatable(path: Path, flag: str) -> None:
    """``path`` does not exist: its nearest existing ancestor must be a writable directory."""
    ancestor = path.absolute().parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise FlagError(f"{flag} {path}: {ancestor} is not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise FlagError(f"{flag} {path}: cannot create it in {ancestor} (not writable)")
