"""Per-request KV bookkeeping, named after SGLang's ``Req.kv`` fields (managers/schedule_batch.py)."""

from __future__ import annotations

import numpy as np


def ceil_page(n: int, page_size: int) -> int:
    return -(-n // page_size) * page_size


def floor_page(n: int, page_size: int) -> int:
    return n // page_size * page_size


#: ReqKV's attributes, in its constructor's order (a copy passes ``getattr`` of each).
REQ_KV_FIELDS = (
    "rid",
    "pages",
    "prompt_len",
    "output_len",
    "kv_allocated_len",
    "cache_protected_len",
    "swa_evicted_seqlen",
    "cache_inserted_len",
    "prefix_len",
    "cached_tokens",
    "num_outputs",
    "fill_len",
    "extend_end",
    "already_computed",
    "retracted_stain",
    "decode_batch_idx",
    "swa_branching_seqlen",
    "last_node",
    "lock",
    "holds_kv",
    "kv_pages",
    "best_match_node",
    "host_hit_length",
    "swa_host_hit_length",
    "host_loaded_length",
)


class LockReceipt:
    """What ``lock()`` returned and ``unlock()`` must replay (SGLang's ``TreeLock``).

    A plain class, not a dataclass: request_kv.pxd makes it a ``cdef class`` in the compiled
    build. Equality is identity (it was ``eq=False``)."""

    __slots__ = ("node", "swa_uuid")

    def __init__(self, node: object, swa_uuid: int | None) -> None:
        self.node = node
        self.swa_uuid = swa_uuid

    def __repr__(self) -> str:
        return f"LockReceipt(node={self.node!r}, swa_uuid={self.swa_uuid!r})"


class ReqKV:
    """A request's row in the req-to-token pool, reduced to the lengths that drive the cache.

    Positions ``[0, cache_protected_len)`` point at tree-owned slots; the request privately owns
    ``[cache_protected_len, kv_allocated_len)`` in both pools, minus the SWA slots of
    ``[swa_dead_lo, swa_evicted_seqlen)`` it already freed by window eviction.
    ``pages`` are the page ids of the request's whole token sequence (prompt ++ output).
    ``kv_pages`` (only while recording memory ops) are the FULL page ids its row points at,
    one per page of ``[0, kv_allocated_len)`` (SGLang's ``req_to_token`` row, in pages).

    A plain class with an explicit ``__init__`` (the keywords and defaults of the former
    dataclass): request_kv.pxd makes it a ``cdef class`` with C-typed lengths in the compiled
    build, so the engine reads them without dictionary look-ups. Equality is identity.
    """

    __slots__ = REQ_KV_FIELDS

    def __init__(
        self,
        rid: str,
        pages: np.ndarray,
        prompt_len: int,
        output_len: int,
        kv_allocated_len: int = 0,
        cache_protected_len: int = 0,
        swa_evicted_seqlen: int = 0,
        cache_inserted_len: int = 0,
        prefix_len: int = 0,
        cached_tokens: int = 0,
        num_outputs: int = 0,
        fill_len: int = 0,
        extend_end: int = 0,
        already_computed: int = 0,
        retracted_stain: bool = False,
        decode_batch_idx: int = 0,
        swa_branching_seqlen: int | None = None,
        last_node: object = None,
        lock: LockReceipt | None = None,
        holds_kv: bool = False,
        kv_pages: np.ndarray | None = None,
        best_match_node: object = None,
        host_hit_length: int = 0,
        swa_host_hit_length: int = 0,
        host_loaded_length: int = 0,
    ) -> None:
        self.rid = rid
        self.pages = pages
        self.prompt_len = prompt_len
        self.output_len = output_len
        self.kv_allocated_len = kv_allocated_len
        self.cache_protected_len = cache_protected_len
        self.swa_evicted_seqlen = swa_evicted_seqlen
        self.cache_inserted_len = cache_inserted_len
        self.prefix_len = prefix_len
        self.cached_tokens = cached_tokens
        self.num_outputs = num_outputs
        self.fill_len = fill_len
        self.extend_end = extend_end
        self.already_computed = already_computed
        self.retracted_stain = retracted_stain
        self.decode_batch_idx = decode_batch_idx
        self.swa_branching_seqlen = swa_branching_seqlen
        self.last_node = last_node
        self.lock = lock
        self.holds_kv = holds_kv
        self.kv_pages = kv_pages
        # HiCache (simulator/radix/hicache_replay.py): the host-inclusive match of
        # UnifiedRadixCache.match_prefix and the load-back's result (Req.host_hit_length, ...)
        self.best_match_node = best_match_node
        self.host_hit_length = host_hit_length
        self.swa_host_hit_length = swa_host_hit_length
        self.host_loaded_length = host_loaded_length

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(rid={self.rid!r}, prompt_len={self.prompt_len}, "
            f"output_len={self.output_len}, num_outputs={self.num_outputs}, "
            f"kv_allocated_len={self.kv_allocated_len}, cache_protected_len={self.cache_protected_len})"
        )

    @property
    def seqlen(self) -> int:
        """``len(origin_input_ids) + len(output_ids)``."""
        return self.prompt_len + self.num_outputs

    def swa_dead_lo(self, page_size: int) -> int:
        # Req.kv.swa_dead_lo: no eviction floor for ordinary models.
        return self.cache_protected_len

    def private_full_tokens(self, page_size: int) -> int:
        return -(-self.kv_allocated_len // page_size) * page_size - self.cache_protected_len

    def private_swa_tokens(self, page_size: int) -> int:
        # pool_stats_observer.kv_private_swa_tokens
        dead = max(0, self.swa_evicted_seqlen - self.swa_dead_lo(page_size))
        return self.private_full_tokens(page_size) - dead
