"""Memory-operation recording in the simulated server (docs/op-log.md): opt-in, off by default.

With recording on (``ServerModel(record_ops=True)``) the server announces every scheduler step
to the cache controller (``begin_step``: the step number ``forward_ct``, its simulated start
and duration) so that the records the controller emits carry it, and a decode jump emits its
records segment by segment in SGLang's per-step order: a segment's allocations and window
frees, then the releases of the requests that finish at its last step, then the next segment.
With it off the server pays one ``self.ops is None`` check per step or jump and nothing here
runs.
"""

from __future__ import annotations

from simulator.memory_ops import MemoryOpExecutor, StepInfo


def unrecorded_step() -> StepInfo:
    """The step a server writes its durations to when it does not record (never read)."""
    return StepInfo(-1, 0.0, 0.0)


class RecordingMixin:
    """The recording side of :class:`~simulator.engine.server.ServerModel` (a mixin). Callers
    check ``self.ops is not None`` before calling anything here."""

    ops: MemoryOpExecutor | None
    _step: StepInfo  # the announced step whose duration is set once it is known

    def _begin_step(self, start_s: float, duration_s: float = 0.0) -> None:
        """Announce step ``forward_ct``. A step announced again (its prefill allocation failed
        and the batch was aborted, so the counter did not move) keeps one entry."""
        steps = self.ops.steps
        if steps and steps[-1].step == self.forward_ct:
            steps[-1].start_s, steps[-1].duration_s = start_s, duration_s
        else:
            self.cache.begin_step(self.forward_ct, start_s, duration_s)
        self._step = steps[-1]

    def _begin_prefill_step(self, batch: list, start_s: float) -> None:
        """Announce a prefill (or chunk) step with the price its forward will have."""
        ext = [r.extend_end - r.prefix_len for r in batch]
        self._begin_step(start_s, self.costs.prefill_time(ext, [r.prefix_len for r in batch]))

    def _record_jump_segment(
        self, reqs: list, a: int, b: int, forward0: int, clock, start_s: float
    ) -> tuple[int, int, list[int], list[tuple[int, int]]]:
        """Steps ``[a, b)`` of a decode jump that began at ``start_s`` (step ``forward0``):
        their memory operations as records, each request's counters advanced.

        Returns what the count path's :meth:`_replay_quiet_steps` returns: ``#full token`` and
        ``#swa token`` at the segment's start, the steps (from ``a``) that open a page and the
        ``(step, SWA pages)`` window frees. If no step of the segment can evict, its records are
        bulk ones (``record_decode_jump``: one step entry for the segment); else every step is
        announced and runs SGLang's per-step sequence.
        """
        cache, p, m = self.cache, self.page_size, b - a
        full0, swa0 = cache.used_tokens()
        opens: list[int] = []
        for r in reqs:
            f = (-r.kv_allocated_len) % p  # the first step at which this request opens a page
            if f < m:
                opens.extend(range(f, m, p))
        opens.sort()
        t0 = clock.end(a - 1) if a else start_s
        if min(cache.free_pages()) - len(opens) >= len(reqs):
            cache.begin_step(forward0 + a, t0, clock.end(b - 1) - t0)
            ctx = cache.decode_context(forward0 + a)
            frees = cache.record_decode_jump(reqs, [m] * len(reqs), self.swa_policy, ctx)
            for r in reqs:
                r.kv_allocated_len += m
                r.decode_batch_idx += m
                r.num_outputs += m
        else:
            frees = self._record_decode_steps(reqs, a, b, forward0, clock, t0)
        self.swa_freed_by_decode += sum(pages for _, pages in frees) * p
        return full0, swa0, opens, frees

    def _record_decode_steps(
        self, reqs: list, a: int, b: int, forward0: int, clock, t0: float
    ) -> list[tuple[int, int]]:
        """Jump steps ``[a, b)`` one by one, as :meth:`_prepare_decode` runs a step (no step of
        a jump retracts: ``_quiet_steps`` keeps a batch of headroom): ``check_decode_mem``,
        ``maybe_evict_swa`` in a free group, ``alloc_for_decode``. The window frees, per step."""
        cache, policy, p = self.cache, self.swa_policy, self.page_size
        frees: list[tuple[int, int]] = []
        for s in range(a, b):
            t1 = clock.end(s)
            cache.begin_step(forward0 + s, t0, t1 - t0)
            t0 = t1
            if not cache.check_decode_mem(reqs):  # pragma: no cover - excluded by _quiet_steps
                raise AssertionError("a fast-forwarded decode step ran out of memory")
            ctx = cache.decode_context(forward0 + s)
            cache.free_group_begin()
            for r in reqs:
                freed = policy.on_decode(r, ctx)
                if freed:
                    frees.append((s - a, freed // p))
            cache.free_group_end()
            cache.alloc_for_decode(reqs)
            for r in reqs:
                r.num_outputs += 1
        return frees
