"""Run one simulation: resolve SGLang's pools, build the server, start the clients, run."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

import simpy

# Pool sizing and the cost model load with the engine (SimConfig imports them lazily, so that
# the CLI starts fast), not inside the first run.
import simulator.pool_sizing  # noqa: F401
from simulator.cost import CostModel, load_profile
from simulator.engine.config import SimConfig
from simulator.engine.observer import ServerObserver
from simulator.engine.server import ServerModel, ServerPools, StuckSimulation
from simulator.errors import ConfigError
from simulator.gpus import get_gpu
from simulator.models import load_model
from simulator.sglang_bugs import PoolLeakError, raise_if_sglang_crash, warn_if_sglang_misbehaves
from traces.load import return_freed_memory


def resolve_pools(cfg: SimConfig):
    """SGLang's pool sizes and scheduler limits for ``cfg`` (``simulator.pool_sizing``)."""
    cfg.server_args()  # SGLang's own flag checks first
    if cfg.disable_radix_cache:
        raise ConfigError("--disable-radix-cache is not modelled yet; kvplan simulates the radix cache")
    model, gpu = load_model(cfg.model), get_gpu(cfg.gpu)
    sizes = cfg.pool_sizes()
    resolved = sizes.server_args
    hybrid = bool(sizes.swa_tokens) and bool(sizes.sliding_window)
    warn_if_sglang_misbehaves(sizes.swa_tokens, resolved.chunked_prefill_size, sizes.page_size, hybrid)
    if hybrid:
        pools = ServerPools(
            page_size=sizes.page_size,
            full_tokens=sizes.full_tokens,
            swa_tokens=sizes.swa_tokens,
            window=int(sizes.sliding_window),
            max_running_requests=int(sizes.max_running_requests),
            chunked_prefill_size=int(resolved.chunked_prefill_size),
            context_length=int(resolved.context_length),
        )
    else:
        # One pool (e.g. Gemma 3): the SWA side mirrors the FULL pool and no window ever binds.
        pools = ServerPools(
            page_size=sizes.page_size,
            full_tokens=sizes.full_tokens,
            swa_tokens=sizes.full_tokens,
            window=1 << 40,
            max_running_requests=int(sizes.max_running_requests),
            chunked_prefill_size=int(resolved.chunked_prefill_size),
            hybrid=False,
            context_length=int(resolved.context_length),
        )
    return model, gpu, sizes, pools


def build_cost_model(cfg: SimConfig, model, gpu):

    profile = load_profile(cfg.profile) if cfg.profile else None
    return CostModel.from_presets(model, gpu, cfg.tp, profile)


#: The collector's first-generation threshold during a run (Python's default is 700). A run's
#: objects mostly die young (steps, batches, receipts) or live as long as a request; at 700 the
#: request-lived ones reach the older generations, whose collections walk the whole tree. At
#: 100,000 they die before a collection, and one young collection walks at most 100,000 objects.
RUN_GC_THRESHOLD = 100_000


@contextmanager
def collector_skips_older_objects() -> Iterator[None]:
    """Keep the cyclic garbage collector off the objects that existed before the run.

    A run creates tens of thousands of long-lived objects (tree nodes, requests), and each full
    collection it triggers would also walk everything the process held before (imported
    modules, the loaded trace): up to a tenth of a run's time. ``gc.freeze`` parks those objects
    for the run and ``gc.unfreeze`` hands them back to the collector afterwards, so nothing is
    kept longer than one collection. Skipped when the process has frozen objects of its own
    (e.g. before forking workers) or has the collector off: their state is left alone.
    """
    if gc.get_freeze_count() or not gc.isenabled():
        yield
        return
    gc.freeze()
    thresholds = gc.get_threshold()
    gc.set_threshold(max(thresholds[0], RUN_GC_THRESHOLD), *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


def _first_unfinished(server: ServerModel) -> str:
    """The first unfinished request the server still holds (an unfinished request that it does
    not hold was lost on the way, or its client never sent it)."""
    for r in (server.chunked, *server.running, *server.waiting[:1]):
        if r is not None:
            return f"first: {r.rid}"
    return "none of them in the server"


def simulate(
    trace,
    cfg: SimConfig,
    observer: ServerObserver | None = None,
    *,
    resolved: tuple | None = None,
    record_ops: bool = False,
) -> ServerModel:
    """Serve ``trace`` under ``cfg``; ``observer`` (e.g. ``metrics.Recorder``) sees everything.

    ``resolved`` is :func:`resolve_pools`'s answer for ``cfg`` when the caller already has it.
    ``record_ops``: record the memory operations (the returned server's ``ops``; docs/op-log.md).
    Raises ``StuckSimulation`` if requests remain unfinished when no event is left.
    """
    from simulator.engine.clients import requests_from_trace, start_clients

    model, gpu, sizes, pools = resolved if resolved is not None else resolve_pools(cfg)
    cost = build_cost_model(cfg, model, gpu)
    env = simpy.Environment()
    observer = observer or ServerObserver()
    hicache = None
    if cfg.hicache.enabled:  # HiCache's modules load only with a run that has it
        from simulator.engine.hicache_steps import hicache_setup

        hicache = hicache_setup(cfg, model, gpu, sizes, pools)
    server = ServerModel(env, cfg, pools, cost, observer, record_ops=record_ops, hicache=hicache)
    requests = requests_from_trace(trace, pools.page_size)
    n = len(requests)
    if n >= 1 << 16:
        return_freed_memory()  # the temporaries behind a big trace's requests
    start_clients(env, server, trace, cfg, requests)
    del requests  # the clients hold them, so that a finished request can be freed
    with collector_skips_older_objects():
        try:
            env.run()
        except (AssertionError, PoolLeakError) as exc:  # SGLang's own crash where it has one
            raise_if_sglang_crash(exc, pools, env.now)
            raise
    if server.completed < n:
        raise StuckSimulation(
            f"{n - server.completed} of {n} requests never finished ({_first_unfinished(server)}); "
            f"server state: {len(server.waiting)} waiting, {len(server.running)} running, "
            f"chunked={'yes' if server.chunked else 'no'}, {server.memory_summary()}"
        )
    if server.hicache is not None:
        from simulator.engine.hicache_report import HiCacheReport

        observer.on_hicache(HiCacheReport(server.hicache))
    observer.on_end(env.now, server.counters())
    return server
