"""Overlap scheduling: ``Scheduler.event_loop_overlap`` (``managers/scheduler.py``).

Batch N+1 is scheduled and launched before batch N's results are processed, so every result,
checkpoint and release lands one step late and a finishing request takes one extra decode slot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.engine.overlap_jump import OverlapJumpMixin, one_step_record
from simulator.engine.server_state import ServerReq


@dataclass(eq=False)
class _Launched:
    """A batch on the GPU whose results the scheduler has not processed yet (overlap mode)."""

    kind: str
    reqs: list
    gens: list
    start: float
    end: float
    info: tuple
    chunk: ServerReq | None = None  # the request this prefill batch left mid-prompt


class OverlapMixin(OverlapJumpMixin):
    """The overlap loop of :class:`~simulator.engine.server.ServerModel` (a mixin, as SGLang's
    ``Scheduler`` is assembled); its decode jump is :class:`OverlapJumpMixin`'s."""

    def _loop_overlap(self):
        """``Scheduler.event_loop_overlap``: batch N+1 is scheduled and launched before batch
        N's results are processed; the GPU runs launched batches back to back.

        So a request that finishes in batch N still takes part in batch N+1 (one over-allocated
        slot, freed at its release), prefill requests join the next decode batch before their
        first token is known, and every cache checkpoint and release lands one step later.
        Quiet decode passes are fast-forwarded (:mod:`simulator.engine.overlap_jump`).
        """
        pending: _Launched | None = None
        while True:
            if self.on_pass is not None:
                self.on_pass()
            if self.hicache is not None:  # _process_hicache_events, behind the forward in flight
                self.hicache.step_start(self.env.now, 0.0 if pending is None else pending.end)
            if pending is not None and self.chunked is not None and self.chunked in pending.reqs:
                # stash_chunked_request: the in-flight chunk is checkpointed when the next batch
                # is scheduled
                self._stash_chunk(self.chunked, pending)
            launched = None
            batch = self._get_new_batch_prefill()
            start = pending.end if pending is not None else self.env.now
            if batch:
                launched = self._launch_prefill(batch, start)
            elif self.running:
                plan = self._overlap_jump_plan(pending)
                if plan is not None:  # passes of quiet decode steps at once
                    left = yield from self._overlap_fast_forward(pending, plan)
                    if left is None:  # the jump also drained the batch: nothing in flight
                        pending = self.in_flight = None
                        continue
                    reqs, t0, t1 = left
                    pending = self.in_flight = _Launched("decode", reqs, [r.gen for r in reqs], t0, t1, ())
                    if self.hicache is not None:  # the last pass's flush_pending_backups
                        self.hicache.step_end(self.env.now, t1)
                    continue
                launched = self._launch_decode(start)
            if pending is not None:
                if pending.end > self.env.now:
                    wait = pending.end - self.env.now
                    if not self._clock_skips(wait):  # no event due before: no timeout either
                        yield self.env.timeout(wait)
                self._process_launched(pending)
                if self.hicache is not None:  # flush_pending_backups, behind the launched batch
                    self.hicache.step_end(self.env.now, 0.0 if launched is None else launched.end)
            elif launched is None:
                if self.idle:
                    self._on_idle()  # no batch in this pass nor the last one
                    self._wakeup = self.env.event()
                    yield self._wakeup
                    self._wakeup = None
                elif not self.running:
                    if self.hicache is not None and self.hicache.next_completion() < math.inf:
                        yield from self._await_transfer()  # a HiCache ack may unlock room
                    else:
                        self._abort_unservable()
            pending = self.in_flight = launched

    def _launch_prefill(self, batch: list[ServerReq], start: float):
        if self.ops is not None:
            self._begin_prefill_step(batch, start)
        hicache = self.hicache  # ready_to_load_host_cache: the copy waits for the forward in flight
        load_s = 0.0 if hicache is None else hicache.submit_loads(self.env.now, start)
        cached_before = self._prepare_extend(batch)
        if cached_before is None:
            return None
        ext = [r.extend_end - r.prefix_len for r in batch]
        dur = self.costs.prefill_time(ext, [r.prefix_len for r in batch])
        if hicache is not None:
            dur = hicache.prefill_time(load_s, dur)
        # the scheduler merges the prefilled requests into the next decode batch right away
        self._prefill_joins(batch)
        for r in batch:
            if r is not self.chunked:
                self.running.append(r)
        info = (sum(ext), cached_before, len(self.running), len(self.waiting))
        launched = _Launched("prefill", batch, [r.gen for r in batch], start, start + dur, info)
        launched.chunk = self.chunked if self.chunked in batch else None
        return launched

    def _launch_decode(self, start: float):
        if self._skip_finishing_inflight():
            return None
        if self.ops is not None:
            self._begin_step(start)
        batch = self._prepare_decode()
        if batch is None:
            return None
        seqs = [r.kv_allocated_len for r in batch]
        dur = self.cost.decode_time(len(batch), sum(seqs), sum(min(x, self.window) for x in seqs))
        self._step.duration_s = dur  # the announced step's (a scratch entry when not recording)
        batch = list(batch)
        return _Launched("decode", batch, [r.gen for r in batch], start, start + dur, ())

    def _skip_finishing_inflight(self) -> bool:
        """``Scheduler.update_running_batch`` under overlap (``_reqs_finishing_inflight``): the
        requests whose in-flight result commits their last token by length leave the decode
        batch; True when no decode runs this pass, because none is left or because decode
        memory is short while such requests exist (their release comes with the result being
        processed now, so the others decode next pass instead of being retracted)."""
        pending = self.in_flight
        if pending is None:
            return False
        inflight = set(map(id, pending.reqs))
        finishing = [r for r in self.running if id(r) in inflight and r.num_outputs + 1 >= r.max_new_tokens]
        if not finishing:
            return False
        gone = set(map(id, finishing))
        self.running = [r for r in self.running if id(r) not in gone]
        self.batch_is_full = False
        return not self.running or not self.cache.check_decode_mem(self.running)

    def _stash_chunk(self, req: ServerReq, launched: _Launched) -> None:
        if req.stashed is launched:
            return
        req.stashed = launched
        self.cache.free_group_begin()
        self.cache.checkpoint(req, req.extend_end, finished=False)
        req.prefix_len = req.extend_end
        self.cache.free_group_end()

    def _process_launched(self, launched: _Launched, notify: bool = True) -> None:
        """``process_batch_result`` of a batch, at its end time, one step late (``notify``
        False: a decode jump told the clients of the finishes at that time already)."""
        t1 = launched.end
        live = [
            r
            for r, gen in zip(launched.reqs, launched.gens, strict=True)
            if r.gen == gen and r.holds_kv and r.num_outputs < r.output_len
        ]
        if launched.kind != "prefill":
            self._process_decode(launched, live)
            return
        self.cache.free_group_begin()
        for r in live:
            # a chunk (checkpointed when it was stashed); its next chunk may already have
            # moved extend_end, so the batch remembers which request it left truncated
            if r is launched.chunk:
                self._stash_chunk(r, launched)
                continue
            r.num_outputs += 1
            if math.isnan(r.sim.first_token_s):
                r.sim.first_token_s = t1
                self.obs.on_first_token(r.sim)
            if r.num_outputs >= r.output_len:
                self._finish_overlap(r, t1, notify)
            else:
                self.cache.checkpoint(r, r.extend_end, finished=False)
                r.prefix_len = r.extend_end
        self.cache.free_group_end()
        self._report_launched(launched)
        self._check()

    def _process_decode(self, launched: _Launched, live: list[ServerReq]) -> None:
        """``process_batch_result_decode`` of a decode step: each live request's token, the
        finishers released in one free group (none opened when nobody finishes and no memory
        operations are recorded: an empty group changes nothing), then the step's record, usage
        read as ``report_decode_stats`` reads it (after the next batch's launch)."""
        t1 = launched.end
        self.overlap_extra_slots += len(launched.reqs) - len(live)
        self.decode_steps += 1
        done = []
        for r in live:
            r.num_outputs += 1
            if r.num_outputs >= r.output_len:
                done.append(r)
        cache = self.cache
        if done or self.ops is not None:
            cache.free_group_begin()
            for r in done:
                self._finish_overlap(r, t1)
            cache.free_group_end()
        full_used, swa_used = cache.used_tokens()
        sims = [r.sim for r in launched.reqs]
        self.obs.on_decode_jump(
            one_step_record(t1, sims, full_used, swa_used, self.page_size, len(self.waiting))
        )
        self._check()

    def _report_launched(self, launched: _Launched) -> None:
        """A prefill batch's log record, with usage read after its results are processed, as
        the logs do (``process_batch_result_prefill`` -> ``report_prefill_stats``,
        batch_result_processor.py; a decode step's: :meth:`_process_decode`): under overlap
        that is after the next batch was launched and allocated."""
        full_used, swa_used = self.cache.used_tokens()
        sims = [r.sim for r in launched.reqs]
        ext, cached, running, queue = launched.info
        self.obs.on_prefill_batch(
            launched.start, launched.end, sims, ext, cached, full_used, swa_used, running, queue
        )

    def _finish_overlap(self, r: ServerReq, t: float, notify: bool = True) -> None:
        """Release a request whose finish the step-late result revealed. One that stopped at EOS
        is already in the next (launched) decode step, which writes its last token's KV: that
        slot is committed (``kv_committed_len`` = prompt + outputs) and enters the tree with
        the rest; one finishing by length left that batch (``_reqs_finishing_inflight``)."""
        if r in self.running:
            self.running.remove(r)
        self._complete(r, t, notify=notify)
