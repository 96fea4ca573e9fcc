"""The cache controller's bookkeeping that is not on the hot path: its eviction log and the
idle pool-conservation message (:mod:`simulator.radix.cache` keeps the counts as integers)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class EvictionLog:
    """Mirrors the oracle's pass-through counter around ``evict_for_alloc``."""

    calls: int = 0
    full_requested: int = 0
    swa_requested: int = 0
    full_evicted: int = 0
    swa_evicted: int = 0


def pool_leak_message(sizes: dict[str, int], full_cap: int, swa_cap: int, hybrid: bool) -> str | None:
    """SGLang's pool-conservation check of a fully idle server (``Scheduler.on_idle`` ->
    ``SchedulerInvariantChecker._check_all_pools``, managers/scheduler_components/
    invariant_checker.py): available + evictable + protected must be each pool's size, FULL
    and, on a hybrid model, SWA. The leak's message in SGLang's form, or None (checked before
    any text is formatted: an idle server asks often and almost never leaks)."""
    pools = [("full", full_cap)] + ([("swa", swa_cap)] if hybrid else [])
    if all(
        sizes[f"{n}_available"] + sizes[f"{n}_evictable"] + sizes[f"{n}_protected"] == total
        for n, total in pools
    ):
        return None
    parts = []
    for name, total in pools:
        avail, ev, prot = sizes[f"{name}_available"], sizes[f"{name}_evictable"], sizes[f"{name}_protected"]
        parts.append(
            f"[{name}] total={total}, available={avail}, evictable={ev}, protected={prot}, "
            "session_held=0, uncached=0"
        )
    return "pool memory leak detected! " + "\n".join(parts)
