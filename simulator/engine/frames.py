"""A run's result tables as plain column arrays, and the pandas frames built from them on demand.

The summary needs only the columns; the DataFrames (millions of decode-step rows on a long trace)
are built when a caller reads them or writes ``--out`` files, not on every run (issue 14). Each
frame is built exactly as :class:`~simulator.engine.metrics.Recorder` built it before: the same
constructor calls on the same arrays, so the frames are the same bit for bit.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd


#: The frames' names, in the order :func:`build_frames` returns them.
FRAME_NAMES = ("requests", "decode_steps", "prefill_batches", "retractions")


@dataclass(frozen=True, eq=False)
class RunColumns:
    """Everything the frames are built from, as plain data (picklable, no pandas)."""

    requests: dict[str, Any]  # Recorder._request_columns(), with ``rejected`` and ``truncated``
    decode_steps: dict[str, np.ndarray]  # Recorder._decode_columns()
    decode_empty: bool  # no decode step recorded: the frame gets typed empty columns
    # the prefill batches as the recorder packed them: (batches, fields) float64 chunks of
    # PREFILL_FRAME_COLUMNS less the usages, joined only when the frame is built (on a
    # 1,000,000-request trace the join is ~110 MiB, which a run that prints its summary skips)
    prefill_chunks: tuple[np.ndarray, ...]
    capacity: tuple[int, int]  # FULL / SWA token capacity the usages divide by (0: unknown)
    retractions: list[tuple]

    @cached_property
    def prefill_rows(self) -> np.ndarray:
        """(batches, fields) float64, PREFILL_FRAME_COLUMNS less the usages."""
        from simulator.engine.metrics import _PREFILL_FIELDS

        chunks = self.prefill_chunks
        return np.concatenate(chunks) if chunks else np.zeros((0, _PREFILL_FIELDS), dtype=np.float64)

    @cached_property
    def prefill_usage(self) -> tuple[np.ndarray, np.ndarray]:
        """Full / SWA token usage per batch (``#full token`` over the capacity, NaN without one)."""
        from simulator.engine.metrics import _PREFILL_NAMES

        rows = self.prefill_rows
        out = []
        for name, cap in zip(("full_token", "swa_token"), self.capacity, strict=True):
            used = rows[:, _PREFILL_NAMES.index(name)].astype(np.int64).astype(np.float64)
            out.append(used / float(cap) if cap else np.full(len(used), np.nan))
        return out[0], out[1]


def build_frames(cols: RunColumns, report: bool = False) -> dict[str, pd.DataFrame]:
    """``requests``, ``decode_steps``, ``prefill_batches`` and ``retractions`` as DataFrames;
    ``report`` adds the requests frame's ``rejected`` and ``truncated`` columns (after ``aborted``)."""
    import pandas as pd

    from simulator.engine.metrics import RETRACT_FRAME_COLUMNS

    frames = {
        "requests": _requests_frame(cols, report),
        "decode_steps": _decode_frame(cols),
        "prefill_batches": _prefill_frame(cols),
        "retractions": pd.DataFrame(cols.retractions, columns=list(RETRACT_FRAME_COLUMNS)),
    }
    return frames


def _requests_frame(cols: RunColumns, report: bool) -> pd.DataFrame:
    import pandas as pd

    from simulator.engine.metrics import REQUEST_FRAME_COLUMNS

    requests = pd.DataFrame(cols.requests, columns=list(REQUEST_FRAME_COLUMNS))
    if report:
        for after, name in (("aborted", "rejected"), ("rejected", "truncated")):
            requests.insert(requests.columns.get_loc(after) + 1, name, cols.requests[name])
    return requests


def _decode_frame(cols: RunColumns) -> pd.DataFrame:
    import pandas as pd

    from simulator.engine.metrics import _DECODE_DTYPES, DECODE_FRAME_COLUMNS

    if cols.decode_empty:
        return pd.DataFrame({c: pd.Series(dtype=_DECODE_DTYPES[c]) for c in DECODE_FRAME_COLUMNS})
    return pd.DataFrame(dict(cols.decode_steps), columns=list(DECODE_FRAME_COLUMNS))


def _prefill_frame(cols: RunColumns) -> pd.DataFrame:
    import pandas as pd

    from simulator.engine.metrics import PREFILL_FRAME_COLUMNS

    names = [c for c in PREFILL_FRAME_COLUMNS if not c.endswith("_usage")]
    rows = cols.prefill_rows
    raw = pd.DataFrame(
        {c: rows[:, j].astype(np.float64 if c.startswith("t_") else np.int64) for j, c in enumerate(names)}
    )
    raw["full_token_usage"], raw["swa_token_usage"] = cols.prefill_usage
    return raw[list(PREFILL_FRAME_COLUMNS)]


class LazyFrames(Mapping[str, "pd.DataFrame"]):
    """The report's frames (:func:`build_frames` with ``report=True``) as a mapping that builds
    them on first access: :class:`simulator.run.RunResult` holds one, so that a run that only
    prints its summary never builds a DataFrame. Pickles as its columns (plus the frames once built)."""

    def __init__(self, columns: RunColumns) -> None:
        self.columns = columns
        self._frames: dict[str, pd.DataFrame] | None = None

    def _built(self) -> dict[str, pd.DataFrame]:
        if self._frames is None:
            self._frames = build_frames(self.columns, report=True)
        return self._frames

    def __getitem__(self, name: str) -> pd.DataFrame:
        return self._built()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(FRAME_NAMES)

    def __len__(self) -> int:
        return len(FRAME_NAMES)
