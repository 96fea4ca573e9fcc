"""Tree nodes and the intrusive LRU list shared by both tree generations."""

from __future__ import annotations

import numpy as np


class TreeNode:
    """One radix-tree node: a run of whole pages with FULL and (maybe) SWA KV on device.

    ``key`` holds page ids (token ids when page_size == 1); ``length`` is in tokens.
    A node always has FULL KV on device (no HiCache tier yet); ``swa`` is False for an
    SWA tombstone. ``swa_uuid`` is the boundary receipt of a window lock (SGLang keeps it in
    ``component_data[SWA].metadata["uuid"]``).
    """

    __slots__ = (
        "id",
        "parent",
        "children",
        "key",
        "length",
        "swa",
        "full_lock",
        "swa_lock",
        "swa_uuid",
        "last_access_time",
        "creation_time",
        "hit_count",
        "priority",
        "lru_prev",
        "lru_next",
        "full_prev",
        "full_next",
        "in_swa_lru",
        "in_full_lru",
        "value",
    )

    def __init__(self, node_id: int, key: np.ndarray, length: int, priority: int = 0) -> None:
        self.id = node_id
        self.parent: TreeNode | None = None
        self.children: dict[int, TreeNode] = {}
        self.key = key
        self.length = length
        self.swa = False
        self.full_lock = 0
        self.swa_lock = 0
        self.swa_uuid: int | None = None
        self.last_access_time = 0.0
        self.creation_time = 0.0
        self.hit_count = 0
        self.priority = priority
        self.lru_prev: TreeNode | None = None
        self.lru_next: TreeNode | None = None
        self.full_prev: TreeNode | None = None
        self.full_next: TreeNode | None = None
        self.in_swa_lru = False
        self.in_full_lru = False
        # FULL page ids of the node's KV (SGLang's node value), only while recording memory
        # ops; its SWA peers are the allocator's full-to-SWA mapping (0 for a tombstone)
        self.value: np.ndarray | None = None

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return (
            f"TreeNode(id={self.id}, len={self.length}, swa={self.swa}, "
            f"locks=({self.full_lock},{self.swa_lock}), children={len(self.children)})"
        )


class LRUList:
    """Doubly linked LRU list with sentinels; head side = most recently used.

    Mirrors SGLang's ``LRUList`` (unified_tree_core.py and legacy swa_radix_cache.py): the
    eviction walk starts at the tail and skips nodes whose lock counter is positive.
    ``kind`` selects which pointer pair and lock counter the list uses ("swa" or "full").
    """

    def __init__(self, kind: str) -> None:
        assert kind in ("swa", "full")
        self.kind = kind
        self.head = TreeNode(-1, np.empty(0, np.int64), 0)
        self.tail = TreeNode(-2, np.empty(0, np.int64), 0)
        self._prev_attr = "lru_prev" if kind == "swa" else "full_prev"
        self._next_attr = "lru_next" if kind == "swa" else "full_next"
        self._flag = "in_swa_lru" if kind == "swa" else "in_full_lru"
        self._lock = "swa_lock" if kind == "swa" else "full_lock"
        setattr(self.head, self._next_attr, self.tail)
        setattr(self.tail, self._prev_attr, self.head)
        self.size = 0

    def in_list(self, node: TreeNode | None) -> bool:
        return node is not None and getattr(node, self._flag)

    def _link_after(self, prev: TreeNode, node: TreeNode) -> None:
        nxt = getattr(prev, self._next_attr)
        setattr(node, self._prev_attr, prev)
        setattr(node, self._next_attr, nxt)
        setattr(nxt, self._prev_attr, node)
        setattr(prev, self._next_attr, node)

    def _unlink(self, node: TreeNode) -> None:
        prev = getattr(node, self._prev_attr)
        nxt = getattr(node, self._next_attr)
        setattr(prev, self._next_attr, nxt)
        setattr(nxt, self._prev_attr, prev)
        setattr(node, self._prev_attr, None)
        setattr(node, self._next_attr, None)

    def insert_mru(self, node: TreeNode) -> None:
        assert not getattr(node, self._flag)
        setattr(node, self._flag, True)
        self.size += 1
        self._link_after(self.head, node)

    def insert_after(self, prev: TreeNode, node: TreeNode) -> None:
        """Place ``node`` just behind ``prev`` (i.e. slightly less recently used)."""
        assert getattr(prev, self._flag) and not getattr(node, self._flag)
        setattr(node, self._flag, True)
        self.size += 1
        self._link_after(prev, node)

    def remove(self, node: TreeNode) -> None:
        assert getattr(node, self._flag)
        setattr(node, self._flag, False)
        self.size -= 1
        self._unlink(node)

    def reset_mru(self, node: TreeNode) -> None:
        assert getattr(node, self._flag)
        self._unlink(node)
        self._link_after(self.head, node)

    def move_after(self, prev: TreeNode, node: TreeNode) -> None:
        """Re-link ``node`` just behind ``prev`` (the window refresh's hot path: one method,
        and nothing to do when it is there already)."""
        pa, na = self._prev_attr, self._next_attr
        nxt = getattr(prev, na)
        if nxt is node:
            return
        assert getattr(node, self._flag)
        before, after = getattr(node, pa), getattr(node, na)
        setattr(before, na, after)
        setattr(after, pa, before)
        setattr(node, pa, prev)
        setattr(node, na, nxt)
        setattr(nxt, pa, node)
        setattr(prev, na, node)

    def prev_unlocked(self, node: TreeNode) -> TreeNode | None:
        """The next more-recently-used node with a zero lock counter (``get_prev_no_lock``)."""
        x = getattr(node, self._prev_attr)
        while getattr(x, self._lock) > 0:
            x = getattr(x, self._prev_attr)
        return None if x is self.head else x

    def lru_unlocked(self) -> TreeNode | None:
        return self.prev_unlocked(self.tail)

    def prev_unlocked_leaf(self, node: TreeNode) -> TreeNode | None:
        """Legacy ``get_prev_leaf_no_lock``: also skip nodes that have children."""
        x = getattr(node, self._prev_attr)
        while getattr(x, self._lock) > 0 or x.children:
            x = getattr(x, self._prev_attr)
        return None if x is self.head else x

    def lru_unlocked_leaf(self) -> TreeNode | None:
        return self.prev_unlocked_leaf(self.tail)

    def iter_mru(self):
        x = getattr(self.head, self._next_attr)
        while x is not self.tail:
            yield x
            x = getattr(x, self._next_attr)


class SwaLRUList(LRUList):
    """``LRUList("swa")`` with the pointer pair and flag named directly: the same list, without a
    ``getattr``/``setattr`` per link on the SWA window refresh and eviction hot paths."""

    def __init__(self) -> None:
        super().__init__("swa")

    def in_list(self, node: TreeNode | None) -> bool:
        return node is not None and node.in_swa_lru

    def _link_after(self, prev: TreeNode, node: TreeNode) -> None:
        nxt = prev.lru_next
        node.lru_prev = prev
        node.lru_next = nxt
        nxt.lru_prev = node  # type: ignore[union-attr]
        prev.lru_next = node

    def _unlink(self, node: TreeNode) -> None:
        prev, nxt = node.lru_prev, node.lru_next
        prev.lru_next = nxt  # type: ignore[union-attr]
        nxt.lru_prev = prev  # type: ignore[union-attr]
        node.lru_prev = None
        node.lru_next = None

    def insert_mru(self, node: TreeNode) -> None:
        assert not node.in_swa_lru
        node.in_swa_lru = True
        self.size += 1
        self._link_after(self.head, node)

    def insert_after(self, prev: TreeNode, node: TreeNode) -> None:
        assert prev.in_swa_lru and not node.in_swa_lru
        node.in_swa_lru = True
        self.size += 1
        self._link_after(prev, node)

    def remove(self, node: TreeNode) -> None:
        assert node.in_swa_lru
        node.in_swa_lru = False
        self.size -= 1
        self._unlink(node)

    def move_after(self, prev: TreeNode, node: TreeNode) -> None:
        nxt = prev.lru_next
        if nxt is node:
            return
        assert node.in_swa_lru
        before, after = node.lru_prev, node.lru_next
        before.lru_next = after  # type: ignore[union-attr]
        after.lru_prev = before  # type: ignore[union-attr]
        node.lru_prev = prev
        node.lru_next = nxt
        nxt.lru_prev = node  # type: ignore[union-attr]
        prev.lru_next = node

    def prev_unlocked(self, node: TreeNode) -> TreeNode | None:
        x = node.lru_prev
        while x.swa_lock > 0:  # type: ignore[union-attr]
            x = x.lru_prev  # type: ignore[union-attr]
        return None if x is self.head else x


def match_pages(node_key: np.ndarray, key: np.ndarray, offset: int) -> int:
    """Number of leading pages of ``node_key`` equal to ``key[offset:]``."""
    n = min(len(node_key), len(key) - offset)
    if n <= 0:
        return 0
    a = node_key[:n]
    b = key[offset : offset + n]
    if a.tobytes() == b.tobytes():  # the common case: the whole span matches (one memcmp)
        return n
    if n <= 8:
        i = 0
        while i < n and a[i] == b[i]:
            i += 1
        return i
    neq = np.flatnonzero(a != b)
    return int(neq[0]) if len(neq) else n


def lock_footprint(root: TreeNode, node: TreeNode, window: int) -> tuple[int, int]:
    """(FULL, SWA) evictable tokens a lock of ``node`` would protect, without locking.

    PrefillAdder checks a request's budget under a temporary lock of its matched prefix;
    evictable minus this footprint is exactly what that check sees. Both tree generations lock
    the whole FULL path and the SWA nodes of the last ``window`` tokens, so they share this.
    """
    full = 0
    cur = node
    while cur is not root:
        if cur.full_lock == 0:
            full += cur.length
        cur = cur.parent
    swa = 0
    covered = 0
    cur = node
    while cur is not root and covered < window:
        if cur.swa_lock == 0 and cur.swa:
            swa += cur.length
        covered += cur.length
        cur = cur.parent
    return full, swa


def iter_subtree(root: TreeNode):
    """Every node below ``root`` (depth first, ``root`` itself excluded)."""
    stack = list(root.children.values())
    while stack:
        x = stack.pop()
        yield x
        stack.extend(x.children.values())


def subtree_stats(root: TreeNode) -> dict:
    """Node, leaf and tombstone counts and FULL / SWA tokens below ``root``."""
    nodes = leaves = tombstones = tomb_tokens = full_tokens = swa_tokens = 0
    for x in iter_subtree(root):
        nodes += 1
        leaves += not x.children
        full_tokens += x.length
        if x.swa:
            swa_tokens += x.length
        else:
            tombstones += 1
            tomb_tokens += x.length
    return dict(
        nodes=nodes,
        leaves=leaves,
        tombstones=tombstones,
        tombstone_tokens=tomb_tokens,
        full_tokens=full_tokens,
        swa_tokens=swa_tokens,
    )
