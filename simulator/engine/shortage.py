"""When the scheduler runs short: decode retraction, a request that can never be admitted, a
request refused on arrival, the wait for a HiCache transfer when nothing else can run, and the
pool leak check of an idle server.

Split from :mod:`simulator.engine.server` (the loop's hot path stays there, compiled with C
attributes); these paths run rarely, so :class:`ShortageMixin` is a plain mixin of
:class:`~simulator.engine.server.ServerModel` that reaches the server's state as attributes.
"""

from __future__ import annotations

from simulator.engine.failures import unservable_reason
from simulator.engine.server_state import ServerReq
from simulator.sglang_bugs import PoolLeakError


class ShortageMixin:
    """Retraction, unservable and rejected requests, the HiCache wait and the idle leak check."""

    def _await_transfer(self):
        """Nothing runs until a HiCache ack frees room: wait for it or for an arrival."""
        self._wakeup = self.env.event()
        yield self._wakeup | self.env.timeout(self.hicache.next_completion() - self.env.now)
        self._wakeup = None

    def memory_summary(self) -> str:
        """Free tokens per pool, for a stuck run's message."""
        full, swa = self.cache.available_tokens()
        return f"full available {full}, SWA available {swa}"

    def _on_idle(self) -> None:
        """``Scheduler.on_idle`` when ``is_fully_idle`` (managers/scheduler.py): first the pool
        leak check (``invariant_checker._check_all_pools``; SGLang raises ValueError on a leak,
        before the reset), then the new-token ratio goes back to its initial value
        (``new_token_ratio_tracker.reset``)."""
        leak = self.cache.idle_leak()
        if leak is not None:
            raise PoolLeakError(leak)
        self.ratio.reset()

    def _abort_unservable(self) -> None:
        """Nothing runs and the head of the queue can never be admitted: abort it, saying which
        admission condition fails on an idle server."""
        if self.chunked is not None:
            req, self.chunked = self.chunked, None
        else:
            req = self.waiting.popleft()
        why = unservable_reason(req, self.cache, self.pools, self.cfg.max_prefill_tokens)
        self._complete(req, self.env.now, why)

    def _reject(self, req: ServerReq, reason: str) -> None:
        """Refused on arrival, before the queue (``TokenizerManager._validate_one_request``):
        never scheduled, holds no cache; its finish time is its arrival time."""
        sim = req.sim
        sim.rejected = True
        sim.abort_reason = reason
        sim.finish_s = self.env.now
        self.completed += 1
        self.obs.on_finish(sim)
        req.done.succeed(sim)

    def _retract(self) -> None:
        """``ScheduleBatch.retract_decode``: drop the fewest-output, longest-input requests."""
        order = sorted(
            range(len(self.running)),
            key=lambda i: (self.running[i].num_outputs, -self.running[i].prompt_len),
            reverse=True,
        )
        retracted: list[ServerReq] = []
        first = True
        while first or not self.cache.check_decode_mem([self.running[i] for i in order]):
            if len(order) == 1:
                break
            first = False
            idx = order.pop()
            req = self.running[idx]
            self.cache.retract(req, len(order))
            req.retractions += 1
            req.gen += 1  # in-flight results of it are void
            retracted.append(req)
        aborted = []
        if len(order) <= 1 and not self.cache.check_decode_mem([self.running[i] for i in order]):
            last = self.running[order.pop()]
            aborted.append(last)
        # filter_batch(keep_indices=sorted_indices): the batch keeps the retraction order
        self.running = [self.running[i] for i in order]
        self.batch_is_full = False
        before = self.ratio.current
        decoded = sum(r.num_outputs for r in self.running)
        max_new = sum(r.max_new_tokens for r in self.running)
        self.ratio.current = min(1.0, (decoded + 20 * len(self.running)) / (max_new + 1))
        self.retractions += len(retracted)
        self.waiting.extend(retracted)
        if self.hicache is not None:  # _add_request_to_queue(is_retracted=True) prefetches too
            for r in retracted:
                self.hicache.on_enqueue(r)
        for r in aborted:
            self._abort(r, "decode memory short even after retracting all other requests")
        if retracted:
            self.obs.on_retract(self.env.now, [r.sim for r in retracted], before, self.ratio.current)
