"""Invariants of the HiCache tree, its device pools and its host pools.

SGLang asserts most of them in ``UnifiedTreeCore.sanity_check`` (unified_tree_core.py:3013-3270,
e.g. "SWA host needs FULL host except under write_back with FULL on device", "a backed-up node
has a backed-up parent unless write_back") and in the scheduler's pool conservation check
(``SchedulerInvariantChecker._check_pool_invariant``); the host-pool conservation is the
oracle's ``host_conservation``.
"""

from __future__ import annotations

from simulator.errors import KvplanError


class HiCacheInvariantError(KvplanError):
    """A HiCache tree or pool invariant does not hold."""


def _tree_problems(tree) -> list[str]:
    out: list[str] = []
    wb = tree.is_write_back
    sums = dict(fe=0, fp=0, se=0, sp=0, fh=0, sh=0)
    for x in tree.iter_nodes():
        if not (x.full or x.full_host):
            out.append(f"node {x.id} has FULL on neither tier")
        if x.swa and not x.full:
            out.append(f"node {x.id} has SWA on device without FULL")
        if x.swa_host and not x.full_host and not (wb and x.full):
            out.append(f"node {x.id} has SWA host without FULL host")
        parent = x.parent
        if not x.full and any(c.full for c in x.children.values()):
            out.append(f"evicted node {x.id} has a device child")
        if x.full_host and parent is not tree.root and not parent.full_host and not wb:
            out.append(f"backed-up node {x.id} under an unbacked parent")
        if min(x.full_lock, x.swa_lock, x.full_host_lock, x.swa_host_lock) < 0:
            out.append(f"node {x.id} has a negative lock")
        if x.in_d != x.swa:
            out.append(f"node {x.id}: SWA device LRU membership {x.in_d} but swa={x.swa}")
        # (swa.py:_commit_prefetch attaches a prefetched window to the host LRU even while a
        # storage backup holds the node's host lock)
        if x.in_h and (x.swa or not x.swa_host or (x.swa_host_lock and tree.storage is None)):
            out.append(f"node {x.id} in the SWA host LRU without being host-only and unlocked")
        if x.full:
            sums["fp" if x.full_lock else "fe"] += x.length
        if x.swa:
            sums["sp" if x.swa_lock else "se"] += x.length
        sums["fh"] += x.length * x.full_host
        sums["sh"] += x.length * x.swa_host
        if (x in tree.device_leaves) != tree._is_device_leaf(x):
            out.append(f"node {x.id}: device-leaf set disagrees with the predicate")
        if (x in tree.host_leaves) != tree._is_host_leaf(x):
            out.append(f"node {x.id}: host-leaf set disagrees with the predicate")
    ledgers = (tree.full_evictable, tree.full_protected, tree.swa_evictable, tree.swa_protected)
    if ledgers != (sums["fe"], sums["fp"], sums["se"], sums["sp"]):
        out.append(f"ledgers {ledgers} != tree sums {sums}")
    if tree.storage is not None:  # L3 staging and queued releases
        held_full, held_swa = tree.storage.held_tokens()
        sums["fh"] += held_full
        sums["sh"] += held_swa
    if tree.host_full.used() != sums["fh"] or tree.host_swa.used() != sums["sh"]:
        out.append(
            f"host pools used ({tree.host_full.used()}, {tree.host_swa.used()}) != tree host tokens "
            f"({sums['fh']}, {sums['sh']})"
        )
    return out


def _page_id_problems(tree) -> list[str]:
    """Recording: every node carries page ids exactly for the values it has (device FULL pages,
    whose SWA peers are mapped iff it has SWA on device; FULL and SWA host pages), one per page."""
    out: list[str] = []
    p = tree.page_size
    f2s = tree.allocator.recorder.pages.full_to_swa
    for x in tree.iter_nodes():
        for name, has, ids in (("device", x.full, x.value), ("FULL host", x.full_host, x.fh_ids)):
            if has != (ids is not None) or (ids is not None and len(ids) * p != x.length):
                out.append(f"node {x.id}: {name} page ids do not match its value")
        if x.swa_host != (x.sh_ids is not None) or (x.sh_ids is not None and len(x.sh_ids) * p != x.length):
            out.append(f"node {x.id}: SWA host page ids do not match its value")
        if x.value is not None and bool((f2s[x.value] > 0).all()) != x.swa:
            out.append(f"node {x.id}: SWA peers mapped {bool((f2s[x.value] > 0).any())} but swa={x.swa}")
    return out


def check_hicache_invariants(cache, running) -> None:
    """Raise :class:`HiCacheInvariantError` listing every violated invariant."""
    tree, alloc = cache.tree, cache.allocator
    problems = _tree_problems(tree)
    if alloc.recorder is not None and tree.host_full.recorder is not None:
        problems += _page_id_problems(tree)
    pend_full, pend_swa = alloc.pending_free_tokens
    priv_full = sum(cache.private_tokens(r)[0] for r in running)
    priv_swa = sum(cache.private_tokens(r)[1] for r in running)
    tree_full = tree.full_evictable + tree.full_protected
    tree_swa = tree.swa_evictable + tree.swa_protected
    if alloc.full_available_size() + pend_full + tree_full + priv_full != alloc.full_capacity:
        problems.append(
            f"FULL pool: available {alloc.full_available_size()} + pending {pend_full} + tree "
            f"{tree_full} + private {priv_full} != {alloc.full_capacity}"
        )
    if alloc.swa_available_size() + pend_swa + tree_swa + priv_swa != alloc.swa_capacity:
        problems.append(
            f"SWA pool: available {alloc.swa_available_size()} + pending {pend_swa} + tree "
            f"{tree_swa} + private {priv_swa} != {alloc.swa_capacity}"
        )
    if problems:
        raise HiCacheInvariantError("; ".join(problems[:10]))
