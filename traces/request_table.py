"""A trace's request table as numpy columns, for the readers whose labels are integers.

``kvplan run`` needs only the table's columns as arrays; building the pandas DataFrame
(``Trace.requests``) means importing pandas and pyarrow, about a third of the whole process's
start-up (issue 14). The Mooncake and Azure readers therefore hand :class:`traces.schema.Trace`
this table, and ``Trace.requests`` builds the frame on first read, with the same
:func:`traces.schema.make_requests` call the readers made before, so the frame is the same.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from traces.row_hash import MISSING, combine_rows, hash_int_labels, hash_numbers

if TYPE_CHECKING:
    import pandas as pd

#: The numeric columns and their dtypes (as ``make_requests`` casts them).
NUMBER_COLUMNS = {
    "arrival_s": np.float64,
    "turn": np.int32,
    "parent": np.int64,
    "prompt_len": np.int64,
    "output_len": np.int64,
}
#: The label columns: integers whose decimal strings are the labels (None: all missing).
LABEL_COLUMNS = ("rid", "session_id")


class RequestTable:
    """The canonical request columns (``traces.schema.REQUEST_COLUMNS``); ``rid`` and
    ``session_id`` are integer arrays standing for their decimal labels."""

    __slots__ = ("_columns",)

    def __init__(
        self,
        rid: np.ndarray,
        arrival_s: np.ndarray,
        prompt_len: np.ndarray,
        output_len: np.ndarray,
        session_id: np.ndarray | None = None,
        turn: np.ndarray | None = None,
        parent: np.ndarray | None = None,
    ) -> None:
        n = len(prompt_len)
        given = {
            "arrival_s": arrival_s,
            "turn": np.zeros(n, np.int32) if turn is None else turn,
            "parent": np.full(n, -1, np.int64) if parent is None else parent,
            "prompt_len": prompt_len,
            "output_len": output_len,
        }
        columns: dict[str, np.ndarray | None] = {
            "rid": np.asarray(rid, dtype=np.int64),
            "session_id": None if session_id is None else np.asarray(session_id, dtype=np.int64),
        }
        columns.update({k: np.asarray(v, dtype=NUMBER_COLUMNS[k]) for k, v in given.items()})
        self._columns = columns

    def __len__(self) -> int:
        return len(self._columns["prompt_len"])

    def column(self, name: str) -> np.ndarray:
        """A numeric column (its canonical dtype); KeyError for a label column or an unknown name."""
        if name not in NUMBER_COLUMNS:
            raise KeyError(name)
        return self._columns[name]

    def labels(self, name: str) -> list[str | None]:
        """A label column as strings (None where missing)."""
        values = self._columns[name]
        if values is None:
            return [None] * len(self)
        return list(map(str, values.tolist()))

    def head(self, n: int) -> RequestTable:
        c = self._columns
        sess = c["session_id"]
        return RequestTable(
            c["rid"][:n],
            c["arrival_s"][:n],
            c["prompt_len"][:n],
            c["output_len"][:n],
            session_id=None if sess is None else sess[:n],
            turn=c["turn"][:n],
            parent=c["parent"][:n],
        )

    def to_frame(self) -> pd.DataFrame:
        """The DataFrame the readers built before (``make_requests`` of the same arrays)."""
        from traces.schema import make_requests

        c = self._columns
        return make_requests(
            c["rid"],
            c["arrival_s"],
            c["prompt_len"],
            c["output_len"],
            session_id=c["session_id"],
            turn=c["turn"],
            parent=c["parent"],
        )

    def row_hashes(self) -> np.ndarray:
        """``pandas.util.hash_pandas_object(self.to_frame(), index=False)``, without pandas."""
        from traces.schema import REQUEST_COLUMNS

        n = len(self)
        hashes = []
        for name in REQUEST_COLUMNS:
            values = self._columns[name]
            if name in NUMBER_COLUMNS:
                hashes.append(hash_numbers(values))
            elif values is None:
                hashes.append(np.full(n, MISSING))
            else:
                hashes.append(hash_int_labels(values))
        return combine_rows(hashes, n)
