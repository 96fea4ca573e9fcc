"""Host memory for the pinned pools: 2 MiB pages where the OS gives them, 4 KiB pages otherwise.

Scattered page copies touch a new host translation every 32 KiB page; with 4 KiB host pages a
copy spans eight of them. Kinds (``HOST_ALLOCS``):

- ``hugetlb``: an anonymous ``MAP_HUGETLB`` mapping (2 MiB pages from the reserved pool,
  ``/proc/sys/vm/nr_hugepages``); fails when too few are reserved;
- ``thp``: an anonymous mapping aligned to 2 MiB with ``madvise(MADV_HUGEPAGE)`` (transparent huge
  pages, as far as ``/sys/kernel/mm/transparent_hugepage`` and free memory allow);
- ``malloc``: ``torch.empty`` (what SGLang registers: ``pool_host/common.py::alloc_with_host_register``);
- ``cuda``: ``cudaHostAlloc`` (driver-allocated pinned memory, as torch's ``pin_memory``);
- ``auto``: ``hugetlb``, else ``thp``, else ``malloc``.

The first three are registered with ``cudaHostRegister`` by the pool when pinned.
"""

from __future__ import annotations

import ctypes
import mmap
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

__all__ = ["HOST_ALLOCS", "HUGE_PAGE", "HostBuffer", "allocate", "huge_fraction"]

HOST_ALLOCS = ("auto", "hugetlb", "thp", "malloc", "cuda")
HUGE_PAGE = 2 << 20
_MAP_HUGETLB = getattr(mmap, "MAP_HUGETLB", 0x40000)
_MADV_HUGEPAGE = getattr(mmap, "MADV_HUGEPAGE", 14)


@dataclass
class HostBuffer:
    """``nbytes`` of host memory as a uint8 tensor; ``kind`` is what was actually used."""

    tensor: torch.Tensor
    kind: str
    keep: object = None  # the mmap or the cudaHostAlloc pointer the tensor lives in
    freed: bool = field(default=False, repr=False)

    @property
    def address(self) -> int:
        return self.tensor.data_ptr()

    def free(self) -> None:
        """Give driver-allocated memory back (mappings go with their last reference)."""
        if self.kind == "cuda" and not self.freed:
            from gpu_replay.cuda_build import library

            library().kvt_host_free(ctypes.c_void_p(self.keep))
            self.freed = True


def _round(nbytes: int) -> int:
    return max(HUGE_PAGE, -(-nbytes // HUGE_PAGE) * HUGE_PAGE)


def _mapped(mm: mmap.mmap, offset: int, nbytes: int, kind: str) -> HostBuffer:
    t = torch.frombuffer(mm, dtype=torch.uint8)[offset : offset + nbytes]
    return HostBuffer(tensor=t, kind=kind, keep=mm)


def _hugetlb(nbytes: int) -> HostBuffer:
    mm = mmap.mmap(-1, _round(nbytes), flags=mmap.MAP_PRIVATE | _MAP_HUGETLB)
    return _mapped(mm, 0, nbytes, "hugetlb")


def _thp(nbytes: int) -> HostBuffer:
    mm = mmap.mmap(-1, _round(nbytes) + HUGE_PAGE, flags=mmap.MAP_PRIVATE)
    if hasattr(mm, "madvise"):
        mm.madvise(_MADV_HUGEPAGE)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(mm))
    return _mapped(mm, (-addr) % HUGE_PAGE, nbytes, "thp")


def _cuda(nbytes: int) -> HostBuffer:
    from gpu_replay.cuda_build import library

    ptr = ctypes.c_void_p()
    rc = library().kvt_host_alloc(nbytes, 0, ctypes.byref(ptr))
    if rc != 0 or not ptr.value:
        raise RuntimeError(f"cudaHostAlloc of {nbytes} bytes failed (rc={rc})")
    arr = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(ptr.value))
    return HostBuffer(tensor=torch.from_numpy(arr), kind="cuda", keep=ptr.value)


def allocate(nbytes: int, kind: str = "auto") -> HostBuffer:
    """``nbytes`` of host memory of ``kind``; ``auto`` falls back hugetlb -> thp -> malloc."""
    if kind not in HOST_ALLOCS:
        raise ValueError(f"host allocation {kind!r} is not one of {HOST_ALLOCS}")
    if kind == "auto":
        for make in (_hugetlb, _thp):
            try:
                return make(nbytes)
            except (OSError, ValueError):
                continue
        kind = "malloc"
    if kind == "malloc":
        return HostBuffer(tensor=torch.empty(nbytes, dtype=torch.uint8), kind="malloc")
    return {"hugetlb": _hugetlb, "thp": _thp, "cuda": _cuda}[kind](nbytes)


def huge_fraction(address: int, smaps: str | Path = "/proc/self/smaps") -> float | None:
    """Share of the mapping holding ``address`` that sits in huge pages (hugetlb: 1.0; THP:
    AnonHugePages / Rss), or None where smaps is unreadable or has no such mapping."""
    try:
        text = Path(smaps).read_text()
    except OSError:
        return None
    fields: dict[str, int] | None = None
    for line in text.splitlines():
        head = line.split(maxsplit=1)[0] if line else ""
        if "-" in head and not head.endswith(":"):
            lo, hi = (int(x, 16) for x in head.split("-"))
            if fields is not None:
                break
            fields = {} if lo <= address < hi else None
        elif fields is not None and head.endswith(":"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                fields[head[:-1]] = int(parts[1])
    if not fields:
        return None
    if fields.get("KernelPageSize", 4) >= 2048:
        return 1.0
    rss = fields.get("Rss", 0)
    return fields.get("AnonHugePages", 0) / rss if rss else 0.0
