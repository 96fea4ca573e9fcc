"""A train of truncated prefill chunks of one long prompt, applied before the clock moves.

The typed part of :meth:`~simulator.engine.fast_forward.FastForwardMixin._run_chunk_train` (a
generator cannot have typed locals): the compiled build reads the scheduler's fields as C fields
(chunk_train.pxd cimports ``ServerCore``). A module of its own because server.py imports
fast_forward at its top: fast_forward imports this one when a train first runs, once the
server module is loaded.
"""

from __future__ import annotations

import bisect

from simulator.engine.admission import chunk_continuation, running_offset
from simulator.engine.server_state import ServerReq
from simulator.radix.cache import OutOfMemory


def run_chunks(server, req: ServerReq) -> tuple:
    """Apply consecutive truncated chunks of ``req`` from the server's clock on, each chunk's
    allocation, forward and checkpoint in order: ``(end time, records, queue length)``, one
    record ``(t0, t1, extend, cached, #full token, #swa token)`` per chunk; the last
    (untruncated) chunk is left to the scheduler's own pass."""
    t = server.env.now
    records: list = []
    cache = server.cache
    while True:
        t0 = t
        cached_before = req.prefix_len if not req.holds_kv and not req.retracted_stain else 0
        if server.ops is not None:
            server._begin_prefill_step([req], t0)
        try:
            cache.alloc_for_extend([req])
        except OutOfMemory as exc:
            server.chunked = None
            server._abort(req, str(exc))
            break
        server.forward_ct += 1
        ext = req.extend_end - req.prefix_len
        dur = server.costs.prefill_time([ext], [req.prefix_len])
        full_used, swa_used = cache.used_tokens()
        t = t0 + dur
        records.append((t0, t, ext, cached_before, full_used, swa_used))
        cache.free_group_begin()
        cache.checkpoint(req, req.extend_end, finished=False)  # stash_chunked_request
        req.prefix_len = req.extend_end
        cache.free_group_end()
        server._check()
        new_len, truncated = chunk_continuation(
            req,
            cache,
            server.pools.chunked_prefill_size,
            running_offset(server.running, server.ratio.current),
        )
        if new_len <= 0 or not truncated:
            break  # the scheduler's own pass takes the last chunk
        if server.waiting:  # this chunk's pass orders the queue too (no room depends on it)
            server._calc_priority()
        req.extend_end = req.prefix_len + new_len
    return t, records, len(server.waiting)


def report_chunks(server, req: ServerReq, records: list, queued0: int) -> None:
    """The chunks' batch records, with the queue each chunk's end saw (requests that arrived
    during the train, past the first ``queued0`` of the queue, waited it out)."""
    arrivals = sorted([r.sim.arrival_s for r in server.waiting[queued0:]])
    obs = server.obs
    for t0, t1, ext, cached, full_used, swa_used in records:
        queue = queued0 + bisect.bisect_right(arrivals, t1)
        obs.on_prefill_batch(t0, t1, [req.sim], ext, cached, full_used, swa_used, len(server.running), queue)
