"""HiCache records executed on the replay's pools: data really moves between the device pools and
the host pools, in SGLang 0.5.23's order (``HybridCacheController.write`` / ``load``).

What each record does here (page ids come from the simulator's executor, as for every record):
- ``BACKUP_D2H``: copies the device pages (FULL pool: the FULL pages; SWA pool: their SWA peers)
  into the host pages the record allocated, every replayed layer, K and V, with the chosen
  transfer kernel (``UnifiedRadixCache.write_backup`` -> ``HybridCacheController.write`` ->
  ``backup_from_device_all_layer``);
- ``LOAD_H2D``: copies the host pages into the device pages the record allocated
  (``UnifiedRadixCache.load_back`` -> ``HybridCacheController.load`` ->
  ``load_to_device_per_layer``, all layers at once here);
- ``STORAGE_PREFETCH``: the L3 read lands in the host pages; the replay has no storage, so it
  writes a fresh tag there (the data a later load must bring back);
- ``DEMOTE`` and every other free: page ids only, and (``poison``) the freed device pages are
  overwritten with a poison tag, so that a load that did not copy shows up as lost data;
- ``HOST_FREE``: the host pages stop being checked (``UnifiedRadixCache.evict_host``).

The tags are :mod:`gpu_replay.replay_pools`' per-allocation serials: a loaded page must hold the
serial its host page was backed up (or prefetched) with, which the replay's check reads back.
"""

from __future__ import annotations

import numpy as np
import torch

from gpu_replay.replay_pools import ReplayPool, tag_values
from simulator.memory_ops import FREES_FULL, FREES_SWA, MemoryOp, OpKind

__all__ = ["HiCacheData", "POOL_OF_BOUND"]

POOL_OF_BOUND = ("full", "swa")  # a HiCache record's ``bound``: its host pool
POISON = -1  # the serial a freed, poisoned device page holds (never a live tag)


class HiCacheData:
    """The data side of HiCache records for one :class:`~gpu_replay.oplog_replay.OpLogReplay`."""

    def __init__(self, replay, poison: bool) -> None:
        self.replay = replay
        self.poison = poison
        self.movers: dict = {}

    def mover(self, name: str):
        if name not in self.movers:
            from gpu_replay.transfer import KVTransfer

            o, pool = self.replay.options, self.replay.pools[name]
            self.movers[name] = KVTransfer(pool.host, pool.dev, o.io_backend, o.impl)
        return self.movers[name]

    # ---- one applied record ----------------------------------------------------------------
    def apply(self, got: MemoryOp, row) -> None:
        """Move the data of an applied HiCache record (``got``: its page ids resolved)."""
        name = POOL_OF_BOUND[got.bound]
        pool = self.replay.pools.get(name)
        k = got.kind
        if k == OpKind.HOST_FREE:
            if pool is not None:
                pool.host_serial[got.host] = 0
            return
        if k == OpKind.STORAGE_PREFETCH:
            if pool is not None and len(got.host):
                self._prefetch(pool, got.host)
            return
        if k in (OpKind.BACKUP_D2H, OpKind.LOAD_H2D):
            dev = got.swa if got.bound == 1 else got.full
            if pool is not None and len(dev):
                self._copy(name, pool, dev, got.host, "d2h" if k == OpKind.BACKUP_D2H else "h2d", row)
            if k == OpKind.LOAD_H2D:
                self._account_load(got, pool)

    def _account_load(self, got: MemoryOp, pool: ReplayPool | None) -> None:
        live = self.replay.live
        if got.bound == 0:
            live.full[got.full] = True
            live.swa_serial_of_full[got.full] = 0
        else:
            live.swa[got.swa] = True
            if pool is not None:
                live.swa_serial_of_full[got.full] = pool.serial[got.swa]

    def _copy(
        self, name: str, pool: ReplayPool, dev: np.ndarray, host: np.ndarray, direction: str, row
    ) -> None:
        """One transfer call of every replayed layer, K and V, timed as a backup or a load."""
        o, page = self.replay.options, pool.geo.page_size
        idx_dev = pool.dev.k[0].device if o.io_backend == "kernel" else "cpu"
        hi = (torch.from_numpy(host)[:, None] * page + torch.arange(page)).flatten().to(idx_dev)
        di = (torch.from_numpy(dev)[:, None] * page + torch.arange(page)).flatten().to(idx_dev)
        mover = self.mover(name)
        field = "backup_s" if direction == "d2h" else "load_s"
        with self.replay.timer.span(row, field):
            mover.transfer(hi, di, tuple(range(pool.geo.layer_num)), direction)
        nbytes = len(dev) * pool.bytes_per_page
        if direction == "d2h":
            pool.host_serial[host] = pool.serial[dev]
            row.backup_pages += len(dev)
            row.backup_bytes += nbytes
            row.backup_calls += 1
            row.backup_call_pages.append(len(dev))
        else:
            pool.serial[dev] = pool.host_serial[host]
            row.load_pages += len(dev)
            row.load_bytes += nbytes
            row.load_calls += 1

    def _prefetch(self, pool: ReplayPool, host: np.ndarray) -> None:
        """Tag the host pages an L3 read filled with fresh serials (the stand-in for storage)."""
        r = self.replay
        serials = np.arange(r._serial + 1, r._serial + 1 + len(host), dtype=np.int64)
        r._serial += len(host)
        write_host_tags(pool, host, serials)
        pool.host_serial[host] = serials

    def poison_freed(self, got: MemoryOp) -> None:
        """Overwrite the device pages a record freed with the poison tag (HiCache logs only)."""
        if not self.poison:
            return
        for name, pages, frees in (("full", got.full, FREES_FULL), ("swa", got.swa, FREES_SWA)):
            pool = self.replay.pools.get(name)
            if pool is not None and got.kind in frees and len(pages):
                pool.write(pages, np.full(len(pages), POISON, dtype=np.int64))


def write_host_tags(pool: ReplayPool, pages: np.ndarray, serials: np.ndarray) -> None:
    """Write each host page's tag into every replayed layer, K and V."""
    p = pool.geo.page_size
    idx = torch.from_numpy(pages)
    ser = torch.from_numpy(serials)
    for comp, name in enumerate(("k", "v")):
        for layer in range(pool.geo.layer_num):
            view = pool.host.layer_view(name, layer)
            vals = tag_values(ser, layer, comp).to(view.dtype)
            if view.dim() == 4:  # page_first_direct: [pages, page, head, dim]
                view[idx] = vals.view(-1, 1, 1, 1).expand(len(pages), *view.shape[1:])
            else:
                rows = (idx[:, None] * p + torch.arange(p)).flatten()
                view[rows] = vals.repeat_interleave(p).view(-1, 1, 1).expand(len(rows), *view.shape[1:])
