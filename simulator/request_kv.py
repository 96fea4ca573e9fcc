"""Per-request KV bookkeeping, named after SGLang's ``Req.kv`` fields (managers/schedule_batch.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def ceil_page(n: int, page_size: int) -> int:
    return -(-n // page_size) * page_size


def floor_page(n: int, page_size: int) -> int:
    return n // page_size * page_size


@dataclass(eq=False)
class LockReceipt:
    """What ``lock()`` returned and ``unlock()`` must replay (SGLang's ``TreeLock``)."""

    node: object
    swa_uuid: int | None


@dataclass(eq=False, slots=True)
class ReqKV:
    """A request's row in the req-to-token pool, reduced to the lengths that drive the cache.

    Positions ``[0, cache_protected_len)`` point at tree-owned slots; the request privately owns
    ``[cache_protected_len, kv_allocated_len)`` in both pools, minus the SWA slots of
    ``[swa_dead_lo, swa_evicted_seqlen)`` it already freed by window eviction.
    ``pages`` are the page ids of the request's whole token sequence (prompt ++ output).
    ``kv_pages`` (only while recording memory ops) are the FULL page ids its row points at,
    one per page of ``[0, kv_allocated_len)`` (SGLang's ``req_to_token`` row, in pages).
    """

    rid: str
    pages: np.ndarray
    prompt_len: int
    output_len: int
    kv_allocated_len: int = 0
    cache_protected_len: int = 0
    swa_evicted_seqlen: int = 0
    cache_inserted_len: int = 0
    prefix_len: int = 0
    cached_tokens: int = 0
    num_outputs: int = 0
    fill_len: int = 0
    extend_end: int = 0
    already_computed: int = 0
    retracted_stain: bool = False
    decode_batch_idx: int = 0
    swa_branching_seqlen: int | None = None
    last_node: object = None
    lock: LockReceipt | None = None
    holds_kv: bool = False
    kv_pages: np.ndarray | None = None
    # HiCache (simulator/radix/hicache_replay.py): the host-inclusive match of
    # UnifiedRadixCache.match_prefix and the load-back's result (Req.host_hit_length, ...)
    best_match_node: object = None
    host_hit_length: int = 0
    swa_host_hit_length: int = 0
    host_loaded_length: int = 0

    @property
    def seqlen(self) -> int:
        """``len(origin_input_ids) + len(output_ids)``."""
        return self.prompt_len + self.num_outputs

    def swa_dead_lo(self, page_size: int) -> int:
        # Req.kv.swa_dead_lo: no eviction floor for ordinary models.
        return self.cache_protected_len

    def private_full_tokens(self, page_size: int) -> int:
        return ceil_page(self.kv_allocated_len, page_size) - self.cache_protected_len

    def private_swa_tokens(self, page_size: int) -> int:
        # pool_stats_observer.kv_private_swa_tokens
        dead = max(0, self.swa_evicted_seqlen - self.swa_dead_lo(page_size))
        return self.private_full_tokens(page_size) - dead
