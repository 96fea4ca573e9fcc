"""Nodes, LRU lists and host pools of the HiCache tree (SGLang 0.5.23 ``UnifiedTreeNode`` with
FULL + SWA ``ComponentData``, ``UnifiedLRUList``, ``HostKVCache``), as counts.

A node's FULL and SWA values on device and on host are flags: the tree decides on lengths only.
While memory ops are recorded the nodes also carry page ids (``value``, ``fh_ids``,
``sh_ids``) and the host pools emit records.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.errors import ConfigError
from simulator.memory_ops import EVICTION, MemoryOp, OpKind


class HNode:
    """One radix node with device and host state for FULL and SWA.

    ``full`` / ``swa``: the component's device value exists; ``full_host`` / ``swa_host``: its
    host value exists (``backuped`` = ``full_host``; ``evicted`` = not ``full``).
    ``*_lock`` are ``lock_ref`` / ``host_lock_ref``; ``*_uuid`` the lock-segment boundaries
    (``metadata["uuid"]`` / ``["host_uuid"]``); ``wt_pending`` / ``lb_pending`` are
    ``write_through_pending_id`` / ``load_back_pending_id``.
    """

    __slots__ = (
        "id",
        "parent",
        "children",
        "key",
        "length",
        "full",
        "full_host",
        "swa",
        "swa_host",
        "full_lock",
        "swa_lock",
        "full_host_lock",
        "swa_host_lock",
        "swa_uuid",
        "swa_host_uuid",
        "full_host_uuid",
        "last_access_time",
        "creation_time",
        "hit_count",
        "priority",
        "wt_pending",
        "lb_pending",
        "d_prev",
        "d_next",
        "h_prev",
        "h_next",
        "in_d",
        "in_h",
        "value",
        "fh_ids",
        "sh_ids",
        "hash_value",
    )

    def __init__(self, node_id: int, key: np.ndarray, length: int, priority: int = 0) -> None:
        self.id = node_id
        self.parent: HNode | None = None
        self.children: dict[int, HNode] = {}
        self.key = key
        self.length = length
        self.full = self.full_host = self.swa = self.swa_host = False
        self.full_lock = self.swa_lock = self.full_host_lock = self.swa_host_lock = 0
        self.swa_uuid: int | None = None
        self.swa_host_uuid: int | None = None
        self.full_host_uuid: int | None = None
        self.last_access_time = 0.0
        self.creation_time = 0.0
        self.hit_count = 0
        self.priority = priority
        self.wt_pending: int | None = None
        self.lb_pending: int | None = None
        self.d_prev = self.d_next = self.h_prev = self.h_next = None
        self.in_d = self.in_h = False
        # device FULL page ids (SGLang's node value; the SWA peers follow the allocator's
        # full-to-SWA mapping) and host page ids of the FULL / SWA host values, only while
        # recording memory ops
        self.value: np.ndarray | None = None
        self.fh_ids: np.ndarray | None = None
        self.sh_ids: np.ndarray | None = None
        # page hashes of the key (L3 storage keys), only while a storage tier is attached
        self.hash_value: list[int] | None = None

    def __lt__(self, other: HNode) -> bool:  # UnifiedTreeNode.__lt__: heap tie-break
        return self.last_access_time < other.last_access_time

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return (
            f"HNode({self.id}, len={self.length}, full={int(self.full)}/{int(self.full_host)}, "
            f"swa={int(self.swa)}/{int(self.swa_host)}, locks={self.full_lock},{self.swa_lock},"
            f"{self.full_host_lock},{self.swa_host_lock})"
        )


class HLRU:
    """``UnifiedLRUList`` for the SWA component on one tier: device (``tier="d"``, skips
    ``swa_lock``) or host (``tier="h"``, skips ``swa_host_lock``). Head side = MRU."""

    def __init__(self, tier: str) -> None:
        assert tier in ("d", "h")
        self._p, self._n, self._flag = f"{tier}_prev", f"{tier}_next", f"in_{tier}"
        self._lock = "swa_lock" if tier == "d" else "swa_host_lock"
        self.head = HNode(-1, np.empty(0, np.int64), 0)
        self.tail = HNode(-2, np.empty(0, np.int64), 0)
        setattr(self.head, self._n, self.tail)
        setattr(self.tail, self._p, self.head)

    def in_list(self, node: HNode | None) -> bool:
        return node is not None and getattr(node, self._flag)

    def _link_after(self, prev: HNode, node: HNode) -> None:
        nxt = getattr(prev, self._n)
        setattr(node, self._p, prev)
        setattr(node, self._n, nxt)
        setattr(nxt, self._p, node)
        setattr(prev, self._n, node)

    def _unlink(self, node: HNode) -> None:
        prev, nxt = getattr(node, self._p), getattr(node, self._n)
        setattr(prev, self._n, nxt)
        setattr(nxt, self._p, prev)
        setattr(node, self._p, None)
        setattr(node, self._n, None)

    def insert_mru(self, node: HNode) -> None:
        assert not getattr(node, self._flag)
        setattr(node, self._flag, True)
        self._link_after(self.head, node)

    def insert_after(self, prev: HNode, node: HNode) -> None:
        assert getattr(prev, self._flag) and not getattr(node, self._flag)
        setattr(node, self._flag, True)
        self._link_after(prev, node)

    def remove(self, node: HNode) -> None:
        assert getattr(node, self._flag)
        setattr(node, self._flag, False)
        self._unlink(node)

    def move_after(self, prev: HNode, node: HNode) -> None:
        if getattr(prev, self._n) is node:
            return
        self._unlink(node)
        self._link_after(prev, node)

    def prev_unlocked(self, node: HNode) -> HNode | None:
        """``get_prev_no_lock`` / ``get_prev_no_host_lock``."""
        x = getattr(node, self._p)
        while getattr(x, self._lock) > 0:
            x = getattr(x, self._p)
        return None if x is self.head else x

    def lru_unlocked(self) -> HNode | None:
        return self.prev_unlocked(self.tail)


_NO_IDS = np.empty(0, dtype=np.int64)


@dataclass
class HostPool:
    """``HostKVCache`` free-slot accounting of one host pool, in tokens (page-granular).

    While recording (``recorder`` set), allocations and frees are BACKUP_D2H / HOST_FREE
    records on host page ids (:class:`simulator.kv_pages.HostPageState`); ``pool`` is the
    records' pool index (0 FULL, 1 SWA)."""

    capacity: int
    page_size: int
    pool: int = 0

    def __post_init__(self) -> None:
        if self.capacity <= 0 or self.capacity % self.page_size:
            raise ConfigError(f"host pool of {self.capacity} tokens is not whole pages of {self.page_size}")
        self.free = self.capacity
        self.recorder = None

    def available_size(self) -> int:
        return self.free

    def used(self) -> int:
        return self.capacity - self.free

    def alloc(
        self, n: int, device: np.ndarray = _NO_IDS, kind: OpKind = OpKind.BACKUP_D2H
    ) -> np.ndarray | None:
        """``HostKVCache.alloc``: all or nothing; the host page ids (empty unless recording)
        or None. While recording, a ``kind`` record (a backup of the device FULL pages
        ``device``, or their SWA peers for the SWA pool)."""
        assert n % self.page_size == 0, n
        if n > self.free:
            return None
        self.free -= n
        if self.recorder is None or n == 0:
            return _NO_IDS
        rec = self.recorder
        op = rec.apply(MemoryOp(kind, rec.step, EVICTION, device, count=n // self.page_size, bound=self.pool))
        return op.host

    def release(self, n: int, ids: np.ndarray | None = None) -> None:
        self.free += n
        assert self.free <= self.capacity, "host pool over-freed"
        if self.recorder is not None and ids is not None and len(ids):
            rec = self.recorder
            rec.apply(MemoryOp(OpKind.HOST_FREE, rec.step, EVICTION, host=ids, bound=self.pool))

    def record(self, kind: OpKind, ids: np.ndarray | None, device: np.ndarray = _NO_IDS) -> MemoryOp | None:
        """A LOAD_H2D or DEMOTE record of host pages that stay allocated and the device pages
        it allocates or frees (recording only); the applied record."""
        if self.recorder is None:
            return None
        rec = self.recorder
        host = _NO_IDS if ids is None else ids
        return rec.apply(MemoryOp(kind, rec.step, EVICTION, device, host=host, bound=self.pool))


@dataclass
class HostLockReceipt:
    """What ``inc_host_lock_ref`` acquired: FULL host segment boundary and SWA host boundary."""

    node: HNode
    full_uuid: int | None
    swa_uuid: int | None
