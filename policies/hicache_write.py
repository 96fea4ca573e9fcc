"""HiCache write policies (``--hicache-write-policy``): when device KV is copied to the host.

SGLang 0.5.23: ``UnifiedRadixCache.init_hicache`` sets ``write_through_threshold`` (1 for
write_through, else 2); ``UnifiedTreeCore._inc_hit_count_and_check`` backs a node up once its
insert-hit count reaches it; write_back copies only when a device leaf is evicted
(``evict_device_leaf`` -> ``BackupKV``, run synchronously by ``_evict_components``).
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.registry import Registry

HICACHE_WRITE_POLICIES: Registry = Registry("hicache write")


@dataclass(frozen=True)
class WritePolicy:
    """What the tree needs to know about a write policy."""

    name: str
    write_through_threshold: int
    is_write_back: bool
    # unified_radix_cache.py:_tracks_write_through_unbacked_evictions (write_through only)
    tracks_unbacked_drops: bool


@HICACHE_WRITE_POLICIES.register("write_through", "back up every inserted node at once (SGLang default)")
def write_through() -> WritePolicy:
    return WritePolicy("write_through", 1, False, True)


@HICACHE_WRITE_POLICIES.register(
    "write_through_selective", "back up a node once two request inserts have covered it"
)
def write_through_selective() -> WritePolicy:
    return WritePolicy("write_through_selective", 2, False, False)


@HICACHE_WRITE_POLICIES.register("write_back", "back up a device leaf only when it is evicted")
def write_back() -> WritePolicy:
    return WritePolicy("write_back", 2, True, False)
