"""Where a sweep's runs execute: in this process, in local worker processes, or on Dask.

Every backend runs the same function, :func:`run_task` (one configuration through
:func:`simulator.run.run_config`), on the same trace object and returns the same plain-data
outcome, so results are bit for bit the same whatever the backend and the number of workers;
only the order in which runs finish differs, and the sweep puts its output back in grid order.
The trace travels once per worker: inherited or pickled by the process pool's initializer,
scattered to every Dask worker.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from simulator.engine.config import SimConfig
from simulator.errors import ConfigError, KvplanError

Task = tuple[int, SimConfig]  # (task id, configuration)
Outcome = dict[str, Any]  # {"summary": dict | None, "error": str | None, "run_s": float}


def run_task(trace: Any, cfg: SimConfig) -> Outcome:
    """One run; a configuration kvplan or SGLang refuses is an outcome (``error``), not a crash.
    kvplan's own bugs (InternalError) and anything unexpected propagate and stop the sweep."""
    from simulator.errors import InternalError
    from simulator.run import run_config

    start = time.perf_counter()
    try:
        summary: dict[str, Any] | None = run_config(trace, cfg).summary
        error = None
    except InternalError:
        raise
    except KvplanError as exc:
        summary, error = None, f"{type(exc).__name__}: {exc}"
    return {"summary": summary, "error": error, "run_s": time.perf_counter() - start}


class Backend(Protocol):
    """Runs tasks, yielding ``(task id, outcome)`` as each finishes."""

    name: str
    workers: int

    def run(self, trace: Any, tasks: Sequence[Task]) -> Iterator[tuple[int, Outcome]]: ...


class SerialBackend:
    """Runs in this process, in task order (``-j 1``)."""

    name = "serial"
    workers = 1

    def run(self, trace: Any, tasks: Sequence[Task]) -> Iterator[tuple[int, Outcome]]:
        for task_id, cfg in tasks:
            yield task_id, run_task(trace, cfg)


_WORKER_TRACE: Any = None


def _init_worker(trace: Any) -> None:
    global _WORKER_TRACE
    _WORKER_TRACE = trace


def _run_in_worker(cfg: SimConfig) -> Outcome:
    return run_task(_WORKER_TRACE, cfg)


class ProcessBackend:
    """``-j N`` local worker processes (concurrent.futures.ProcessPoolExecutor).

    ``persistent``: keep the pool between ``run`` calls on the same trace object (the planner's
    batches), so each worker starts, imports the engine and builds the trace's page keys once
    per plan, not once per batch; :meth:`close` (or ``with``) stops it."""

    name = "processes"

    def __init__(self, workers: int, persistent: bool = False) -> None:
        self.workers = workers
        self.persistent = persistent
        self._pool: Any = None
        self._pool_trace: Any = None

    def _get_pool(self, trace: Any, n_tasks: int) -> Any:
        from concurrent.futures import ProcessPoolExecutor

        if self._pool is not None and self._pool_trace is trace:
            return self._pool
        self.close()
        # The engine's modules load here once, before the fork, not in every worker.
        import simulator.engine.simulate  # noqa: F401
        import simulator.run  # noqa: F401

        workers = self.workers if self.persistent else min(self.workers, n_tasks)
        pool = ProcessPoolExecutor(max_workers=workers, initializer=_init_worker, initargs=(trace,))
        if self.persistent:
            self._pool, self._pool_trace = pool, trace
        return pool

    def run(self, trace: Any, tasks: Sequence[Task]) -> Iterator[tuple[int, Outcome]]:
        from concurrent.futures import FIRST_COMPLETED, wait

        if not tasks:
            return
        pool = self._get_pool(trace, len(tasks))
        try:
            pending = {pool.submit(_run_in_worker, cfg): task_id for task_id, cfg in tasks}
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    yield pending.pop(fut), fut.result()
        except BaseException:  # interrupted, or the consumer stopped: do not wait for the runs
            pool.shutdown(wait=False, cancel_futures=True)
            self._pool = self._pool_trace = None
            raise
        if not self.persistent:
            pool.shutdown(wait=True)

    def close(self) -> None:
        """Stop a persistent pool (a no-op without one)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        self._pool = self._pool_trace = None

    def __enter__(self) -> ProcessBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class DaskBackend:
    """A Dask distributed cluster: ``address`` of a running scheduler, or ``"local"`` for a
    LocalCluster of ``workers`` single-threaded worker processes started (and stopped) here."""

    name = "dask"

    def __init__(self, address: str, workers: int) -> None:
        self.address = address
        self.workers = workers

    def run(self, trace: Any, tasks: Sequence[Task]) -> Iterator[tuple[int, Outcome]]:
        if not tasks:
            return
        try:
            from distributed import Client, LocalCluster, as_completed
        except ImportError:
            raise ConfigError(
                "--dask needs dask's distributed scheduler: pip install 'kvplan[dask]'"
            ) from None
        cluster = None
        if self.address == "local":
            import logging

            cluster = LocalCluster(
                n_workers=self.workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                silence_logs=logging.ERROR,
            )
        client = Client(cluster if cluster is not None else self.address)
        if cluster is None:  # an existing cluster: report its size, not -j
            self.workers = len(client.scheduler_info().get("workers", {})) or self.workers
        try:
            remote_trace = client.scatter(trace, broadcast=True)
            futures = {client.submit(run_task, remote_trace, cfg, pure=False): tid for tid, cfg in tasks}
            for fut in as_completed(list(futures)):
                yield futures[fut], fut.result()
        finally:
            client.close()
            if cluster is not None:
                cluster.close()


def make_backend(jobs: int, dask: str | None, persistent: bool = False) -> Backend:
    """The backend the command line asks for: Dask when ``dask`` is given, else ``jobs``
    local processes (``jobs`` 1: in this process, no pool; ``persistent``: one pool kept
    across runs, see :class:`ProcessBackend`)."""
    if jobs < 1:
        raise ConfigError(f"-j must be >= 1, got {jobs}")
    if dask is not None:
        return DaskBackend(dask, jobs)
    return SerialBackend() if jobs == 1 else ProcessBackend(jobs, persistent)
