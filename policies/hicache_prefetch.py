"""HiCache storage (L3) prefetch: whether a request's prefetch is issued (the gate) and when a
request waiting on it stops waiting (the termination policies, ``--hicache-storage-prefetch-policy``).

Pure functions and small policy objects the tree and the engine call; they hold no cache state.
SGLang 0.5.23: the gate is ``Scheduler._prefetch_kvcache`` (anchor backed up, fact 29 of
HICACHE.md) then ``UnifiedRadixCache.prefetch_from_storage`` (threshold, rate limit) and
``HiCacheController.prefetch_rate_limited``; termination is
``UnifiedRadixCache.check_prefetch_progress`` / ``_can_terminate_prefetch`` /
``_start_storage_prefetch_wait`` / ``_prefetch_deadline_expired``.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from dataclasses import dataclass

from policies.registry import Registry
from simulator.errors import ConfigError

PREFETCH_TERMINATION: Registry = Registry("HiCache prefetch termination")

# cache_controller.py (cache mode): prefetches may hold at most half the host pool, leaving the
# rest for write-through backups.
PREFETCH_CAPACITY_SHARE = 0.5


class GateDecision(str, enum.Enum):
    """What happens to a request's prefetch at queue entry (SGLang's outcome-stat names)."""

    ISSUED = "issued"
    ANCHOR_NOT_BACKED_UP = "declined_anchor_not_backed_up"
    TOO_SHORT = "declined_too_short"
    RATE_LIMITED = "declined_rate_limited"


def prefetch_capacity_limit(host_pool_tokens: int) -> int:
    """Tokens prefetches may occupy: ``int(0.5 x host pool size)`` (cache mode,
    HiCacheController.attach_storage_backend); ``host_pool_tokens`` is the anchor (full) host
    pool's capacity."""
    return int(PREFETCH_CAPACITY_SHARE * host_pool_tokens)


def prefetch_rate_limited(occupied_tokens: int, host_pool_tokens: int) -> bool:
    """HiCacheController.prefetch_rate_limited (cache mode): occupied >= the capacity limit.
    ``occupied_tokens`` is charged the whole requested span at issue and released when the
    prefetch ends."""
    return occupied_tokens >= prefetch_capacity_limit(host_pool_tokens)


def prefetch_span(new_tokens: int, page_size: int) -> int:
    """The tokens a prefetch asks storage for: the unmatched part, floored to whole pages
    (``RadixKey.page_aligned``)."""
    return new_tokens // page_size * page_size


def gate_prefetch(
    new_tokens: int,
    *,
    page_size: int,
    threshold: int,
    occupied_tokens: int,
    host_pool_tokens: int,
    anchor_backed_up: bool,
) -> GateDecision:
    """Whether a request entering the queue issues a prefetch of the ``new_tokens`` past its
    device + host match. ``anchor_backed_up``: the host anchor (``last_host_node``) is backed up
    or is the root. Checked in SGLang's order: anchor, length (< ``prefetch_threshold``
    declines), rate limit."""
    if not anchor_backed_up:
        return GateDecision.ANCHOR_NOT_BACKED_UP
    if prefetch_span(new_tokens, page_size) < threshold:
        return GateDecision.TOO_SHORT
    if prefetch_rate_limited(occupied_tokens, host_pool_tokens):
        return GateDecision.RATE_LIMITED
    return GateDecision.ISSUED


def effective_prefetch_threshold(
    threshold: int, host_memory_mode: str, window: int | None, page_size: int
) -> int:
    """storage_attachment.py::resolve_prefetch_threshold: in ``buffer_only`` mode the threshold
    is raised to one complete SWA window in whole pages (``full_window_pages x page_size``, with
    ``full_window_pages = ceil(window / page)``, components/swa.py); ``cache`` mode keeps it."""
    if host_memory_mode != "buffer_only" or window is None:
        return threshold
    return max(threshold, -(-window // page_size) * page_size)


def storage_hit_usable(hit_tokens: int, threshold: int) -> bool:
    """An L3 hit below ``prefetch_threshold`` is not read (``_drain_and_alloc_storage_hit``:
    "below-threshold hits are not worth the transfer")."""
    return hit_tokens >= threshold


@dataclass
class PrefetchProgress:
    """One ongoing prefetch as the termination policy sees it at an admission poll.

    ``requested_tokens`` is the span asked at issue; ``hit_tokens`` the L3 hit host slots were
    allocated for (None while the hit query is pending); ``completed_tokens`` what has landed in
    host memory; ``wait_started_s`` the time of the first poll that found it unfinished (set by
    :func:`poll_prefetch`)."""

    requested_tokens: int
    page_size: int
    hit_tokens: int | None = None
    completed_tokens: int = 0
    wait_started_s: float | None = None

    @property
    def complete(self) -> bool:
        """Every allocated page has landed (the operation has terminated by itself)."""
        return self.hit_tokens is not None and self.completed_tokens >= self.hit_tokens


class PrefetchTermination(ABC):
    """Decides whether a waiting request may stop waiting for an unfinished prefetch."""

    name = "base"

    @abstractmethod
    def can_terminate(self, progress: PrefetchProgress, now_s: float) -> bool:
        """_can_terminate_prefetch for a prefetch that has not finished by itself."""

    def deadline_s(self, progress: PrefetchProgress) -> float | None:
        """When (simulated seconds) a waiting request will be released even if the prefetch
        has not finished; None: never early. Lets an event-driven engine schedule the poll."""
        return None


@PREFETCH_TERMINATION.register("best_effort")
class BestEffort(PrefetchTermination):
    """Stop at the first poll: admit with whatever has landed."""

    name = "best_effort"

    def can_terminate(self, progress: PrefetchProgress, now_s: float) -> bool:
        return True


@PREFETCH_TERMINATION.register("wait_complete")
class WaitComplete(PrefetchTermination):
    """Never stop early: wait until every allocated page has landed."""

    name = "wait_complete"

    def can_terminate(self, progress: PrefetchProgress, now_s: float) -> bool:
        return False


@PREFETCH_TERMINATION.register("timeout")
class Timeout(PrefetchTermination):
    """Wait at most ``base + pages x page_size / 1024 x per_ki_token`` seconds from the first
    poll that found the prefetch unfinished (pages of the requested span)."""

    name = "timeout"

    def __init__(self, base_s: float = 1.0, per_ki_token_s: float = 0.25) -> None:
        if base_s < 0 or per_ki_token_s < 0:
            raise ConfigError("prefetch timeout knobs must be >= 0")
        self.base_s, self.per_ki_token_s = float(base_s), float(per_ki_token_s)

    def timeout_s(self, requested_tokens: int, page_size: int) -> float:
        """storage_attachment.py: per_page = page_size / 1024 x per_ki_token;
        _start_storage_prefetch_wait: base + (requested // page_size) x per_page."""
        pages = requested_tokens // page_size
        return self.base_s + pages * (page_size / 1024 * self.per_ki_token_s)

    def deadline_s(self, progress: PrefetchProgress) -> float | None:
        if progress.wait_started_s is None:
            return None
        return progress.wait_started_s + self.timeout_s(progress.requested_tokens, progress.page_size)

    def can_terminate(self, progress: PrefetchProgress, now_s: float) -> bool:
        # _prefetch_deadline_expired: landed KV is never cut; the clock starts at the first
        # blocked poll, and only a strictly later time expires it.
        if progress.complete:
            return False
        deadline = self.deadline_s(progress)
        return deadline is not None and now_s > deadline


class PollResult(str, enum.Enum):
    """An admission poll's verdict (check_prefetch_progress)."""

    DONE = "done"  # finished by itself: insert what landed, admit
    TERMINATED = "terminated"  # stopped early: insert what landed (may be nothing), admit
    WAIT = "wait"  # keep the request waiting


def poll_prefetch(policy: PrefetchTermination, progress: PrefetchProgress, now_s: float) -> PollResult:
    """UnifiedRadixCache.check_prefetch_progress for one ongoing prefetch: a finished one is
    done; an unfinished one is terminated if the policy allows, else the request waits and, at
    its first such poll, the timeout clock starts (``progress.wait_started_s``)."""
    if progress.complete:
        return PollResult.DONE
    if policy.can_terminate(progress, now_s):
        return PollResult.TERMINATED
    if progress.wait_started_s is None:
        progress.wait_started_s = now_s
    return PollResult.WAIT


def make_prefetch_policy(
    name: str, *, timeout_base_s: float = 1.0, per_ki_token_s: float = 0.25
) -> PrefetchTermination:
    """The registered policy ``name``; the timeout knobs apply to ``timeout`` only
    (``prefetch_timeout_base`` / ``prefetch_timeout_per_ki_token`` of the extra config)."""
    if name == "timeout":
        return PREFETCH_TERMINATION.create(name, base_s=timeout_base_s, per_ki_token_s=per_ki_token_s)
    return PREFETCH_TERMINATION.create(name)
