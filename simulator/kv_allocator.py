"""Page-count model of SGLang's ``SWATokenToKVPoolAllocator`` (srt/mem_cache/allocator/swa.py).

SGLang keeps two independent paged allocators, one for the full-attention pool and one for the
SWA pool, and charges *both* for every newly computed token. The cache decisions only depend on
how many pages are free in each, never on which physical slot a token landed in, so we keep two
counters of free pages instead of slot tensors. Page 0 of each pool is SGLang's padding sink and
is never handed out, so a pool of ``size`` tokens has ``size // page_size`` usable pages
(``PagedTokenToKVPoolAllocator``: free pages ``1..num_pages``).

When recording (:meth:`SWAKVAllocator.start_recording`) the allocator also keeps real page
ids (:mod:`simulator.kv_pages`, SGLang's free-list order) and the decision sites hand it
records (:meth:`SWAKVAllocator.apply_op`) instead of counts; the counters move the same way.
"""

from __future__ import annotations

import numpy as np

from simulator.errors import ConfigError
from simulator.kv_pages import SWAPageState
from simulator.memory_ops import FREES_FULL, FREES_SWA, MemoryOp, MemoryOpExecutor, OpKind

_EMPTY = np.empty(0, dtype=np.int64)


class AllocatorStats:
    """Cumulative page traffic, for counters and the GPU replay op log.

    A plain class, not a dataclass: the compiled build makes it a C struct (kv_allocator.pxd)."""

    def __init__(
        self,
        full_pages_allocated: int = 0,
        swa_pages_allocated: int = 0,
        full_pages_freed: int = 0,
        swa_pages_freed: int = 0,
    ) -> None:
        self.full_pages_allocated = full_pages_allocated
        self.swa_pages_allocated = swa_pages_allocated
        self.full_pages_freed = full_pages_freed
        self.swa_pages_freed = swa_pages_freed

    def __repr__(self) -> str:
        return (
            f"AllocatorStats(full_pages_allocated={self.full_pages_allocated}, "
            f"swa_pages_allocated={self.swa_pages_allocated}, "
            f"full_pages_freed={self.full_pages_freed}, swa_pages_freed={self.swa_pages_freed})"
        )


class SWAKVAllocator:
    """Free-page counters of the full and the SWA pool, in SGLang's token units.

    ``full_tokens`` / ``swa_tokens`` are the allocator sizes (``size`` / ``size_swa``). A plain
    class, not a dataclass: the compiled build makes it a cdef class with C counters
    (kv_allocator.pxd), since its frees and allocations run on every scheduler step.
    """

    def __init__(
        self, full_tokens: int, swa_tokens: int, page_size: int = 1, stats: AllocatorStats | None = None
    ) -> None:
        self.full_tokens = full_tokens
        self.swa_tokens = swa_tokens
        self.page_size = page_size
        self.stats = AllocatorStats() if stats is None else stats
        self.__post_init__()

    def __repr__(self) -> str:
        return (
            f"SWAKVAllocator(full_tokens={self.full_tokens}, swa_tokens={self.swa_tokens}, "
            f"page_size={self.page_size}, stats={self.stats!r})"
        )

    def __post_init__(self) -> None:
        """Check the sizes and set the counters (a hook subclasses extend, as the dataclass had)."""
        if self.page_size < 1:
            raise ConfigError(f"page_size must be >= 1, got {self.page_size}")
        if self.full_tokens < self.page_size or self.swa_tokens < self.page_size:
            raise ConfigError(
                f"pools must hold at least one page: full={self.full_tokens}, "
                f"swa={self.swa_tokens}, page_size={self.page_size}"
            )
        self.full_pages = self.full_tokens // self.page_size
        self.swa_pages = self.swa_tokens // self.page_size
        self.full_free = self.full_pages
        self.swa_free = self.swa_pages
        # free_group_begin/end: frees are held back and become available at the group's end
        self._in_group = False
        self._pending_full = 0
        self._pending_swa = 0
        # page ids and the record stream, only while recording (None: counts only)
        self.recorder: MemoryOpExecutor | None = None

    # -- recording ---------------------------------------------------------------------------
    def start_recording(self, need_sort: bool = False) -> MemoryOpExecutor:
        """Keep real page ids from here on and record every memory operation.

        Must start on empty pools: page ids cannot be invented for KV that is already held.
        ``need_sort`` is SGLang's (true under PD disaggregation).
        """
        if self.full_free != self.full_pages or self.swa_free != self.swa_pages or self._in_group:
            raise ConfigError("recording must start before the first allocation")
        pages = SWAPageState(self.full_pages, self.swa_pages, self.page_size, need_sort)
        self.recorder = MemoryOpExecutor(pages)
        return self.recorder

    def apply_op(self, kind: OpKind, reason: str, full: np.ndarray | None = None, **fields) -> MemoryOp:
        """Apply one decision through the executor and move the counters as the count API
        would; returns the applied record (page ids resolved)."""
        rec = self.recorder
        op = rec.apply(MemoryOp(kind, rec.step, reason, _EMPTY if full is None else full, **fields))
        if kind == OpKind.ALLOC:
            self.alloc_pages(len(op.full))
        else:
            if kind in FREES_FULL:
                self.free_full_pages(len(op.full))
            if kind in FREES_SWA:
                self.free_swa_pages(len(op.swa))
        return op

    def record_window_free(self, req, lo: int, hi: int, pre_len: int) -> None:
        """A request frees the SWA peers of its row tokens ``[lo, hi)`` (page-aligned) behind
        its window at decode position ``pre_len`` (``free_swa_segment``); recording only."""
        p = self.page_size
        self.apply_op(OpKind.SWA_WINDOW_FREE, req.rid, req.kv_pages[lo // p : hi // p])

    # -- sizes, as SGLang reports them (tokens) --------------------------------------------
    @property
    def full_capacity(self) -> int:
        return self.full_pages * self.page_size

    @property
    def swa_capacity(self) -> int:
        return self.swa_pages * self.page_size

    def full_available_size(self) -> int:
        return self.full_free * self.page_size

    def swa_available_size(self) -> int:
        return self.swa_free * self.page_size

    def available_size(self) -> int:
        # SWATokenToKVPoolAllocator.available_size: min of both pools.
        return min(self.full_available_size(), self.swa_available_size())

    # -- allocation: both pools move in step (alloc_extend / alloc_decode) -------------------
    def can_alloc_pages(self, n: int) -> bool:
        # SWATokenToKVPoolAllocator.new_pages_available
        return n <= self.full_free and n <= self.swa_free

    def alloc_pages(self, n: int) -> None:
        assert n >= 0 and self.can_alloc_pages(n), (n, self.full_free, self.swa_free)
        self.full_free -= n
        self.swa_free -= n
        self.stats.full_pages_allocated += n
        self.stats.swa_pages_allocated += n

    def alloc_pages_and_free_swa(self, alloc: int, swa_freed: int) -> None:
        """Net effect of a run of decode steps that allocate ``alloc`` pages in both pools and
        free ``swa_freed`` SWA pages by window eviction, interleaved (pages freed late in the
        run may have been allocated early in it), for the simulator's decode fast-forward."""
        assert alloc >= 0 and swa_freed >= 0 and not self._in_group
        if self.recorder is not None:
            raise ConfigError("recording memory ops: decode jumps go through cache.record_decode_jump")
        self.full_free -= alloc
        self.swa_free += swa_freed - alloc
        assert 0 <= self.full_free and 0 <= self.swa_free <= self.swa_pages, (self.full_free, self.swa_free)
        self.stats.full_pages_allocated += alloc
        self.stats.swa_pages_allocated += alloc
        self.stats.swa_pages_freed += swa_freed

    # -- frees (free_full_segment / free_swa_segment / free) -------------------------------
    def free_full_pages(self, n: int) -> None:
        assert n >= 0
        self.stats.full_pages_freed += n
        if self._in_group:
            self._pending_full += n
            return
        self.full_free += n
        assert self.full_free <= self.full_pages, "full pool over-freed"

    def free_swa_pages(self, n: int) -> None:
        assert n >= 0
        self.stats.swa_pages_freed += n
        if self._in_group:
            self._pending_swa += n
            return
        self.swa_free += n
        assert self.swa_free <= self.swa_pages, "SWA pool over-freed"

    # -- batching (SWATokenToKVPoolAllocator.free_group_begin / free_group_end) --------------
    def free_group_begin(self) -> None:
        """The scheduler groups the frees of one batch's result processing."""
        assert not self._in_group, "nested free group"
        if self.recorder is not None:
            self.apply_op(OpKind.GROUP_BEGIN, "")
        self._in_group = True

    def free_group_end(self) -> None:
        self._in_group = False
        full, swa = self._pending_full, self._pending_swa
        self._pending_full = self._pending_swa = 0
        if self.recorder is not None:
            self.apply_op(OpKind.GROUP_END, "")
        self.free_full_pages(full)
        self.free_swa_pages(swa)
        self.stats.full_pages_freed -= full  # counted when issued
        self.stats.swa_pages_freed -= swa

    @property
    def pending_free_tokens(self) -> tuple[int, int]:
        return self._pending_full * self.page_size, self._pending_swa * self.page_size
