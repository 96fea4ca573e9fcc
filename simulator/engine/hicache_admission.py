"""Prefill admission with HiCache: the host-hit path of ``PrefillAdder.add_one_req``.

SGLang 0.5.23 ``managers/schedule_policy.py``: ``add_one_req`` pins the device prefix
(``_lock_node``), selects the prefill shape as if the host hit were already on device
(``_select_prefill_admission`` with ``host_hit_length``; ``mem_cache/prefill_budget.py``
``SWAPrefillBudget.check_prefill`` adds the page-rounded ``swa_host_hit_length`` to the SWA
reservation, ``estimate_swa_kv_tokens``), then, when ``req.needs_host_load_back()``, pins
``best_match_node`` on both tiers and calls ``init_load_back`` (all or nothing, the 10-token
threshold and device eviction live in :mod:`simulator.radix.hicache_transfer`). A load that
exposes more than the host hit widens the prefix and keeps the approved budget; a load that
loaded nothing re-selects without the host hit. ``_commit_prefill_admission`` then locks the
new last node.

With an L3 tier, the storage gate of ``Scheduler._get_new_batch_prefill_raw`` comes first:
``check_prefetch_progress`` keeps a request whose prefetch must still be waited for out of
this pass (:meth:`~simulator.engine.hicache_l3_served.L3Steps.storage_ready`).
"""

from __future__ import annotations

from simulator.engine.admission import CONTINUE, NO_TOKEN, OTHER, PrefillAdder, estimate_swa_tokens
from simulator.engine.server_state import CLIP_MAX_NEW_TOKENS, ServerReq

__all__ = ["HiCachePrefillAdder"]


class HiCachePrefillAdder(PrefillAdder):
    """:class:`PrefillAdder` whose ``add_one_req`` takes host hits and loads them back."""

    __slots__ = ("steps",)

    def __init__(self, cache, *, steps, **kwargs) -> None:
        super().__init__(cache, **kwargs)
        self.steps = steps  # simulator.engine.hicache_steps.HiCacheSteps (per-tier hits)

    def add_one_req(self, req: ServerReq) -> str:
        steps = self.steps
        if steps.l3 is not None and not steps.storage_ready(req):
            return CONTINUE  # check_prefetch_progress: skip a request whose prefetch runs
        cache = self.cache
        cache.match(req)  # init_next_round_input: device prefix, host hits, best_match_node
        max_new = min(max(req.max_new_tokens - req.num_outputs, 0), CLIP_MAX_NEW_TOKENS)
        # total_tokens of add_one_req: the device-side extend (before any host hit)
        total = req.fill_len - req.prefix_len + max_new + self.page_size
        temp = cache.pin(req)  # _lock_node(req.last_node)
        try:
            host_hit, swa_hit = req.host_hit_length, req.swa_host_hit_length
            shape = self._select(req, total, max_new, host_hit, swa_hit)
            if isinstance(shape, str):
                return shape
            if host_hit > 0 or swa_hit > 0:  # req.needs_host_load_back()
                shape = self._load_back(req, total, max_new, shape)
                if isinstance(shape, str):
                    return shape
            prefix, extend, chunked = shape
            # _commit_prefill_admission
            req.extend_end = req.prefix_len + extend
            cache.lock_prefix(req)
            self.batch.reqs.append(req)
            self.batch.admitted.append(req)
            self._reserve(extend, 0 if chunked else min(req.max_new_tokens, CLIP_MAX_NEW_TOKENS))
            if chunked:
                self.batch.chunked = req
            self.steps.record_tiers(req)
        finally:
            cache.unpin(temp)
        return self.budget_state()

    def _load_back(self, req: ServerReq, total: int, max_new: int, shape: tuple[int, int, bool]):
        """``init_load_back`` (the controller pins ``best_match_node`` on both tiers), then the
        admission shape the load leaves (widened, kept, or re-selected without the host hit)."""
        host_hit = req.host_hit_length
        loaded = self.cache.load_back(req)
        prefix, extend, chunked = shape
        if loaded > host_hit:  # resident FULL behind a host-only window: keep the budget
            prefix = req.prefix_len + loaded
            extend = min(extend, req.fill_len - prefix)
            chunked = chunked and prefix + extend < req.fill_len
            shape = (prefix, extend, chunked)
        elif loaded < host_hit:  # nothing loaded: recomputation may no longer fit
            shape = self._select(req, total, max_new, 0, 0)
            if isinstance(shape, str):
                return shape
        req.prefix_len += loaded
        return shape

    def _select(self, req: ServerReq, total: int, max_new: int, host_hit: int, swa_hit: int):
        """``_select_prefill_admission``: (prefix, extend, chunked) with ``host_hit`` counted as
        cached, or the refusal (NO_TOKEN / OTHER). The caller holds the prefix lock, so the
        room already excludes it."""
        p = self.page_size
        full_room, swa_room = self.cache.room_tokens()
        if not total < full_room - self.total_offset:  # check_prefill: remaining_total
            return NO_TOKEN
        prefix = req.prefix_len + host_hit
        extend = req.fill_len - prefix
        ok, chunk_limit = self._swa_fit(extend, max_new, swa_hit, swa_room)
        if not ok:
            return NO_TOKEN
        ext_paged = -(-extend // p) * p
        if chunk_limit is None and self.batch.reqs and ext_paged >= self.rem_input:
            return OTHER
        chunked = chunk_limit is not None and ext_paged > chunk_limit
        if chunked:  # truncate to whole pages of the chunk budget
            end = (prefix + chunk_limit // p * p) // p * p
            extend = end - prefix
            if extend <= 0:
                return OTHER
        return prefix, extend, chunked

    def _swa_fit(self, extend: int, max_new: int, swa_hit: int, swa_room: int) -> tuple[bool, int | None]:
        """``SWAPrefillBudget.check_prefill`` with the host SWA hit: (fits, chunk limit)."""
        p, w, chunk_limit = self.page_size, self.window, self.rem_chunk
        host = -(-swa_hit // p) * p
        needed = estimate_swa_tokens(-(-extend // p) * p, max_new, chunk_limit, w, p) + host
        rem_swa = swa_room - self.swa_offset
        if needed < rem_swa:
            return True, chunk_limit
        if chunk_limit is not None and needed >= self.cache.capacity()[1]:  # swa_never_fits
            headroom = estimate_swa_tokens(0, max_new, None, w, p) + host  # _chunk_cap
            cap = max(0, int(rem_swa) - headroom) // p * p
            if cap > 0:
                if cap < chunk_limit:
                    self.swa_events[0] += 1
                return True, min(chunk_limit, cap)
        self.swa_events[1] += 1
        return False, chunk_limit
