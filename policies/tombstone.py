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
from simulator.errors import ConfigError

TOMBSTONING: Registry = Registry("tombstoning")


@dataclass(frozen=True)
class TombstonePolicy:
    """A tree generation and the FULL eviction orders it can honour (``None``: every one)."""

    name: str
    generation: str
    eviction_orders: tuple[str, ...] | None


@TOMBSTONING.register("legacy", "SWARadixCache up to 0.5.15: tombstone leaves deleted with FULL KV")
def _legacy() -> TombstonePolicy:
    # 0.5.15 swa_radix_cache.py: SWARadixCache.evict walks its FULL LRU list from the tail and
    # takes no eviction policy at all, so only LRU order is what SGLang did there.
    return TombstonePolicy("legacy", "legacy", ("lru",))


@TOMBSTONING.register("unified", "0.5.23 UnifiedRadixCache: leaves survive on FULL KV alone")
def _unified() -> TombstonePolicy:
    return TombstonePolicy("unified", "unified", None)


def check_eviction_order(policy: TombstonePolicy, order_name: str) -> None:
    """Refuse an eviction order the tree generation would silently ignore."""
    supported = policy.eviction_orders
    if supported is not None and order_name not in supported:
        raise ConfigError(
            f"--radix-eviction-policy {order_name!r} cannot be honoured by --tombstone {policy.name}: "
            f"the {policy.generation} tree (SGLang's SWARadixCache) evicts FULL KV in "
            f"{' / '.join(supported)} order only; use --radix-eviction-policy "
            f"{' or '.join(supported)}, or --tombstone unified"
        )
