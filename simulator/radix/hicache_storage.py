"""The L3 storage tier of HiCache: page-hash chains and the page stores (backends).

SGLang 0.5.23 keys every stored page by a hash chain over the page tokens
(``mem_cache/utils.py``: ``get_storage_hash_str`` / ``compute_node_hash_values``: each page's
hash covers the previous page's hash and its own tokens, so a key names the whole prefix up to
that page). kvplan's page ids already name page contents, so the chain runs over page ids: a
128-bit polynomial chain, vectorised (two independent 64-bit lanes), equal for two pages exactly
when their whole prefixes are equal (up to a 2**-128 collision chance).

The stores are directory-less sets of ``(pool, page hash)`` keys, one per stored page file:

* ``file``: SGLang's ``HiCacheFile`` (``mem_cache/hicache_storage.py``): ``set`` skips a key
  that exists, ``get`` touches it; an optional byte cap (``max_size``) evicts least recently
  used pages down to ``eviction_ratio`` of the cap (``storage/file/lru_file_evictor.py``
  ``LRUFileEvictor.reserve`` / ``_evict_locked``); unbounded by default, as the oracle runs it.
* ``sim``: the same store with kvplan's bandwidth and latency (SGLang's directory-less
  ``SimHiCacheStorage``, ``mem_cache/storage/sim_storage.py``).

Both report how long an operation takes (``op_time_s``) for an engine that times L3 I/O; the
cache-only replay completes every operation within one scheduler step (the oracle's rule).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from simulator.errors import ConfigError

KV, SWA = "kv", "swa"  # PoolName.KV / PoolName.SWA

_LANES = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F))
_MASK = (1 << 64) - 1


def page_hash_chain(pages: np.ndarray, prior: int | None) -> list[int]:
    """Chained page hashes of ``pages`` after the hash ``prior`` (None: a chain from the root),
    as 128-bit ints (``get_storage_hash_str(tokens, prior_hash, page_size)``).

    Lane ``b``: ``h_i = h_{i-1} * b + (page_i + 1) mod 2**64``, computed in closed form
    ``h_i = b**i * (h_{-1} * b + sum_{j<=i} (page_j + 1) * b**-j)``."""
    n = len(pages)
    if n == 0:
        return []
    x = np.asarray(pages, dtype=np.int64).view(np.uint64) + np.uint64(1)
    prev = (0, 0) if prior is None else (prior >> 64, prior & _MASK)
    lanes = []
    with np.errstate(over="ignore"):
        for b, h0 in zip(_LANES, prev, strict=True):
            inv = np.uint64(pow(int(b), -1, 1 << 64))
            pow_b = np.empty(n, np.uint64)
            pow_b[0] = 1
            pow_inv = pow_b.copy()
            if n > 1:
                pow_b[1:] = b
                pow_inv[1:] = inv
                pow_b = np.cumprod(pow_b, dtype=np.uint64)
                pow_inv = np.cumprod(pow_inv, dtype=np.uint64)
            s = np.cumsum(x * pow_inv, dtype=np.uint64)
            lanes.append(pow_b * (np.uint64(h0) * b + s))
    hi, lo = lanes[0].tolist(), lanes[1].tolist()
    return [(a << 64) | c for a, c in zip(hi, lo, strict=True)]


@dataclass(frozen=True)
class StorageParams:
    """A store's capacity (bytes, 0 = unbounded), speed (GB/s per direction, 0 = instant) and
    fixed latency per operation; bytes per stored page for the FULL (kv) and SWA pools."""

    backend: str = "file"
    capacity_bytes: int = 0
    eviction_ratio: float = 0.9
    read_gbps: float = 0.0
    write_gbps: float = 0.0
    op_latency_s: float = 0.0
    kv_page_bytes: int = 1
    swa_page_bytes: int = 1

    def __post_init__(self) -> None:
        if self.backend not in ("file", "sim"):
            raise ConfigError(f"storage backend {self.backend!r} is not simulated (file, sim)")
        if self.capacity_bytes < 0 or not 0.0 < self.eviction_ratio <= 1.0:
            raise ConfigError("storage capacity must be >= 0 and eviction_ratio in (0, 1]")


class PageStore:
    """Stored pages keyed by (pool, page hash), with least-recently-used eviction under a cap."""

    def __init__(self, params: StorageParams) -> None:
        self.params = params
        self._lru: OrderedDict[tuple[str, int], int] = OrderedDict()
        self.used_bytes = 0
        self.counts = {"pages_written": 0, "pages_read": 0, "pages_evicted": 0, "writes_refused": 0}

    def _page_bytes(self, pool: str) -> int:
        return self.params.kv_page_bytes if pool == KV else self.params.swa_page_bytes

    def __len__(self) -> int:
        return len(self._lru)

    def exists(self, pool: str, key: int) -> bool:
        """``HiCacheFile.exists`` (no recency change)."""
        return (pool, key) in self._lru

    def get(self, pool: str, key: int) -> bool:
        """``HiCacheFile.get``: a hit refreshes the page's recency."""
        k = (pool, key)
        if k not in self._lru:
            return False
        self._lru.move_to_end(k)
        self.counts["pages_read"] += 1
        return True

    def set(self, pool: str, key: int) -> bool:
        """``HiCacheFile.set``: an existing page is touched, not rewritten; a new one is admitted
        under the cap (``LRUFileEvictor.reserve``), evicting down to ``eviction_ratio`` x cap."""
        k = (pool, key)
        if k in self._lru:
            self._lru.move_to_end(k)
            return True
        size = self._page_bytes(pool)
        cap = self.params.capacity_bytes
        if cap > 0:
            if size > cap:
                self.counts["writes_refused"] += 1
                return False
            if self.used_bytes + size > cap:
                target = max(0, int(cap * self.params.eviction_ratio) - size)
                while self._lru and self.used_bytes > target:
                    _, freed = self._lru.popitem(last=False)
                    self.used_bytes -= freed
                    self.counts["pages_evicted"] += 1
        self._lru[k] = size
        self.used_bytes += size
        self.counts["pages_written"] += 1
        return True

    def hit_pages(self, hashes: list[int], swa_trailing: int) -> int:
        """``HiCacheFile.batch_exists_v2`` folded as the hybrid controller reads it
        (``_storage_hit_query`` + ``_sync_prefetch_hit_query``): the longest stored FULL
        prefix, cut to the longest prefix ``q`` whose last ``swa_trailing`` pages (SWA's
        TRAILING_PAGES policy) all have SWA pages; ``swa_trailing`` 0: no SWA transfer."""
        kv_pages = 0
        for h in hashes:
            if (KV, h) not in self._lru:
                break
            kv_pages += 1
        if swa_trailing <= 0 or kv_pages == 0:
            return kv_pages
        have = [(SWA, h) in self._lru for h in hashes[:kv_pages]]
        run = 0  # consecutive SWA pages ending at page q - 1
        best = 0
        for q in range(1, kv_pages + 1):
            run = run + 1 if have[q - 1] else 0
            if run >= min(swa_trailing, q):
                best = q
        return best

    def read_run(self, pool: str, hashes: list[int]) -> int:
        """Pages read before the first missing one (``_page_get_zero_copy`` /
        ``count_pool_hits``: a failed page ends the run)."""
        n = 0
        for h in hashes:
            if not self.get(pool, h):
                break
            n += 1
        return n

    def op_time_s(self, pool_pages: dict[str, int], write: bool) -> float:
        """Seconds one storage operation of these pages takes: latency + bytes / bandwidth."""
        p = self.params
        gbps = p.write_gbps if write else p.read_gbps
        nbytes = sum(self._page_bytes(pool) * n for pool, n in pool_pages.items())
        return p.op_latency_s + (nbytes / (gbps * 1e9) if gbps > 0 else 0.0)
