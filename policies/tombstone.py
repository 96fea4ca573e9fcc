"""SWA tombstoning policies: which generation of SGLang's hybrid tree semantics to follow.

The two differ in where SWA tombstones appear and what happens to them (reference §2.2, §2.10):
``legacy`` is ``SWARadixCache`` (0.5.9-0.5.15): tombstoned leaves are deleted with their FULL KV,
one FULL LRU list spans all nodes, and unfinished checkpoints keep the prompt's SWA.
``unified`` is 0.5.23's ``UnifiedRadixCache``: leaves survive on FULL alone, FULL eviction uses a
D-leaf heap ordered by the eviction policy, and each unfinished checkpoint frees the prompt's
out-of-window SWA first (``SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS``).
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.registry import Registry

TOMBSTONING: Registry = Registry("tombstoning")


@dataclass(frozen=True)
class TombstonePolicy:
    name: str
    generation: str
    free_out_of_window_at_checkpoint: bool
    leaves_survive_on_full: bool
    decode_memory_check: bool


@TOMBSTONING.register("legacy", "SWARadixCache up to 0.5.15: tombstone leaves deleted with FULL KV")
def _legacy() -> TombstonePolicy:
    return TombstonePolicy("legacy", "legacy", False, False, False)


@TOMBSTONING.register("unified", "0.5.23 UnifiedRadixCache: leaves survive on FULL KV alone")
def _unified() -> TombstonePolicy:
    return TombstonePolicy("unified", "unified", True, True, True)
