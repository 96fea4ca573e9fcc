"""Results of a run: a :class:`Recorder` observes the server and computes bench_multiturn's metrics.

What is recorded (data flows one way, server -> recorder):

* a per-request frame (every :class:`SimRequest` the server saw, in first-seen order; its
  numbers are recorded when it finishes, :mod:`simulator.engine.request_rows`, so that the
  recorder holds no finished request);
* decode steps: step end time, ``#running-req``, ``#queue-req``, ``#full token`` / ``full token
  usage`` and ``#swa token`` / ``swa token usage`` exactly as SGLang's decode log defines them
  (``pool_stats_observer._get_swa_token_info``: used = capacity - (available + evictable), usage =
  used / capacity, the capacities those of :meth:`on_start`), and the round the step belongs to;
* prefill batches, retractions and the server's end-of-run counters.

The summary is bench_multiturn's (:mod:`simulator.engine.bench_summary`); see docs/simulation.md.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np

from simulator.engine.bench_summary import bench_percentile, bench_summary, latency_stats
from simulator.engine.config import SimConfig
from simulator.engine.decode_columns import DecodeColumns
from simulator.engine.decode_jump import DecodeJump, JumpColumns
from simulator.engine.observer import PoolCapacity, ServerObserver
from simulator.engine.outputs import write_tables
from simulator.engine.record_pack import float_rows
from simulator.engine.request import SimRequest
from simulator.engine.request_rows import RequestRows
from simulator.engine.rounds import jump_constants, majority_round

if TYPE_CHECKING:
    import pandas as pd

    from simulator.engine.frames import RunColumns

__all__ = [
    "DECODE_FRAME_COLUMNS",
    "LOG_EPOCH",
    "PREFILL_FRAME_COLUMNS",
    "REQUEST_FRAME_COLUMNS",
    "RETRACT_FRAME_COLUMNS",
    "Recorder",
    "bench_percentile",
    "latency_stats",
    "majority_round",
]

#: Wall-clock time that simulated time 0 is printed as in ``--log-decode`` lines.
LOG_EPOCH = datetime(2026, 1, 1, 0, 0, 0)

#: Columns of the frames, in order (also the CSV headers).
REQUEST_FRAME_COLUMNS = (
    "index",
    "rid",
    "session",
    "round",
    "heartbeat",
    "arrival_s",
    "first_token_s",
    "finish_s",
    "ttft_s",
    "latency_s",
    "prompt_len",
    "cached_tokens",
    "output_len",
    "retractions",
    "aborted",
    "abort_reason",
)
DECODE_FRAME_COLUMNS = (
    "step",
    "time_s",
    "running",
    "queue",
    "full_token",
    "full_token_usage",
    "swa_token",
    "swa_token_usage",
    "round",
    "round_share",
)
PREFILL_FRAME_COLUMNS = (
    "t_start_s",
    "t_end_s",
    "new_seq",
    "extend_tokens",
    "cached_tokens",
    "full_token",
    "full_token_usage",
    "swa_token",
    "swa_token_usage",
    "running",
    "queue",
    "round",
)
RETRACT_FRAME_COLUMNS = ("time_s", "requests", "new_token_ratio_before", "new_token_ratio_after")


def _steps_array(values: np.ndarray | int, k: int) -> np.ndarray:
    """``values`` as an int64 array of length ``k`` (a scalar is repeated). An int64 array is
    kept as it is: the server hands its arrays over (:meth:`ServerObserver.on_decode_steps`)."""
    if isinstance(values, np.ndarray) and values.shape == (k,):
        return values if values.dtype == np.int64 else values.astype(np.int64)
    return np.broadcast_to(np.asarray(values, dtype=np.int64), (k,)).copy()


class Recorder(ServerObserver):
    """Collects what the server reports and turns it into frames, a summary and output files.

    ``log_decode`` prints SGLang's ``Decode batch, ...`` line every ``decode_log_interval`` decode
    steps (counted over the whole run, as ``forward_ct_decode`` is, also when the server reports
    many steps in one call), prefixed ``[YYYY-MM-DD HH:MM:SS TP0]`` with :data:`LOG_EPOCH` + the
    step's simulated end time. ``log_stream`` defaults to ``sys.stdout`` at write time.
    ``request_rate`` is only carried into the summary for the report's header line.
    ``progress`` is called with the number of finished requests after each finish.
    ``keep_requests``: also keep every request object (the HiCache report's request columns are
    keyed by them); :meth:`from_config` keeps them only for HiCache runs.
    """

    def __init__(
        self,
        *,
        log_decode: bool = False,
        decode_log_interval: int = 40,
        log_stream: TextIO | None = None,
        request_rate: float | None = None,
        progress: Callable[[int], None] | None = None,
        epoch: datetime = LOG_EPOCH,
        keep_requests: bool = True,
    ) -> None:
        if decode_log_interval < 1:
            raise ValueError(f"decode_log_interval must be >= 1, got {decode_log_interval}")
        self.log_decode = log_decode
        self.decode_log_interval = int(decode_log_interval)
        self.log_stream = log_stream
        self.request_rate = request_rate
        self.progress = progress
        self.epoch = epoch
        self.capacity: PoolCapacity | None = None
        self.server_config: dict = {}
        self.counters: dict = {}
        self.hicache = None  # HiCache runs: simulator.engine.hicache_report.HiCacheReport
        self.end_s: float = math.nan
        # the requests seen, a row each in first-seen order; a finished one only as numbers
        self._reqs = RequestRows(keep_objects=keep_requests)
        self._finished = 0
        # decode steps, in order: (times, #full, #swa) arrays, or the step count of a jump kept
        # in closed form in _jumps; plus per-call constants (expanded with np.repeat)
        self._d_chunks: list[tuple[np.ndarray, np.ndarray, np.ndarray] | int] = []
        self._jumps = JumpColumns()
        self._d_const: list[tuple[int, int, int, int, float]] = []  # (steps, running, queue, round, share)
        # older per-call constants, packed (_pack_decode); the stepwise records at the end of
        # _d_chunks not packed yet; records so far (the key of the cached _d_arrays); decode
        # columns handed out with frame columns still to build (settled at the next record)
        self._d_const_packed: list[np.ndarray] = []
        self._d_tail = 0
        self._d_records = 0
        self._d_arrays: tuple[int, tuple[np.ndarray, np.ndarray]] | None = None
        self._d_lazy: list[DecodeColumns] = []
        self._n_steps = 0
        self._tokens_since_log = 0
        self._last_log_t = 0.0
        self._prefill: list[tuple] = []  # the latest prefill batches; older ones packed:
        self._prefill_packed: list[np.ndarray] = []
        self._n_prefill_packed = 0
        self._retract: list[tuple] = []

    @classmethod
    def from_config(cls, cfg: SimConfig, **kwargs: Any) -> Recorder:
        """A recorder with the config's ``log_decode`` / ``decode_log_interval``; it keeps the
        request objects only where the HiCache report needs them."""
        kwargs.setdefault("log_decode", cfg.log_decode)
        kwargs.setdefault("keep_requests", cfg.hicache.enabled)
        kwargs.setdefault("decode_log_interval", cfg.decode_log_interval)
        return cls(**kwargs)

    # --- ServerObserver hooks -------------------------------------------------------------------

    def on_start(self, capacity: PoolCapacity, config: dict) -> None:
        self.capacity = capacity
        self.server_config = dict(config)

    def on_arrival(self, req: SimRequest) -> None:
        self._reqs.see(req)

    def on_prefill_batch(
        self,
        t_start: float,
        t_end: float,
        reqs: list[SimRequest],
        extend_tokens: int,
        cached_tokens: int,
        full_used: int,
        swa_used: int,
        running: int,
        queue: int,
    ) -> None:
        rnd, _ = majority_round(reqs)
        self._prefill.append(
            (
                t_start,
                t_end,
                len(reqs),
                extend_tokens,
                cached_tokens,
                full_used,
                swa_used,
                running,
                queue,
                rnd,
            )
        )
        if len(self._prefill) >= _PREFILL_PACK:
            self._pack_prefill()

    def _pack_prefill(self) -> None:
        """Move the recorded batches into one float64 array (80 bytes a batch instead of ~300
        as a tuple of Python numbers; every value is a time or a count far below 2**53)."""
        rows = self._prefill  # a typed loop in the compiled build (record_pack.float_rows)
        self._prefill_packed.append(float_rows(rows, _PREFILL_FIELDS))
        self._n_prefill_packed += len(self._prefill)
        self._prefill = []

    def on_decode_steps(
        self,
        step_end_s: np.ndarray,
        batch: list[SimRequest],
        full_used: np.ndarray,
        swa_used: np.ndarray,
        queue: int,
    ) -> None:
        if self._d_lazy:
            self._settle_decode_columns()
        t = np.asarray(step_end_s, dtype=np.float64).reshape(-1)  # handed over: kept as is
        k = len(t)
        if k == 0:
            return
        full = _steps_array(full_used, k)
        swa = _steps_array(swa_used, k)
        running = len(batch)
        rnd, share = majority_round(batch)
        self._d_chunks.append((t, full, swa))
        self._d_const.append((k, running, int(queue), rnd, share))
        self._d_records += 1
        self._d_tail += 1
        if self._d_tail >= _DECODE_PACK or len(self._d_const) >= _DECODE_PACK:
            self._pack_decode()
        if self.log_decode:
            self._log_steps(t, full, swa, running, int(queue))
        else:
            self._tokens_since_log += running * k
        self._n_steps += k

    def on_decode_jump(self, jump: DecodeJump) -> None:
        """Keep the jump in closed form; :meth:`_decode_tokens` builds all jumps' arrays at once.
        With ``log_decode`` the steps are needed now, so they go through :meth:`on_decode_steps`."""
        if self.log_decode:
            super().on_decode_jump(jump)
            return
        if self._d_lazy:
            self._settle_decode_columns()
        self._jumps.add(jump)
        self._d_chunks.append(jump.steps)
        self._d_records += 1
        self._d_tail = 0
        jump_constants(self._d_const, jump)
        self._n_steps += jump.steps

    def _pack_decode(self) -> None:
        """Merge the stepwise records at the end of the decode series into one (time, #full,
        #swa) chunk and the per-call constants into one float64 array: an unjumped step (every
        step while requests wait) then takes 64 bytes instead of about 560 as three one-element
        arrays and a tuple of Python numbers. The columns built from them are the same."""
        n = self._d_tail
        if n > 1:
            tail = self._d_chunks[-n:]
            del self._d_chunks[-n:]
            self._d_chunks.append(tuple(np.concatenate([c[i] for c in tail]) for i in range(3)))
        self._d_tail = 0
        const = self._d_const
        if const:
            self._d_const_packed.append(_const_array(const))
            self._d_const = []

    def on_first_token(self, req: SimRequest) -> None:
        self._reqs.see(req)

    def on_finish(self, req: SimRequest) -> None:
        self._reqs.finish(req)
        self._finished += 1
        if self.progress is not None:
            self.progress(self._finished)

    def on_retract(self, t: float, reqs: list[SimRequest], ratio_before: float, ratio_after: float) -> None:
        self._retract.append((t, len(reqs), ratio_before, ratio_after))

    def on_hicache(self, report) -> None:
        self.hicache = report

    def on_end(self, t: float, counters: dict) -> None:
        self.end_s = float(t)
        self.counters = dict(counters)

    # --- decode log -----------------------------------------------------------------------------

    def _log_steps(self, t: np.ndarray, full: np.ndarray, swa: np.ndarray, running: int, queue: int) -> None:
        """Print the SGLang decode-log line for every step of this call whose global number
        (1-based, ``forward_ct_decode``) is a multiple of the interval."""
        iv = self.decode_log_interval
        k = len(t)
        first = iv - 1 - (self._n_steps % iv)  # index in this call of the first logged step
        pos = 0
        stream = self.log_stream or sys.stdout
        for i in range(first, k, iv):
            self._tokens_since_log += running * (i + 1 - pos)
            pos = i + 1
            ti = float(t[i])
            gap = ti - self._last_log_t
            throughput = self._tokens_since_log / gap if gap > 0 else 0.0
            stream.write(
                self.decode_log_line(ti, running, int(full[i]), int(swa[i]), throughput, queue) + "\n"
            )
            self._tokens_since_log = 0
            self._last_log_t = ti
        self._tokens_since_log += running * (k - pos)

    def decode_log_line(
        self, t: float, running: int, full_used: int, swa_used: int, gen_throughput: float, queue: int
    ) -> str:
        """One line exactly as SGLang's ``metrics_reporter`` prints it (hybrid SWA variant)."""
        stamp = (self.epoch + timedelta(seconds=t)).strftime("%Y-%m-%d %H:%M:%S")
        full_cap = self.capacity.full_tokens if self.capacity else 0
        swa_cap = self.capacity.swa_tokens if self.capacity else 0
        fu = full_used / full_cap if full_cap else 0.0
        su = swa_used / swa_cap if swa_cap else 0.0
        return (
            f"[{stamp} TP0] Decode batch, #running-req: {running}, #full token: {full_used}, "
            f"full token usage: {fu:.2f}, #swa token: {swa_used}, swa token usage: {su:.2f}, "
            f"cuda graph: True, gen throughput (token/s): {gen_throughput:.2f}, #queue-req: {queue}, "
        )

    # --- results --------------------------------------------------------------------------------

    def _usage(self, used: np.ndarray, which: str) -> np.ndarray:
        cap = getattr(self.capacity, which, 0) if self.capacity else 0
        if not cap:
            return np.full(len(used), np.nan)
        return used / float(cap)

    def frames(self) -> dict[str, pd.DataFrame]:
        """``requests``, ``decode_steps``, ``prefill_batches`` and ``retractions`` as DataFrames."""
        from simulator.engine.frames import build_frames

        return build_frames(self.columns())

    def columns(self) -> RunColumns:
        """The frames' columns as plain arrays (:mod:`simulator.engine.frames`): what the summary
        reads, and what the frames are built from when someone asks for them."""
        from simulator.engine.frames import RunColumns

        if self._prefill:
            self._pack_prefill()
        cap = self.capacity
        return RunColumns(
            requests=self._request_columns(),
            decode_steps=self._decode_columns(),
            decode_empty=not self._d_chunks,
            prefill_chunks=tuple(self._prefill_packed),
            capacity=(cap.full_tokens, cap.swa_tokens) if cap else (0, 0),
            retractions=list(self._retract),
        )

    def _request_columns(self) -> dict[str, Any]:
        """The requests frame's columns as arrays (the summary reads these, no DataFrame),
        recorded as the requests finished (:class:`RequestRows`)."""
        return self._reqs.columns()

    def _decode_tokens(self) -> tuple[np.ndarray, np.ndarray]:
        """(#full token, #swa token) of every decode step so far, jumps materialised in one
        pass (:class:`JumpColumns`) and cached until the next record."""
        if self._d_arrays is not None and self._d_arrays[0] == self._d_records:
            return self._d_arrays[1]
        full, swa = _interleave(self._d_chunks, self._jumps.tokens(), 1)
        self._d_arrays = (self._d_records, (full, swa))
        return full, swa

    def _decode_columns(self) -> Mapping[str, np.ndarray]:
        """The decode-steps frame's columns: what the summary reads now, the frame's others on
        first read (:class:`DecodeColumns`, settled before the next record)."""
        if not self._d_chunks:
            return {c: np.zeros(0, dtype=_DECODE_DTYPES[c]) for c in DECODE_FRAME_COLUMNS}
        const = _const_array(self._d_const)
        if self._d_const_packed:
            const = np.concatenate([*self._d_const_packed, const])
        reps = const[:, 0].astype(np.int64)
        full, swa = self._decode_tokens()
        built = {
            "full_token": full,
            "full_token_usage": self._usage(full, "full_tokens"),
            "swa_token": swa,
            "swa_token_usage": self._usage(swa, "swa_tokens"),
            "round": np.repeat(const[:, 3].astype(np.int64), reps),
        }
        later = {"running": 1, "queue": 2, "round_share": 4}
        jumps, chunks = self._jumps, self._d_chunks  # not the recorder: no reference cycle

        n_steps = len(full)

        def build(name: str) -> np.ndarray:
            if name == "step":  # the summary counts the steps by another column's length
                return np.arange(1, n_steps + 1, dtype=np.int64)
            if name == "time_s":
                return _interleave(chunks, (jumps.times(),), 0)[0]
            i = later[name]
            return np.repeat(const[:, i] if i == 4 else const[:, i].astype(np.int64), reps)

        cols = DecodeColumns(DECODE_FRAME_COLUMNS, built, build)
        self._d_lazy.append(cols)
        return cols

    def _settle_decode_columns(self) -> None:
        """Build the columns still owed before the recorder's state moves on."""
        for cols in self._d_lazy:
            cols.settle()
        self._d_lazy = []

    def summary(self, columns: RunColumns | None = None) -> dict[str, Any]:
        """bench_multiturn's numbers plus kvplan's server-side ones, JSON-ready (NaN -> None);
        from ``columns`` when given (a :meth:`columns` taken at the end of the run)."""
        req = self._request_columns() if columns is None else columns.requests
        dec = self._decode_columns() if columns is None else columns.decode_steps
        return bench_summary(
            req,
            dec,
            prefill_batches=self._n_prefill_packed + len(self._prefill),
            retractions=self._retract,
            capacity=self.capacity,
            counters=self.counters,
            end_s=self.end_s,
            request_rate=self.request_rate,
        )

    def failures(self, columns: RunColumns | None = None) -> dict[str, Any]:
        """Rejected and aborted requests by reason (:func:`failures.failure_report`)."""
        from simulator.engine.failures import failure_report

        return failure_report(self._request_columns() if columns is None else columns.requests)

    def report_summary(
        self, client_mode: str | None = None, columns: RunColumns | None = None
    ) -> dict[str, Any]:
        """What a run reports: :meth:`summary` plus the failure report, and the ``client_mode``
        that sent the requests when given (the report's "Total requests" line names it).

        :meth:`summary` and :meth:`frames` keep bench_multiturn's layout, which
        ``benchmarks/compare_runs.py`` compares key by key across checkouts.
        """
        if columns is None:
            columns = self.columns()
        out = {**self.summary(columns), **self.failures(columns)}
        if client_mode is not None:
            out["client_mode"] = client_mode
        if self.hicache is not None:
            out["hicache"] = self.hicache.summary()
        return out

    def report_frames(self) -> dict[str, pd.DataFrame]:
        """:meth:`frames` with the requests frame's ``rejected`` and ``truncated`` columns
        (after ``aborted``)."""
        from simulator.engine.frames import build_frames

        frames = build_frames(self.columns(), report=True)
        if self.hicache is not None:
            if self._reqs.objects is None:
                raise RuntimeError("a HiCache run's frames need Recorder(keep_requests=True)")
            self.hicache.add_request_columns(frames["requests"], self._reqs.objects)
            frames.update(self.hicache.frames())
        return frames

    def write_outputs(self, out_dir: str | Path, client_mode: str | None = None) -> list[Path]:
        """Write every frame as parquet and CSV, and ``summary.json``, into ``out_dir`` (the
        report's versions: :meth:`report_frames`, :meth:`report_summary`).

        Each file is written under a temporary name in ``out_dir`` and renamed into place, so a
        reader never sees a half-written file. Returns the paths written.
        """
        from simulator.engine.frames import build_frames

        columns = self.columns()
        return write_tables(
            out_dir, build_frames(columns, report=True), self.report_summary(client_mode, columns)
        )


_PREFILL_NAMES = [c for c in PREFILL_FRAME_COLUMNS if not c.endswith("_usage")]
_PREFILL_FIELDS = len(_PREFILL_NAMES)  # the two usage columns are computed
_PREFILL_PACK = 1 << 16  # batches kept as tuples before they are packed
_DECODE_PACK = 1 << 14  # stepwise decode records (or per-call constants) kept before packing


def _interleave(chunks: list, jump_cols: tuple[np.ndarray, ...], first: int) -> tuple[np.ndarray, ...]:
    """Columns ``first, first + 1, ...`` of the decode steps: the jumps' steps (``jump_cols``)
    and the stepwise calls' steps (the arrays in ``chunks``), interleaved in call order."""
    stepwise = [c for c in chunks if not isinstance(c, int)]
    if not stepwise:
        return jump_cols
    lens = np.fromiter((c if isinstance(c, int) else len(c[0]) for c in chunks), np.int64, len(chunks))
    from_jump = np.repeat(np.fromiter((isinstance(c, int) for c in chunks), bool, len(chunks)), lens)
    out = []
    for i, jumps in enumerate(jump_cols, first):
        col = np.empty(len(from_jump), dtype=np.float64 if i == 0 else np.int64)
        col[from_jump] = jumps
        col[~from_jump] = np.concatenate([c[i] for c in stepwise])
        out.append(col)
    return tuple(out)


def _const_array(const: list[tuple[int, int, int, int, float]]) -> np.ndarray:
    """The decode calls' constants (steps, running, queue, round, share) as an (n, 5) array."""
    return float_rows(const, 5)


_DECODE_DTYPES = {
    "step": "int64",
    "time_s": "float64",
    "running": "int64",
    "queue": "int64",
    "full_token": "int64",
    "full_token_usage": "float64",
    "swa_token": "int64",
    "swa_token_usage": "float64",
    "round": "int64",
    "round_share": "float64",
}
