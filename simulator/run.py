"""One configuration in, results out: the library's entry point for one simulation run.

:func:`run_config` is what ``kvplan run``, ``kvplan bench-multiturn`` and ``kvplan demo`` call,
and what a sweep calls in worker processes. Its :class:`RunResult` is plain data (dicts and
pandas frames, no simulator, SimPy or server objects), so it pickles across processes.

    from simulator import SimConfig, run_config
    from traces import load_trace

    result = run_config(load_trace("trace.jsonl"), SimConfig(tp=8, page_size=64))
    print(result.summary["cache_hit_rate"], result.frames["requests"].head())
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from simulator.engine.config import SimConfig
from simulator.engine.outputs import write_tables

if TYPE_CHECKING:
    import pandas as pd

    from simulator.engine.observer import ServerObserver

__all__ = ["RunResult", "run_config"]


@dataclass(frozen=True, eq=False)
class RunResult:
    """What one run produced, as plain data.

    ``summary``: bench_multiturn's numbers plus the server's (JSON-ready, see docs/simulation.md),
    the failure report (``aborted``, ``rejected``, ``failed``, ``failure_reasons``) and the
    ``client_mode`` that sent the requests (``open``, ``sequential``, ``bench_multiturn``).
    ``frames``: ``requests``, ``decode_steps``, ``prefill_batches`` and ``retractions`` (a
    mapping that builds the DataFrames when first read: a run that only prints its summary never
    builds one, issue 14).
    ``counters``: the server's end-of-run counters (evictions, tombstones, retractions, ...).
    ``pools``: the pools and limits the server ran with (page size, token counts, window, ...).
    ``pool_sizes``: SGLang's pool sizing behind them (``PoolSizes.to_dict()``: bytes, GPU memory
    plan, resolved flags, notes); None when a test server stands in for the real one.
    """

    config: SimConfig
    summary: dict[str, Any]
    frames: Mapping[str, pd.DataFrame]
    counters: dict[str, Any]
    pools: dict[str, Any]
    pool_sizes: dict[str, Any] | None

    def equals(self, other: RunResult) -> bool:
        """Same configuration and the same results, bit for bit (NaN equals NaN in frames)."""
        plain = ("config", "summary", "counters", "pools", "pool_sizes")
        if any(getattr(self, k) != getattr(other, k) for k in plain):
            return False
        if self.frames.keys() != other.frames.keys():
            return False
        return all(self.frames[k].equals(other.frames[k]) for k in self.frames)

    def write_outputs(self, out_dir: str | Path) -> list[Path]:
        """Write every frame as parquet and CSV, and ``summary.json``, into ``out_dir``.

        Each file is written under a temporary name and renamed into place, so a reader never
        sees a half-written file. Returns the paths written.
        """
        return write_tables(out_dir, self.frames, self.summary)


def run_config(
    trace: Any,
    cfg: SimConfig,
    *,
    log_stream: TextIO | None = None,
    progress: Callable[[int], None] | None = None,
    record_ops: str | Path | None = None,
) -> RunResult:
    """Serve ``trace`` (a :class:`traces.Trace`) through the simulated server under ``cfg``.

    ``log_stream`` receives SGLang's decode log lines when ``cfg.log_decode`` (default stdout);
    ``progress`` is called with the number of finished requests after each finish.
    ``record_ops``: write the run's memory operations to this op log (docs/op-log.md); it is
    observability, not configuration, so it stays out of ``cfg`` (hashed for sweeps) and
    changes no result. Raises ``ConfigError`` for configurations SGLang would refuse (and for
    recording with the legacy tree).
    """
    from simulator.engine.clients import client_mode, offered_request_rate
    from simulator.engine.frames import LazyFrames
    from simulator.engine.metrics import Recorder

    recorder = Recorder.from_config(
        cfg, request_rate=offered_request_rate(trace, cfg), log_stream=log_stream, progress=progress
    )
    if record_ops is None:
        pool_sizes = _serve(trace, cfg, recorder)
    else:
        pool_sizes = _serve(trace, cfg, recorder, Path(record_ops))
    columns = recorder.columns()
    return RunResult(
        config=cfg,
        summary=recorder.report_summary(client_mode(trace, cfg), columns),
        # HiCache runs add their own frames and request columns (built now: they are keyed by
        # the run's request objects); the others build theirs on first read
        frames=LazyFrames(columns) if recorder.hicache is None else recorder.report_frames(),
        counters=dict(recorder.counters),
        pools=dict(recorder.server_config),
        pool_sizes=pool_sizes,
    )


def _serve(
    trace: Any, cfg: SimConfig, observer: ServerObserver, record_ops: Path | None = None
) -> dict[str, Any] | None:
    """Size the pools and simulate (recording to the op log ``record_ops`` if given); returns
    the sizing as a dict. (The CLI's plumbing tests put a fake server here.)"""
    from simulator.engine.simulate import resolve_pools, simulate

    resolved = resolve_pools(cfg)
    server = simulate(trace, cfg, observer, resolved=resolved, record_ops=record_ops is not None)
    if record_ops is not None:
        if cfg.check_invariants:
            check_recorded_ops(server.ops)
        _write_op_log(record_ops, server, cfg, resolved)
    return resolved[2].to_dict()


def check_recorded_ops(executor: Any) -> None:
    """``--check-invariants`` on a recorded run: replay its records on fresh pools
    (:func:`simulator.memory_ops.check_op_stream`); a double free, a leak into a live page or
    an allocation SGLang would hand out differently is a kvplan bug."""
    from simulator.invariants import InvariantViolation
    from simulator.memory_ops import check_op_stream

    pages, host = executor.pages, executor.host
    host_pages = None if host is None else tuple(pool.num_pages for pool in host.pools)
    errors = check_op_stream(
        executor.ops, pages.full.num_pages, pages.swa.num_pages, pages.page_size, host_pages
    )
    if errors:
        raise InvariantViolation([f"recorded memory operations: {e}" for e in errors])


def _write_op_log(path: Path, server: Any, cfg: SimConfig, resolved: tuple) -> None:
    """The recorded run as an op log (atomic write), with the model's per-rank geometry."""
    import dataclasses

    from simulator.oplog import model_geometry, write_recording

    model, _gpu, _sizes, pools = resolved
    config = json.loads(json.dumps(dataclasses.asdict(cfg), default=str))
    write_recording(
        path,
        server.ops,
        window=pools.window if pools.hybrid else None,
        geometry=model_geometry(model, cfg.tp),
        hicache=_hicache_header(cfg),
        source=dict(producer="kvplan run (simulated server)", config=config),
    )


def _hicache_header(cfg: SimConfig) -> dict | None:
    """The op log header's ``hicache`` settings (the host pool pages come from the recording)."""
    h = cfg.hicache
    if not getattr(h, "enable_hierarchical_cache", False):
        return None
    return dict(
        io_backend=h.hicache_io_backend,
        layout=h.hicache_mem_layout,
        write_policy=h.hicache_write_policy,
        host_pages=None,
    )
