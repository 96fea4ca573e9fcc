"""Prefill admission: which waiting requests the next prefill batch takes, and how much of each.

``schedule_policy.PrefillAdder`` with ``mem_cache/prefill_budget.SWAPrefillBudget`` (SGLang 0.5.23,
paths relative to ``python/sglang/srt/``): one adder per scheduling round holds the round's
budgets as fields (remaining input tokens, remaining chunk, the FULL and SWA offsets reserved by
what it admitted so far) and returns a :class:`PrefillBatch`; the scheduler applies it to its
queues. The queue order is ``SchedulePolicy.calc_priority`` (:func:`calc_priority`).
"""

from __future__ import annotations

import math

from simulator.engine.server_state import CLIP_MAX_NEW_TOKENS, LPM_FALLBACK_QUEUE_LEN, ServerReq
from simulator.radix.protocol import CacheController

NO_CHUNK_LIMIT = 1 << 60  # chunked prefill off (chunked_prefill_size <= 0)
# schedule_policy.py IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD / _DEPRIORITIZE_THRESHOLD
IN_BATCH_CHECK = 32
IN_BATCH_DEPRIORITIZE = 32
# AddReqResult (schedule_policy.py)
CONTINUE, NO_TOKEN, OTHER = "continue", "no_token", "other"


def calc_priority(waiting: list[ServerReq], policy: str, cache: CacheController) -> list[ServerReq] | None:
    """``SchedulePolicy.calc_priority``: FCFS keeps arrival order; LPM (at most
    ``LPM_FALLBACK_QUEUE_LEN`` waiting, else FCFS) matches every waiting request and sorts by
    longest match, stable, with the in-batch deprioritised last. Returns LPM's deprioritised
    requests (None when LPM did not run)."""
    if policy != "lpm" or len(waiting) > LPM_FALLBACK_QUEUE_LEN:
        return None
    matched: dict[int, int] = {}
    deprioritized = _compute_prefix_matches(waiting, cache, matched)
    # _sort_by_longest_prefix: num_matched_prefix_tokens (capped at len - 1), stable
    waiting.sort(key=lambda r: math.inf if id(r) in deprioritized else -matched[id(r)])
    return [r for r in waiting if id(r) in deprioritized]


def _compute_prefix_matches(
    waiting: list[ServerReq], cache: CacheController, matched: dict[int, int]
) -> set[int]:
    """``SchedulePolicy._compute_prefix_matches``: match each waiting request against the cache
    (its capped match length into ``matched``);
    one with at most ``IN_BATCH_CHECK`` cached tokens that shares at least ``IN_BATCH_DEPRIORITIZE``
    tokens with an earlier such request (not itself deprioritised) waits for it, so the shared
    prefix is computed once. SGLang's in-batch radix tree only has to answer "at least 32 tokens
    in common", which the first 32 tokens' pages decide (exact for page sizes dividing 32; one
    page for larger pages)."""
    p = cache.page_size
    k = max(1, IN_BATCH_DEPRIORITIZE // p)
    seen: set[tuple] = set()
    out: set[int] = set()
    for r in waiting:
        # match_kv_cache on the whole prompt ++ outputs (no len - 1 cap here)
        fill = r.prompt_len + r.num_outputs
        n_pages = fill // p
        prefix = cache.touch_prefix(r.pages[:n_pages])
        matched[id(r)] = min(prefix, fill - 1)
        if prefix > IN_BATCH_CHECK:
            continue
        if n_pages < k:
            continue  # too short to share IN_BATCH_DEPRIORITIZE tokens with anyone
        head = tuple(r.pages[:k].tolist())
        if head in seen:
            out.add(id(r))
        else:
            seen.add(head)
    return out


def running_offset(running: list[ServerReq], new_token_ratio: float) -> float:
    """``PrefillAdder._get_running_request_total_token_offset``: tokens the running decodes may
    still take (ignore_eos requests at ratio 1)."""
    total = 0.0
    clip = CLIP_MAX_NEW_TOKENS
    for r in running:
        ratio = 1.0 if r.ignore_eos else new_token_ratio
        total += min(r.max_new_tokens - r.num_outputs, clip) * ratio
    return total


def estimate_swa_tokens(extend: int, max_new: int, chunk_limit: int | None, window: int, page: int) -> int:
    """``prefill_budget.estimate_swa_kv_tokens``: the SWA a request may hold at its peak."""
    allocated = extend
    if chunk_limit is not None:
        limit = chunk_limit
        allocated = min(extend, limit)
    return max(allocated - window, 0) + min(extend + max_new, window) + page


def chunk_continuation(
    req: ServerReq, cache: CacheController, chunked_prefill_size: int, offset: float
) -> tuple[int, bool]:
    """(tokens, truncated) of the chunked request's next chunk (``PrefillAdder.add_chunked_req``):
    the chunk budget, capped by FULL room less ``offset`` and SWA room less a page."""
    p = cache.page_size
    avail = chunked_prefill_size if chunked_prefill_size > 0 else NO_CHUNK_LIMIT
    full_room, swa_room = cache.room_tokens()
    avail = min(avail, int(full_room - offset), int(swa_room) - p)
    if avail <= 0:
        return 0, True
    cand = req.fill_len - req.prefix_len
    return min(cand, avail), cand > avail


class PrefillBatch:
    """What one round admitted: the forward's requests in order (a chunk continuation first),
    those taken from the waiting queue, and the request left mid-prompt (or None).
    A plain class (a ``cdef class`` in the compiled build, admission.pxd)."""

    __slots__ = ("reqs", "admitted", "chunked", "batch_is_full")

    def __init__(
        self,
        reqs: list[ServerReq] | None = None,
        admitted: list[ServerReq] | None = None,
        chunked: ServerReq | None = None,
        batch_is_full: bool = False,
    ) -> None:
        self.reqs = [] if reqs is None else reqs
        self.admitted = [] if admitted is None else admitted
        self.chunked = chunked
        self.batch_is_full = batch_is_full


class PrefillAdder:
    """One scheduling round's admission budgets (``PrefillAdder`` + ``SWAPrefillBudget``).
    A ``cdef class`` with C-typed budgets in the compiled build (admission.pxd); the HiCache
    adder derives from it in Python."""

    __slots__ = (
        "cache",
        "page_size",
        "window",
        "max_running",
        "num_running",
        "chunked_prefill_size",
        "rem_chunk",
        "rem_input",
        "total_offset",
        "current_offset",
        "swa_offset",
        "batch",
        "swa_events",
    )

    def __init__(
        self,
        cache: CacheController,
        *,
        max_running: int,
        chunked_prefill_size: int,
        max_prefill_tokens: int,
        running: list[ServerReq],
        new_token_ratio: float,
    ) -> None:
        self._init(cache, max_running, chunked_prefill_size, max_prefill_tokens, running, new_token_ratio)

    def _init(
        self,
        cache: CacheController,
        max_running: int,
        chunked_prefill_size: int,
        max_prefill_tokens: int,
        running: list[ServerReq],
        new_token_ratio: float,
    ) -> None:
        """``__init__``'s work, with positional arguments (:func:`new_prefill_adder`)."""
        self.cache = cache
        self.page_size = cache.page_size
        self.window = cache.window
        self.max_running = max_running
        self.num_running = len(running)
        self.chunked_prefill_size = chunked_prefill_size
        self.rem_chunk: int | None = chunked_prefill_size if chunked_prefill_size > 0 else None
        self.rem_input = max_prefill_tokens
        self.total_offset = running_offset(running, new_token_ratio)  # rem_total_token_offset
        self.current_offset = 0.0  # cur_rem_token_offset
        self.swa_offset = 0  # SWAPrefillBudget's reservation
        self.batch = PrefillBatch()
        # SWA budget decisions (chunk capped, blocked, continuation cut), as the scheduler
        # oracle's pass-through probes count them
        self.swa_events = [0, 0, 0]

    def _reserve(self, extend: int, max_new: int) -> None:
        """``_update_prefill_budget``: charge an admitted extend (page-rounded) to every budget."""
        p = self.page_size
        ext = -(-extend // p) * p
        self.total_offset += ext + p + max_new
        self.current_offset += ext + p
        self.swa_offset += estimate_swa_tokens(ext, max_new, self.rem_chunk, self.window, p)
        self.rem_input -= ext
        if self.rem_chunk is not None:
            self.rem_chunk -= ext

    def add_chunked_req(self, req: ServerReq) -> ServerReq | None:
        """``add_chunked_req``: continue the chunked request; returns it while still truncated."""
        new_len, truncated = chunk_continuation(req, self.cache, self.chunked_prefill_size, self.total_offset)
        if self.chunked_prefill_size > 0:  # the SWA side cut the continuation
            full_room, swa_room = self.cache.room_tokens()
            full_only = min(self.chunked_prefill_size, int(full_room - self.total_offset))
            if full_only > 0 and int(swa_room) - self.page_size < full_only:
                self.swa_events[2] += 1
        if new_len > 0:
            req.extend_end = req.prefix_len + new_len
            self.batch.reqs.append(req)
            self._reserve(new_len, 0 if truncated else min(req.max_new_tokens, CLIP_MAX_NEW_TOKENS))
            if not truncated:
                return None
        return req

    def add_waiting(self, waiting: list[ServerReq], rows: int | None = None) -> PrefillBatch:
        """Admit from ``waiting`` (already ordered) until a budget runs out; the queue itself is
        left to the caller. ``rows``: request rows the batch may take (default: the
        ``max_running_requests`` room). ``batch.batch_is_full`` tells the scheduler to stop
        trying (``_get_new_batch_prefill_raw``'s admission loop, managers/scheduler.py)."""
        if rows is None:
            rows = self.max_running - self.num_running
        batch = self.batch
        for req in waiting:
            if self.budget_state() == OTHER:
                break
            if len(batch.reqs) >= rows:
                batch.batch_is_full = True
                break
            res = self.add_one_req(req)
            if res != CONTINUE:
                if res == NO_TOKEN:  # only when something can be served
                    batch.batch_is_full = bool(batch.reqs) or self.num_running > 0
                break
        return batch

    def budget_state(self) -> str:
        """``PrefillAdder.budget_state``: NO_TOKEN when a memory budget is spent, OTHER when the
        input or chunk budget is, else CONTINUE."""
        full_room, swa_room = self.cache.room_tokens()
        if not (
            full_room - self.total_offset > 0
            and full_room - self.current_offset > 0
            and swa_room - self.swa_offset > 0
        ):
            return NO_TOKEN
        if self.rem_input <= 0 or (self.rem_chunk is not None and self.rem_chunk <= 0):
            return OTHER
        return CONTINUE

    def _chunk_limit(
        self, extend: int, max_new: int, probe_swa: int, swa_room: int
    ) -> tuple[bool, int | None]:
        """``SWAPrefillBudget``: (fits, chunk limit) for the request's SWA footprint; a request
        whose footprint exceeds the whole pool gets a smaller chunk (``_chunk_cap``)."""
        p, w, chunk_limit = self.page_size, self.window, self.rem_chunk
        needed = estimate_swa_tokens(-(-extend // p) * p, max_new, chunk_limit, w, p)
        rem_swa = swa_room - self.swa_offset - probe_swa
        if needed < rem_swa:
            return True, chunk_limit
        if chunk_limit is not None and needed >= self.cache.capacity()[1]:
            # a smaller chunk bounds the transient SWA footprint
            headroom = estimate_swa_tokens(0, max_new, None, w, p)
            cap = max(0, int(rem_swa) - headroom) // p * p
            if cap > 0:
                if cap < chunk_limit:
                    self.swa_events[0] += 1
                return True, min(chunk_limit, cap)
        self.swa_events[1] += 1
        return False, chunk_limit

    def add_one_req(self, req: ServerReq) -> str:
        """``PrefillAdder.add_one_req``: NO_TOKEN or OTHER when ``req`` is refused, else the
        budget state after admitting it (which decides whether the next request is tried)."""
        p, clip = self.page_size, CLIP_MAX_NEW_TOKENS
        self.cache.match(req)  # init_next_round_input
        max_new = min(max(req.max_new_tokens - req.num_outputs, 0), clip)
        extend = req.fill_len - req.prefix_len
        # _lock_node: the check runs with the matched prefix locked, so the request's own
        # prefix does not count as evictable room for it
        probe_full, probe_swa = self.cache.lock_footprint(req)
        full_room, swa_room = self.cache.room_tokens()
        if not extend + max_new + p < full_room - self.total_offset - probe_full:
            return NO_TOKEN
        ok, chunk_limit = self._chunk_limit(extend, max_new, probe_swa, swa_room)
        if not ok:
            return NO_TOKEN  # wait until memory frees up
        ext_paged = -(-extend // p) * p
        if chunk_limit is None and self.batch.reqs and ext_paged >= self.rem_input:
            return OTHER
        chunked = chunk_limit is not None and ext_paged > chunk_limit
        if chunked:  # truncate to whole pages of the chunk budget
            end = (req.prefix_len + chunk_limit // p * p) // p * p
            extend = end - req.prefix_len
            if extend <= 0:
                return OTHER
        # _commit_prefill_admission
        req.extend_end = req.prefix_len + extend
        self.cache.lock_prefix(req)
        self.batch.reqs.append(req)
        self.batch.admitted.append(req)
        self._reserve(extend, 0 if chunked else min(req.max_new_tokens, clip))
        if chunked:
            self.batch.chunked = req
        return self.budget_state()


def new_prefill_adder(
    cache: CacheController,
    max_running: int,
    chunked_prefill_size: int,
    max_prefill_tokens: int,
    running: list[ServerReq],
    new_token_ratio: float,
) -> PrefillAdder:
    """``PrefillAdder(cache, max_running=..., ...)`` without keyword parsing: the scheduler
    builds one per scheduling round."""
    adder = PrefillAdder.__new__(PrefillAdder)
    adder._init(cache, max_running, chunked_prefill_size, max_prefill_tokens, running, new_token_ratio)
    return adder
