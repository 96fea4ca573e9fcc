"""The transfer paths that measured best for scattered (random page id) transfers.

docs/benchmarks.md, "GPU replay, fourth session" (page 64, gpt-oss-120b TP 2, H100 and H200):

- per-layer loads (one layer of one request per call, back to back on a load stream): the
  bulk-async (TMA) page kernel with programmatic dependent launch and a 32 KiB ring (16 KiB
  ops, two stages, so the next layer's kernel fits beside the draining one) on a host pool with
  2 MiB pages: 90.5% of the copy peak at 4k tokens H2D, 93.0% D2H; on 4 KiB pages the same
  kernel falls to 71-76%, so there the row kernel with programmatic launch (84.8% at 4k) is used;
  on three H100s (sixth session) the TMA path gave 89.8-91.9% H2D and 91.6-93.4% D2H at 4k;
- bulk (all layers in one call): copy engines for 80% of the pages beside the row kernel for the
  rest (:class:`~gpu_replay.transfer_split.SplitTransfer`), 94.1-94.6%; the copy engines alone
  reach 97-99% once their copies are queued, but the driver's 0.5-0.9 us per copy bounds them.

Programmatic launch lets a load start before the kernel ahead of it in its stream ends, so these
choices are for a stream that runs only loads (SGLang's load stream), not for one shared with the
kernels that write the pages.
"""

from __future__ import annotations

from gpu_replay.host_alloc import huge_fraction
from gpu_replay.pools import DevicePool, HostPool
from gpu_replay.transfer_cuda import CudaConfig

__all__ = [
    "BULK_SPLIT",
    "PER_LAYER_ROWS",
    "PER_LAYER_TMA",
    "bulk_mover",
    "has_huge_pages",
    "load_mover",
    "per_layer_choice",
]

PER_LAYER_TMA = CudaConfig(blocks_per_sm=1, chunk=16 << 10, stages=2, pdl=True)
PER_LAYER_ROWS = CudaConfig(pdl=True)
BULK_SPLIT = {"dma_fraction": 0.8, "streams": 4, "max_batch": 128, "sort": True}
# The 1 - 1/16 of a pool that must sit in huge pages for the TMA path (a THP pool can come
# back partly in 4 KiB pages when memory is fragmented).
_MIN_HUGE = 0.9375


def has_huge_pages(host: HostPool, smaps: str = "/proc/self/smaps") -> bool:
    """Both of the pool's buffers are (nearly all) in 2 MiB pages."""
    if host.alloc not in ("hugetlb", "thp"):
        return False
    for t in (host.k, host.v):
        frac = huge_fraction(t.data_ptr(), smaps)
        if frac is None or frac < _MIN_HUGE:
            return False
    return True


def per_layer_choice(host: HostPool, huge: bool | None = None) -> tuple[str, CudaConfig]:
    """(kernel-backend impl, launch shape) for per-layer loads from ``host``: TMA pages where a
    page of one layer is contiguous and the pool has huge pages, the row kernel otherwise."""
    huge = has_huge_pages(host) if huge is None else huge
    if huge and host.layout in ("layer_first", "page_first_direct"):
        return "cuda_bulk", PER_LAYER_TMA
    return "cuda", PER_LAYER_ROWS


def load_mover(host: HostPool, dev: DevicePool):
    """A per-layer load mover for a dedicated load stream (device index tensors, page-aligned)."""
    from gpu_replay.transfer import KVTransfer

    impl, cfg = per_layer_choice(host)
    if host.layout == "page_first_direct":
        raise ValueError("page_first_direct pools load through the direct backend in SGLang")
    return KVTransfer(host, dev, "kernel", impl, config=cfg)


def bulk_mover(host: HostPool, dev: DevicePool):
    """An all-layer mover (write-back, bulk loads): the split of pages between copy engines and
    the row kernel (CPU index tensors)."""
    from gpu_replay.transfer import KVTransfer

    return KVTransfer(host, dev, "hybrid", "split", **BULK_SPLIT)
