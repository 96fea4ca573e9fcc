"""What the unified and legacy trees return and count: match and eviction results, counters.

In a module of their own so that the compiled unified tree (``_core_tree.pyx``) and the
pure-Python one (:mod:`simulator.radix.unified`) share them without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class MatchResult:
    """``MatchResult`` fields the scheduler reads (base_prefix_cache.py)."""

    device_prefix_len: int
    last_node: Any
    full_kv_hit_length: int
    swa_branching_seqlen: int | None


@dataclass
class EvictResult:
    full_evicted: int = 0
    swa_evicted: int = 0


@dataclass
class TreeCounters:
    """Cumulative tree events, for metrics and for proving tests exercise each path."""

    match_calls: int = 0
    insert_calls: int = 0
    lock_calls: int = 0
    unlock_calls: int = 0
    evict_calls: int = 0
    full_evicted: int = 0
    swa_evicted: int = 0
    leaves_deleted: int = 0
    tombstones_created: int = 0
    tombstones_healed: int = 0
    tombstone_tokens_healed: int = 0
    splits: int = 0
