"""Where a converted trace may be written: never over its input, never through a link or onto a
device, FIFO or directory; files are created by a rename, with the mode the umask allows."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from traces.errors import TraceOutputError


def check_output_path(out: str | Path, inputs: Iterable[str | Path] = ()) -> None:
    """Refuse ``out`` unless it is a new file in an existing directory or a regular file that is
    none of ``inputs`` (compared by device and inode, so links to the input are caught too)."""
    out = Path(out)
    try:
        st = os.lstat(out)
    except (FileNotFoundError, NotADirectoryError):  # the latter: a parent is a regular file
        parent = out.parent if str(out.parent) else Path(".")
        if not parent.is_dir():
            what = "is not a directory" if parent.exists() else "does not exist"
            raise TraceOutputError(str(out), f"directory {parent} {what}") from None
        return
    if stat.S_ISLNK(st.st_mode):
        raise TraceOutputError(str(out), "is a symbolic link; kvplan does not write through links")
    if not stat.S_ISREG(st.st_mode):
        raise TraceOutputError(str(out), "is not a regular file (a directory, device or FIFO); not replaced")
    for source in inputs:
        try:
            same = os.path.samefile(source, out)
        except OSError:
            continue
        if same:
            raise TraceOutputError(str(out), f"is the input trace {source}; choose another output file")


def umask_mode() -> int:
    """The mode a new file gets from ``open()``: 0o666 less the process umask."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask
