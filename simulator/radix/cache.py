"""The cache controller: what SGLang's scheduler calls on the prefix cache for one request.

Match, allocation for extend and decode (with eviction through the tree when a pool is short),
checkpoint of unfinished requests and release of finished ones, in both tree generations.
Paths are relative to ``python/sglang/srt/``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from policies.swa_eviction import DecodeContext
from policies.tombstone import check_eviction_order
from simulator.errors import ConfigError, KvplanError
from simulator.kv_allocator import SWAKVAllocator
from simulator.memory_ops import MemoryOpExecutor
from simulator.radix.cache_counts import EvictionLog, pool_leak_message
from simulator.radix.page_ops import alloc_decode_ids, alloc_extend_ids, decode_jump_ids, free_row_ids
from simulator.radix.unified import UnifiedSWARadixTree, compiled_core
from simulator.request_kv import ReqKV, floor_page
from simulator.swa_window import free_out_of_window_0523

if TYPE_CHECKING:  # the legacy tree loads with a run that uses it (start-up time, issue 14)
    from simulator.radix.legacy import LegacySWARadixTree

SIZE_KEYS = (
    "full_evictable",
    "full_protected",
    "swa_evictable",
    "swa_protected",
    "full_available",
    "swa_available",
)


RETRACT_DECODE_STEPS = 20  # SGLANG_RETRACT_DECODE_STEPS


class OutOfMemory(KvplanError):
    """An allocation that cannot be met even after evicting everything evictable."""


class SWACacheController:
    """The cache controller: the scheduler's only door to the tree and the allocator.

    Shared logic; subclasses bind a tree generation (``_evict``). What the engine may call is
    :class:`simulator.radix.protocol.CacheController`. Not an ABC: the compiled build makes the
    controllers cdef classes (cache.pxd), whose metaclass cannot be ABCMeta.
    """

    decode_memory_check = False

    def __init__(self, allocator: SWAKVAllocator, window: int) -> None:
        self.allocator = allocator
        self.page_size = allocator.page_size
        self.window = window
        # the EvictionLog's counts (``evictions``), as integers: C counters in the compiled build
        self._ev_calls = self._ev_full_requested = self._ev_swa_requested = 0
        self._ev_full_evicted = self._ev_swa_evicted = 0
        self._evict_in_core = False  # UnifiedSWACache: ``_evict`` is the compiled tree's own
        self.tree: UnifiedSWARadixTree | LegacySWARadixTree | None = None  # the subclass's
        self.hybrid = True  # FULL + SWA pools; False: a full-attention model (build_controller)
        # a full-attention model's one-component unified tree (UnifiedSWACache._split_at_prompt)
        self.split_at_prompt = False
        # the tree where it is the compiled core (unified.compiled_core), else None: the compiled
        # controller calls that tree's API in C (cache.pxd); the same calls as through ``tree``
        self._core = None

    # ------------------------------------------------------------ recording
    def start_recording(self, need_sort: bool = False) -> MemoryOpExecutor:
        """Record every memory operation with real page ids from now on (empty pools only)."""
        return self.allocator.start_recording(need_sort)

    def begin_step(self, step: int, start_s: float = 0.0, duration_s: float = 0.0) -> None:
        """The engine announces scheduler step ``step`` (its simulated start and duration):
        records emitted from here on carry it. A no-op unless recording."""
        rec = self.allocator.recorder
        if rec is not None:
            rec.begin_step(step, start_s, duration_s)

    def record_decode_jump(self, reqs: list[ReqKV], ran: list[int], swa_policy, ctx) -> list[tuple[int, int]]:
        """Recording only: the allocations and window frees of a decode jump in which no step
        can evict (request ``i`` runs ``ran[i]`` steps), as bulk records in SGLang's per-step
        order (:func:`page_ops.decode_jump_ids`). The SWA-eviction policy runs here (it moves
        the requests' window cursors); the caller advances the other counters. Returns the
        ``(step, SWA pages)`` window frees (what ``swa_policy.run_batch`` gives the count path)."""
        return decode_jump_ids(self.allocator, reqs, ran, swa_policy, ctx)

    @property
    def recording(self) -> bool:
        return self.allocator.recorder is not None

    # ------------------------------------------------------------ sizes
    def sizes(self) -> dict[str, int]:
        t, a = self.tree, self.allocator
        return dict(
            full_evictable=t.full_evictable,
            full_protected=t.full_protected,
            swa_evictable=t.swa_evictable,
            swa_protected=t.swa_protected,
            full_available=a.full_available_size(),
            swa_available=a.swa_available_size(),
        )

    def idle_leak(self) -> str | None:
        """SGLang's pool-conservation check of a fully idle server (kvplan holds no session or
        uncached tokens; :func:`cache_counts.pool_leak_message`). SGLang's double-truncation bug
        breaks it; with ``SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_IDLE`` (on by default) SGLang
        then raises ValueError. The leak's message in SGLang's form, or None."""
        full_cap, swa_cap = self.capacity()
        return pool_leak_message(self.sizes(), full_cap, swa_cap, self.hybrid)

    # ------------------------------------------------------------ eviction
    def _evict(self, full_shortfall: int, swa_shortfall: int):
        """Run the tree generation's eviction for these shortfalls (tokens)."""
        raise NotImplementedError(f"{type(self).__name__} binds no tree generation")

    def evict_to_free_tokens(self, num_tokens: int) -> None:
        """``SWATokenToKVPoolAllocator.evict_to_free_tokens`` / 0.5.15 ``evict_from_tree_cache``."""
        a = self.allocator
        full_short = max(0, num_tokens - a.full_available_size())
        swa_short = max(0, num_tokens - a.swa_available_size())
        if full_short or swa_short:
            core = self._core
            # the compiled tree's eviction called in C, unless ``_evict`` was wrapped (step_replay)
            if core is not None and self._evict_in_core and "_evict" not in getattr(self, "__dict__"):  # noqa: B009
                full_ev, swa_ev = core.c_evict(full_short, swa_short)
            else:
                res = self._evict(full_short, swa_short)
                full_ev, swa_ev = res.full_evicted, res.swa_evicted
            self._ev_calls += 1
            self._ev_full_requested += full_short
            self._ev_swa_requested += swa_short
            self._ev_full_evicted += full_ev
            self._ev_swa_evicted += swa_ev

    @property
    def evictions(self) -> EvictionLog:
        """The cumulative evictions (a fresh :class:`EvictionLog` snapshot)."""
        full, swa = self._ev_full_evicted, self._ev_swa_evicted
        return EvictionLog(self._ev_calls, self._ev_full_requested, self._ev_swa_requested, full, swa)

    # ------------------------------------------------------------ match and allocation
    def match(self, req: ReqKV) -> None:
        """``common.py:match_kv_cache``: key = prompt (+ outputs), capped at len - 1, page-floored."""
        fill_len = req.prompt_len + req.num_outputs
        req.fill_len = fill_len  # Req.fill_ids lags output_ids until the next decode prepare
        req.extend_end = fill_len  # admission may shorten it to one chunk
        limit = max(0, fill_len - 1)
        n_pages = limit // self.page_size
        core = self._core
        if core is not None:  # the compiled tree: its match_prefix(pages[:n_pages]) as a tuple
            req.prefix_len, req.last_node, req.swa_branching_seqlen = core.c_match(req.pages, n_pages)
            return
        result = self.tree.match_prefix(req.pages[:n_pages])
        req.prefix_len = result.device_prefix_len
        req.last_node = result.last_node
        req.swa_branching_seqlen = result.swa_branching_seqlen

    def touch_prefix(self, pages: np.ndarray) -> int:
        """``touch_prefix`` / an uncapped ``match_kv_cache``: the tree walk of ``pages`` (bumps
        LRU recency, may split a node); the device match length in tokens."""
        return self.tree.match_prefix(pages).device_prefix_len

    def lock_prefix(self, req: ReqKV) -> None:
        """``PrefillAdder._commit_prefill_admission``: ``req.lock = tree.lock(req.last_node)``."""
        core = self._core
        req.lock = core.lock(req.last_node) if core is not None else self.tree.lock(req.last_node)

    def alloc_for_extend(self, reqs: list[ReqKV] | ReqKV) -> None:
        """``mem_cache/allocation.py:alloc_for_extend`` for one prefill batch.

        Each request extends from ``prefix_len`` to ``extend_end`` (a whole prompt, or one chunk
        of it); a partial last page is continued, as ``alloc_extend``'s ``last_loc`` does.
        """
        if isinstance(reqs, ReqKV):
            reqs = [reqs]
        p = self.page_size
        extend = pages = 0
        for r in reqs:
            end, pre = r.extend_end, r.prefix_len
            extend += end - pre
            pages += -(-end // p) - (-(-pre // p))
        # alloc_paged_token_slots_extend over-estimates one page per request
        self.evict_to_free_tokens(extend + len(reqs) * p if p > 1 else extend)
        if not self.allocator.can_alloc_pages(pages):
            raise OutOfMemory(
                f"prefill out of memory for {', '.join([r.rid for r in reqs])}: need {pages * p} tokens, "
                f"available full={self.allocator.full_available_size()} "
                f"swa={self.allocator.swa_available_size()}"
            )
        if self.allocator.recorder is None:
            self.allocator.alloc_pages(pages)
        else:
            alloc_extend_ids(self, reqs)
        for r in reqs:
            if not r.holds_kv:
                r.cache_protected_len = r.prefix_len
                r.holds_kv = True
            # ScheduleBatch.prepare_for_extend: cached_tokens += pre_len - already_computed
            if not r.retracted_stain:
                r.cached_tokens += r.prefix_len - r.already_computed
            r.already_computed = r.extend_end
            r.kv_allocated_len = r.extend_end

    def decode_pages_needed(self, reqs: list[ReqKV]) -> int:
        """``new_tokens_required_next_decode`` in pages: requests whose next token opens a page."""
        p = self.page_size
        n = 0
        for r in reqs:
            a = r.kv_allocated_len
            if a % p == 0:
                n += 1
        return n

    def check_decode_mem(self, reqs: list[ReqKV] | ReqKV) -> bool:
        """``ScheduleBatch.check_decode_mem`` -> ``check_decode_capacity`` (0.5.23)."""
        if isinstance(reqs, ReqKV):
            reqs = [reqs]
        need = self.decode_pages_needed(reqs) * self.page_size
        self.evict_to_free_tokens(need)
        return self.allocator.available_size() >= need

    def alloc_for_decode(self, reqs: list[ReqKV] | ReqKV) -> None:
        """``alloc_for_decode_default`` after ``maybe_evict_swa``: one slot per request."""
        if isinstance(reqs, ReqKV):
            reqs = [reqs]
        p = self.page_size
        self.evict_to_free_tokens(len(reqs) * p)  # bs * page_size (or bs at page_size 1)
        pages = self.decode_pages_needed(reqs)
        if not self.allocator.can_alloc_pages(pages):
            raise OutOfMemory(
                f"decode out of memory for {len(reqs)} requests: need {pages * p} tokens, "
                f"available full={self.allocator.full_available_size()} "
                f"swa={self.allocator.swa_available_size()}"
            )
        if self.allocator.recorder is None:
            self.allocator.alloc_pages(pages)
        else:
            alloc_decode_ids(self.allocator, reqs, p, [1] * len(reqs))
        for r in reqs:
            r.kv_allocated_len += 1
            r.decode_batch_idx += 1

    def quiet_decode_steps(self, req: ReqKV) -> int:
        """Decode steps from now whose evictions are certainly no-ops (both pools keep >= 1 page).

        Step s allocates a page iff ``(kv_allocated_len + s) % page_size == 0``; it evicts nothing
        while at least one page is free in each pool before its checks.
        """
        p = self.page_size
        free = min(self.allocator.full_free, self.allocator.swa_free)
        a = req.kv_allocated_len
        return max(0, p * (free - 1 + -(-a // p)) - a + 1)

    def fast_forward_decode(self, req: ReqKV, steps: int) -> None:
        """Apply ``steps`` quiet decode steps at once: page allocations and counters only."""
        p = self.page_size
        a = req.kv_allocated_len
        pages = -(-(a + steps) // p) - (-(-a // p))
        if self.allocator.recorder is None:
            self.allocator.alloc_pages(pages)
        else:
            alloc_decode_ids(self.allocator, [req], p, [steps])
        req.kv_allocated_len = a + steps
        req.decode_batch_idx += steps

    def _free_row_range(self, req: ReqKV, start: int, end: int) -> None:
        """Free the request's private slots ``[start, end)``; below its SWA cursor FULL only."""
        if end <= start:
            return
        p = self.page_size
        pages = -(-end // p) - start // p
        dead_lo = req.swa_dead_lo(p)
        dead_hi = max(req.swa_evicted_seqlen, dead_lo)
        lo = min(max(dead_lo, start), end)
        hi = min(max(dead_hi, start), end)
        dead_pages = (hi - lo) // p if hi > lo else 0
        if self.allocator.recorder is not None:
            free_row_ids(self.allocator, req, start // p, pages, lo // p, dead_pages)
            return
        self.allocator.free_full_pages(pages)
        self.allocator.free_swa_pages(pages - dead_pages)

    def release_without_insert(self, req: ReqKV) -> None:
        """``release_kv_cache(checkpoint=False)``: retraction / abort, nothing enters the tree."""
        if req.holds_kv:
            self._free_row_range(req, req.cache_protected_len, req.kv_allocated_len)
        core = self._core
        if core is not None:
            core.unlock(req.lock)
        else:
            self.tree.unlock(req.lock)
        req.lock = None
        req.holds_kv = False

    def retract(self, req: ReqKV, remaining: int) -> None:
        """``schedule_batch.release_req`` + ``Req.reset_for_retract``: back to the queue.

        The request keeps its output tokens; its next admission re-matches prompt ++ outputs.
        """
        self.release_without_insert(req)
        self.evict_to_free_tokens(remaining * RETRACT_DECODE_STEPS)
        req.kv_allocated_len = 0
        req.cache_protected_len = 0
        req.swa_evicted_seqlen = 0
        req.cache_inserted_len = 0
        req.prefix_len = 0
        req.already_computed = 0
        req.decode_batch_idx = 0
        req.swa_branching_seqlen = None
        req.last_node = None
        req.retracted_stain = True

    def private_tokens(self, req: ReqKV) -> tuple[int, int]:
        """(FULL, SWA) tokens the request holds outside the tree (invariants 10 and 11)."""
        return req.private_full_tokens(self.page_size), req.private_swa_tokens(self.page_size)

    # ------------------------------------------------------------ the scheduler's view
    # (simulator.radix.protocol.CacheController: everything the engine reads or calls)
    def capacity(self) -> tuple[int, int]:
        """(FULL, SWA) pool sizes in tokens (``size`` / ``size_swa``)."""
        a = self.allocator
        return a.full_capacity, a.swa_capacity

    def evictable_tokens(self) -> tuple[int, int]:
        """(FULL, SWA) tokens eviction could free: the tree's unlocked leaves' ledgers
        (``full_evictable_size`` / ``swa_evictable_size``). The one definition of evictable."""
        core = self._core
        if core is not None:
            return core.full_evictable, core.swa_evictable
        t = self.tree
        return t.full_evictable, t.swa_evictable

    def available_tokens(self) -> tuple[int, int]:
        """(FULL, SWA) free tokens (``full_available_size`` / ``swa_available_size``)."""
        a = self.allocator
        return a.full_available_size(), a.swa_available_size()

    def room_tokens(self) -> tuple[int, int]:
        """(FULL, SWA) tokens a batch may use counting what eviction would free:
        available + evictable (``PrefillAdder.rem_total_tokens`` before offsets)."""
        a = self.allocator
        p = a.page_size  # full_available_size() / swa_available_size(), inlined (a hot path)
        core = self._core
        if core is not None:
            full_ev, swa_ev = core.full_evictable, core.swa_evictable
        else:
            full_ev, swa_ev = self.tree.full_evictable, self.tree.swa_evictable
        return a.full_free * p + full_ev, a.swa_free * p + swa_ev

    def used_tokens(self) -> tuple[int, int]:
        """``#full token`` / ``#swa token`` of SGLang's logs: capacity - (available + evictable)."""
        a = self.allocator
        p = a.page_size  # the capacities and available sizes, inlined (a hot path)
        core = self._core
        if core is not None:
            full_ev, swa_ev = core.full_evictable, core.swa_evictable
        else:
            full_ev, swa_ev = self.tree.full_evictable, self.tree.swa_evictable
        full = a.full_pages * p - (a.full_free * p + full_ev)
        swa = a.swa_pages * p - (a.swa_free * p + swa_ev)
        return full, swa

    def free_pages(self) -> tuple[int, int]:
        """(FULL, SWA) free pages."""
        a = self.allocator
        return a.full_free, a.swa_free

    def lock_footprint(self, req: ReqKV) -> tuple[int, int]:
        """(FULL, SWA) evictable tokens that locking the request's matched prefix would protect
        (``PrefillAdder._lock_node``: its own prefix is no room for it)."""
        core = self._core
        if core is not None:
            return core.lock_footprint(req.last_node)
        return self.tree.lock_footprint(req.last_node)

    def can_alloc_pages(self, n: int) -> bool:
        return self.allocator.can_alloc_pages(n)

    def alloc_pages(self, n: int) -> None:
        """Allocate ``n`` pages in both pools (a fast-forwarded decode step's page opens)."""
        self.allocator.alloc_pages(n)

    def free_swa_pages(self, n: int) -> None:
        """Free ``n`` SWA pages (decode-time window eviction, applied by a fast-forward)."""
        self.allocator.free_swa_pages(n)

    def alloc_pages_and_free_swa(self, alloc: int, swa_freed: int) -> None:
        """Net allocations and window frees of a run of quiet decode steps, at once."""
        self.allocator.alloc_pages_and_free_swa(alloc, swa_freed)

    def free_group_begin(self) -> None:
        """``free_group_begin``: hold back the frees of one batch's result processing."""
        self.allocator.free_group_begin()

    def free_group_end(self) -> None:
        self.allocator.free_group_end()

    def decode_context(self, forward_ct: int) -> DecodeContext:
        """What a decode-time SWA-eviction policy sees at step ``forward_ct``; its frees go to
        this controller's allocator (``ScheduleBatch.maybe_evict_swa``)."""
        return DecodeContext(self.window, self.page_size, self.allocator, forward_ct)

    def tree_counters(self) -> dict[str, int]:
        """The tree's event counters, keys prefixed ``tree_``."""
        return {f"tree_{k}": v for k, v in vars(self.tree.counters).items()}

    def eviction_counts(self) -> dict[str, int]:
        return dict(vars(self.evictions))

    def tree_stats(self) -> dict:
        return self.tree.stats()

    def check_invariants(self, running) -> None:
        """``simulator.invariants.check_invariants`` on this controller and ``running``."""
        from simulator.invariants import check_invariants

        check_invariants(self, running)


class UnifiedSWACache(SWACacheController):
    """``UnifiedRadixCache`` (mem_cache/unified_radix_cache.py) with FULL + SWA components."""

    decode_memory_check = True

    def __init__(self, allocator: SWAKVAllocator, window: int, eviction_order) -> None:
        super().__init__(allocator, window)
        self.tree = UnifiedSWARadixTree(allocator.page_size, window, allocator, eviction_order)
        self._core = compiled_core(self.tree)
        self._evict_in_core = type(self)._evict is UnifiedSWACache._evict

    def _split_at_prompt(self, req: ReqKV, aligned: int) -> None:
        """``UnifiedRadixCache.checkpoint_into_tree`` with the FULL component alone: a second
        insert of the page-aligned prompt splits the cached path at the prompt's end, so eviction
        can drop output KV and keep the prompt. The boundary is usually a node end already; not
        when a request finishes on its prefill result with its overlap decode slot committed, or
        a re-prefill checkpoints prompt + outputs at once. That insert adds nothing: it walks the
        path, splits, and touches it, which is what a match of the prompt does here."""
        p = self.page_size
        prompt_pages = req.prompt_len // p
        if 0 < prompt_pages * p < aligned:
            self.tree.match_prefix(req.pages[:prompt_pages])

    def _evict(self, full_shortfall: int, swa_shortfall: int):
        return self.tree.evict_for_alloc(full_shortfall, swa_shortfall)

    def _free_out_of_window(self, req: ReqKV, pre_len: int) -> None:
        free_out_of_window_0523(req, pre_len, self.window, self.page_size, self.allocator, 1)

    def checkpoint(self, req: ReqKV, up_to: int, finished: bool, relock: bool = True) -> None:
        """``UnifiedRadixCache.checkpoint_into_tree``: insert, re-point the row, move the lock.

        ``relock=False`` (used by ``release``) drops the old lock without taking the new one
        that release would drop again at once: a lock/unlock pair changes no counter or set.
        """
        p = self.page_size
        effective = up_to
        branching = None
        br = req.swa_branching_seqlen
        # SWAComponent.prepare_for_caching_req: first insert stops at the SWA branching point
        if br is not None and br > req.cache_protected_len and br <= up_to:
            effective = br
            branching = br
        if not finished:
            # SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS: free the chunk's old SWA first
            self._free_out_of_window(req, effective - 1)
        if effective <= 0:
            return
        aligned = effective // p * p  # floor_page, inlined (a hot path)
        rows = req.kv_pages
        core = self._core
        n_pages = aligned // p
        held = req.last_node if req.lock is not None else None
        values = None if rows is None else rows[:n_pages]
        cached, inserted, evicted = req.cache_protected_len, req.cache_inserted_len, req.swa_evicted_seqlen
        if core is not None:  # the compiled tree reads pages[:n_pages] without a slice
            _, target = core.c_insert(req.pages, n_pages, cached, inserted, evicted, 0, held, values, req.rid)
        else:
            key = req.pages[:n_pages]
            _, target = self.tree.insert(key, cached, inserted, evicted, 0, held, values, req.rid)
        if rows is not None:  # the row now points at the tree's pages (req_to_token rewrite)
            req.kv_pages = np.concatenate([self.tree.path_values(target), rows[aligned // p :]])
        req.cache_inserted_len = max(req.cache_inserted_len, aligned)
        if self.split_at_prompt:
            self._split_at_prompt(req, aligned)
        if core is not None:
            core.unlock(req.lock)
            req.lock = core.lock(target) if relock else None
        else:
            self.tree.unlock(req.lock)
            req.lock = self.tree.lock(target) if relock else None
        req.cache_protected_len = aligned
        req.last_node = target
        # SWAComponent.cleanup_after_caching_req
        if branching is not None and aligned >= branching:
            req.swa_branching_seqlen = None
            if not finished:
                self._free_out_of_window(req, min(req.fill_len, req.kv_allocated_len) - 1)

    def release(self, req: ReqKV, owned: int | None = None) -> None:
        """``common.py:release_kv_cache(checkpoint=True)`` for a finished request.

        ``owned`` is ``kv_committed_len`` (default: everything allocated). Slots allocated past
        it (overlap scheduling's extra step) are freed with the row
        (``_release_overallocated_kv_indices``).
        """
        if owned is None:
            owned = req.kv_allocated_len
        self.checkpoint(req, owned, finished=True, relock=False)
        self._free_row_range(req, req.cache_protected_len, req.kv_allocated_len)
        core = self._core
        if core is not None:
            core.unlock(req.lock)
        else:
            self.tree.unlock(req.lock)
        req.lock = None
        req.holds_kv = False


class LegacySWACache(SWACacheController):
    """``SWARadixCache`` of 0.5.9-0.5.15 (mem_cache/swa_radix_cache.py)."""

    def __init__(self, allocator: SWAKVAllocator, window: int, eviction_order=None) -> None:
        from simulator.radix.legacy import LegacySWARadixTree  # 0.5.9-0.5.15 only: loads on use (issue 14)

        super().__init__(allocator, window)
        self.tree = LegacySWARadixTree(allocator.page_size, window, allocator, eviction_order)

    def _evict(self, full_shortfall: int, swa_shortfall: int):
        return self.tree.evict(full_shortfall, swa_shortfall)

    def start_recording(self, need_sort: bool = False) -> MemoryOpExecutor:
        """Page ids follow SGLang 0.5.23's allocator and tree; the legacy tree keeps counts."""
        raise ConfigError("recording memory ops needs the unified tree (--tombstone unified)")

    def checkpoint(self, req: ReqKV, up_to: int, finished: bool = False) -> None:
        """``SWARadixCache.cache_unfinished_req``: insert without a cursor, re-match, re-lock."""
        p = self.page_size
        aligned = floor_page(up_to, p)
        key = req.pages[: aligned // p]
        self.tree.insert(key, req.cache_protected_len, 0)
        result = self.tree.match_prefix(key)
        assert result.device_prefix_len >= req.cache_protected_len
        # the re-match covers the whole insert (it healed every tombstone past the prefix)
        assert result.device_prefix_len == aligned, (result.device_prefix_len, aligned)
        req.cache_protected_len = result.device_prefix_len
        self.tree.unlock(req.lock)
        req.lock = self.tree.lock(result.last_node)
        req.last_node = result.last_node

    def release(self, req: ReqKV, owned: int | None = None) -> None:
        """``SWARadixCache.cache_finished_req``: insert with the cursor, free the tail, unlock.

        ``owned`` is ``kv_committed_len``; slots allocated past it are freed with the tail.
        """
        p = self.page_size
        if owned is None:
            owned = req.kv_allocated_len
        aligned = floor_page(owned, p)
        self.tree.insert(req.pages[: aligned // p], req.cache_protected_len, req.swa_evicted_seqlen)
        # kv_indices[page_aligned_len:] -> free(): FULL and SWA of the partial tail page
        self._free_row_range(req, max(aligned, req.cache_protected_len), req.kv_allocated_len)
        req.cache_protected_len = aligned
        self.tree.unlock(req.lock)
        req.lock = None
        req.holds_kv = False


def make_cache(tombstone_policy, allocator: SWAKVAllocator, window: int, eviction_order):
    """Build the controller for a tombstoning policy (``policies.tombstone``)."""
    check_eviction_order(tombstone_policy, eviction_order.name)
    if tombstone_policy.generation == "unified":
        return UnifiedSWACache(allocator, window, eviction_order)
    if tombstone_policy.generation == "legacy":
        return LegacySWACache(allocator, window, eviction_order)
    raise KvplanError(f"unknown tree generation {tombstone_policy.generation!r}")


def build_controller(
    tombstone_policy,
    full_tokens: int,
    swa_tokens: int,
    page_size: int,
    window: int,
    eviction_order,
    hybrid: bool = True,
) -> SWACacheController:
    """The allocator and the controller over it, for a server (the engine sees only the latter).
    ``hybrid`` False: a full-attention model, whose 0.5.23 tree has the FULL component alone."""
    cache = make_cache(
        tombstone_policy, SWAKVAllocator(full_tokens, swa_tokens, page_size), window, eviction_order
    )
    if not hybrid:
        cache.hybrid = False
        if isinstance(cache, UnifiedSWACache):
            cache.split_at_prompt = True
    return cache
