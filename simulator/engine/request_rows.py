"""The requests frame's columns, recorded as each request finishes.

The :class:`~simulator.engine.metrics.Recorder` used to keep every request object it saw and
read the columns from them at the end. On a 1,000,000-request trace that kept a million
objects alive to the end of the run and built ~190 MiB of columns on top of them at the very
end (the run's peak RSS, docs/benchmarks.md). Here a finished request's numbers go into packed
per-column arrays (indexed by the request's row: first-seen order, as before), so the recorder
holds no finished request and the columns exist, complete, when the run ends.

Only requests seen but not finished (a call in the middle of a run, a stuck run) are read from
their objects when the columns are built, exactly as every request was before.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from simulator.engine.record_pack import float_rows
from simulator.engine.request import SimRequest

#: The numeric columns recorded per request, in the order of a recorded row (after its row).
NUMERIC = (
    ("index", np.int64),
    ("round", np.int64),
    ("heartbeat", np.bool_),
    ("arrival_s", np.float64),
    ("first_token_s", np.float64),
    ("finish_s", np.float64),
    ("prompt_len", np.int64),
    ("cached_tokens", np.int64),
    ("output_len", np.int64),
    ("retractions", np.int64),
    ("aborted", np.bool_),
    ("rejected", np.bool_),
    ("truncated", np.bool_),
)
_PACK = 1 << 14  # finished rows kept as tuples before they are packed into the columns
_FIRST_CAPACITY = 1 << 12


def numeric_row(r: SimRequest) -> tuple:
    """A request's numeric columns, in :data:`NUMERIC` order (every value a count far below
    2**53, a bool or a time: exact as a float64). A SimRequest is read through ``req``, its C
    struct in the compiled build (request_rows.pxd); any other object by attribute name."""
    if type(r) is SimRequest:
        req = r
        return (
            req.index,
            req.round,
            req.heartbeat,
            req.arrival_s,
            req.first_token_s,
            req.finish_s,
            req.prompt_len,
            req.cached_tokens,
            req.output_len,
            req.retractions,
            req.aborted,
            req.rejected,
            req.truncated,
        )
    return (
        r.index,
        r.round,
        r.heartbeat,
        r.arrival_s,
        r.first_token_s,
        r.finish_s,
        r.prompt_len,
        r.cached_tokens,
        r.output_len,
        r.retractions,
        r.aborted,
        r.rejected,
        r.truncated,
    )


class RequestRows:
    """Every request seen, one row each in first-seen order; a finished one only as numbers.

    ``keep_objects``: also keep the request objects in row order (:attr:`objects`), for the
    HiCache report's per-request columns, which are keyed by the objects.
    """

    def __init__(self, keep_objects: bool = False) -> None:
        self._live: dict[SimRequest, int] = {}  # seen, not finished: request -> row
        self._live_max = 0  # the most live requests since the dict was last rebuilt
        self.rid: list[str] = []
        self.session: list[str | None] = []
        self._reasons: dict[int, str] = {}  # row -> abort reason, where there is one
        self._rows: list[tuple] = []  # finished, not packed yet: (row, *numeric_row)
        self._cols = {name: np.zeros(0, dtype) for name, dtype in NUMERIC}
        self.objects: list[SimRequest] | None = [] if keep_objects else None

    def __len__(self) -> int:
        return len(self.rid)

    def see(self, req: SimRequest) -> None:
        """Give ``req`` a row if it has none (a finished request is not seen again)."""
        live = self._live
        if req not in live:
            live[req] = self._new_row(req)
            if len(live) > self._live_max:
                self._live_max = len(live)

    def _new_row(self, req: SimRequest) -> int:
        row = len(self.rid)
        self.rid.append(req.rid)
        self.session.append(req.session)
        if self.objects is not None:
            self.objects.append(req)
        return row

    def finish(self, req: SimRequest) -> None:
        """Record ``req``'s final numbers and let go of it (its row is kept)."""
        row = self._live.pop(req, None)
        if row is None:
            row = self._new_row(req)
        self._rows.append((row,) + numeric_row(req))
        if req.abort_reason:
            self._reasons[row] = req.abort_reason
        if len(self._rows) >= _PACK:
            self._pack()
            if len(self._live) * 4 < self._live_max:  # a dict never shrinks as keys leave
                self._live = dict(self._live)
                self._live_max = len(self._live)

    def _pack(self) -> None:
        """Scatter the finished rows into the columns (grown to hold every row seen)."""
        rows = float_rows(self._rows, 1 + len(NUMERIC))
        self._rows = []
        self._grow(len(self.rid))
        at = rows[:, 0].astype(np.int64)
        for k, (name, _) in enumerate(NUMERIC, start=1):
            self._cols[name][at] = rows[:, k]

    def _grow(self, n: int) -> None:
        cap = len(self._cols["index"])
        if n <= cap:
            return
        new_cap = max(_FIRST_CAPACITY, cap)
        while new_cap < n:
            new_cap *= 2
        for name, dtype in NUMERIC:
            col = np.zeros(new_cap, dtype)
            col[:cap] = self._cols[name]
            self._cols[name] = col

    def columns(self) -> dict[str, Any]:
        """The requests frame's columns (and ``rejected``, ``truncated``), as arrays and lists.

        Finished rows come from the packed columns (views of them when every request seen has
        finished: those rows never change again); unfinished ones are read from their objects."""
        self._pack()
        n = len(self.rid)
        live = self._live
        cols = {
            name: self._cols[name][:n] if not live else self._cols[name][:n].copy() for name, _ in NUMERIC
        }
        if live:
            at = np.fromiter(live.values(), np.int64, len(live))
            values = np.array([numeric_row(r) for r in live], dtype=np.float64).reshape(-1, len(NUMERIC))
            for k, (name, _) in enumerate(NUMERIC):
                cols[name][at] = values[:, k]
        reasons = [""] * n
        for row, reason in self._reasons.items():
            reasons[row] = reason
        for r, row in live.items():
            reasons[row] = r.abort_reason
        first, arrival, finish = cols["first_token_s"], cols["arrival_s"], cols["finish_s"]
        return {
            "index": cols["index"],
            "rid": list(self.rid),
            "session": list(self.session),
            "round": cols["round"],
            "heartbeat": cols["heartbeat"],
            "arrival_s": arrival,
            "first_token_s": first,
            "finish_s": finish,
            "ttft_s": first - arrival,
            "latency_s": finish - arrival,
            "prompt_len": cols["prompt_len"],
            "cached_tokens": cols["cached_tokens"],
            "output_len": cols["output_len"],
            "retractions": cols["retractions"],
            "aborted": cols["aborted"],
            "abort_reason": reasons,
            # not in REQUEST_FRAME_COLUMNS (frames() keeps its schema); run_config adds it
            "rejected": cols["rejected"],
            "truncated": cols["truncated"],
        }
