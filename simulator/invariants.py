"""SGLang's sanity checks, run against our tree, pools and running requests.

Tree checks follow ``UnifiedTreeCore.sanity_check`` (and the legacy ``SWARadixCache`` LRU check);
pool conservation follows ``scheduler_components/invariant_checker.py``. Items refer to the
numbered list in reference §8. All violations are collected and raised once.
"""

from __future__ import annotations

from collections.abc import Iterable

from simulator.errors import InternalError


class InvariantViolation(InternalError):
    def __init__(self, errors: list[str] | str) -> None:
        # simpy re-creates an exception raised inside a process from its args (the joined
        # message): take that string as one error, not as a list of characters
        errors = [errors] if isinstance(errors, str) else errors
        self.errors = errors
        super().__init__(
            "; ".join(errors[:10]) + (f" (+{len(errors) - 10} more)" if len(errors) > 10 else "")
        )


def collect_violations(cache, running: Iterable = ()) -> list[str]:
    """Every violated invariant of ``cache`` and its ``running`` requests, as readable lines."""
    tree = cache.tree
    errors: list[str] = []
    all_nodes, swa_nodes = _check_nodes(tree, cache.page_size, errors)
    _check_lists(tree, all_nodes, swa_nodes, errors)
    _check_pools(cache, running, errors)
    return errors


def _check_nodes(tree, p: int, errors: list[str]) -> tuple[set, set]:
    """Items 1, 5 and 8: root, links, keys, lock counters and the four size ledgers.
    Returns (every node but the root, the SWA-live ones)."""
    root = tree.root
    if root.parent is not None or root.full_lock <= 0:
        errors.append("root must be parentless with a positive FULL lock")
    full_ev = full_pr = swa_ev = swa_pr = 0
    swa_nodes = set()
    all_nodes = set()
    stack = [root]
    while stack:
        x = stack.pop()
        for k, c in x.children.items():
            if c.parent is not x:
                errors.append(f"node {c.id}: parent pointer mismatch")
            if len(c.key) == 0 or int(c.key[0]) != k:
                errors.append(f"node {c.id}: child key mismatch")
            if c.length != len(c.key) * p:
                errors.append(f"node {c.id}: length {c.length} != {len(c.key)} pages")
            stack.append(c)
        if x is root:
            continue
        all_nodes.add(x)
        if x.full_lock < 0 or x.swa_lock < 0:
            errors.append(f"node {x.id}: negative lock")
        if x.full_lock < x.swa_lock:
            errors.append(f"node {x.id}: FULL lock {x.full_lock} < SWA lock {x.swa_lock}")
        if x.full_lock > 0:
            full_pr += x.length
        else:
            full_ev += x.length
        if x.swa:
            swa_nodes.add(x)
            if x.swa_lock > 0:
                swa_pr += x.length
            else:
                swa_ev += x.length
    for name, got, want in (
        ("full_evictable", tree.full_evictable, full_ev),
        ("full_protected", tree.full_protected, full_pr),
        ("swa_evictable", tree.swa_evictable, swa_ev),
        ("swa_protected", tree.swa_protected, swa_pr),
    ):
        if got != want:
            errors.append(f"{name} ledger {got} != recomputed {want}")
    return all_nodes, swa_nodes


def _check_lists(tree, all_nodes: set, swa_nodes: set, errors: list[str]) -> None:
    """Items 6 and 7: the SWA LRU holds exactly the SWA-live nodes (no cycles); the unified D-leaf
    set or the legacy FULL LRU is exact."""
    in_lru = set()
    for i, x in enumerate(tree.swa_lru.iter_mru()):
        if i > len(all_nodes) + 1:
            errors.append("SWA LRU has a cycle")
            break
        in_lru.add(x)
    if in_lru != swa_nodes or tree.swa_lru.size != len(swa_nodes):
        errors.append(f"SWA LRU membership: {len(in_lru)} listed vs {len(swa_nodes)} SWA-live nodes")
    if tree.generation == "unified":
        want_leaves = {x for x in all_nodes if not x.children and x.full_lock == 0 and x.swa_lock == 0}
        if tree.device_leaves != want_leaves:
            errors.append(f"D-leaf set: {len(tree.device_leaves)} listed vs {len(want_leaves)} actual leaves")
    else:
        listed = set(tree.full_lru.iter_mru())
        if listed != all_nodes:
            errors.append(f"FULL LRU membership: {len(listed)} listed vs {len(all_nodes)} nodes")


def _check_pools(cache, running: Iterable, errors: list[str]) -> None:
    """Items 10, 11 and 13-15: pool conservation and each running request's aligned cursors."""
    p = cache.page_size
    tree = cache.tree
    a = cache.allocator
    priv_full = priv_swa = 0
    for req in running:
        f, s = cache.private_tokens(req)
        priv_full += f
        priv_swa += s
        if req.cache_protected_len % p:
            errors.append(f"{req.rid}: cache_protected_len {req.cache_protected_len} not page aligned")
        if req.swa_evicted_seqlen % p:
            errors.append(f"{req.rid}: SWA cursor {req.swa_evicted_seqlen} not page aligned")
        if not 0 <= req.cache_protected_len <= req.kv_allocated_len:
            errors.append(
                f"{req.rid}: protected {req.cache_protected_len} > allocated {req.kv_allocated_len}"
            )
    full_sum = a.full_available_size() + tree.full_evictable + tree.full_protected + priv_full
    if full_sum != a.full_capacity:
        errors.append(f"FULL conservation: {full_sum} != capacity {a.full_capacity}")
    swa_sum = a.swa_available_size() + tree.swa_evictable + tree.swa_protected + priv_swa
    if swa_sum != a.swa_capacity:
        errors.append(f"SWA conservation: {swa_sum} != capacity {a.swa_capacity}")


def check_invariants(cache, running: Iterable = ()) -> None:
    errors = collect_violations(cache, running)
    if errors:
        raise InvariantViolation(errors)
