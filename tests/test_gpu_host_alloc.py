"""Host memory kinds for the pinned pools (gpu_replay.host_alloc), on CPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gpu_replay.geometry import PoolGeometry  # noqa: E402
from gpu_replay.host_alloc import HUGE_PAGE, allocate, huge_fraction  # noqa: E402
from gpu_replay.pools import build_host_pool  # noqa: E402
from gpu_replay.transfer_defaults import (  # noqa: E402
    PER_LAYER_ROWS,
    PER_LAYER_TMA,
    has_huge_pages,
    per_layer_choice,
)
from gpu_replay.transfer_split import split_pages  # noqa: E402


@pytest.mark.parametrize("kind", ["malloc", "thp", "auto"])
@pytest.mark.parametrize("nbytes", [1, 4096, HUGE_PAGE + 12345])
def test_allocations_are_writable_and_sized(kind, nbytes):
    buf = allocate(nbytes, kind)
    assert buf.tensor.numel() == nbytes and buf.tensor.dtype == torch.uint8
    buf.tensor.fill_(7)
    buf.tensor[-1] = 9
    assert int(buf.tensor.sum()) == 7 * (nbytes - 1) + 9
    assert buf.kind in (("hugetlb", "thp", "malloc") if kind == "auto" else (kind,))


def test_thp_mapping_starts_on_a_huge_page():
    buf = allocate(3 * HUGE_PAGE, "thp")
    assert buf.address % HUGE_PAGE == 0


def test_hugetlb_fails_or_gives_huge_pages():
    """Without reserved 2 MiB pages the mapping is refused (auto then falls back)."""
    try:
        buf = allocate(HUGE_PAGE, "hugetlb")
    except OSError:
        assert allocate(HUGE_PAGE, "auto").kind in ("thp", "malloc")
        return
    buf.tensor.fill_(1)
    assert huge_fraction(buf.address) == 1.0


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="not one of"):
        allocate(10, "pinned")


SMAPS = """\
7f0000000000-7f0000400000 rw-p 00000000 00:00 0
Size:               4096 kB
KernelPageSize:        4 kB
Rss:                4096 kB
AnonHugePages:      2048 kB
VmFlags: rd wr mr mw me ac hg
7f0000400000-7f0000800000 rw-p 00000000 00:0f 123  /anon_hugepage (deleted)
Size:               4096 kB
KernelPageSize:     2048 kB
Rss:                   0 kB
AnonHugePages:         0 kB
7f0000800000-7f0000801000 rw-p 00000000 00:00 0
Size:                  4 kB
KernelPageSize:        4 kB
Rss:                   0 kB
AnonHugePages:         0 kB
"""


def test_huge_fraction_reads_the_mapping_holding_the_address(tmp_path):
    path = tmp_path / "smaps"
    path.write_text(SMAPS)
    assert huge_fraction(0x7F0000000000 + 5, path) == 0.5  # THP: AnonHugePages / Rss
    assert huge_fraction(0x7F0000400000, path) == 1.0  # hugetlb: 2 MiB kernel pages
    assert huge_fraction(0x7F0000800000, path) == 0.0  # nothing resident
    assert huge_fraction(0x100, path) is None
    assert huge_fraction(0x100, tmp_path / "missing") is None


def _geo() -> PoolGeometry:
    return PoolGeometry(
        name="full",
        layer_ids=(0, 2),
        head_num=2,
        head_dim=8,
        v_head_dim=16,
        dtype_bytes=2,
        page_size=4,
        device_tokens=8 * 4,
        host_tokens=12 * 4,
    )


@pytest.mark.parametrize("layout", ["layer_first", "page_first", "page_first_direct"])
def test_pools_on_every_kind_have_the_malloc_shapes(layout):
    geo = _geo()
    ref = build_host_pool(geo, layout, pin=False, alloc="malloc")
    for kind in ("thp", "auto"):
        pool = build_host_pool(geo, layout, pin=False, alloc=kind)
        assert pool.k.shape == ref.k.shape and pool.v.shape == ref.v.shape
        assert pool.k.dtype == ref.k.dtype and pool.k.is_contiguous() and pool.v.is_contiguous()
        assert pool.alloc in ("hugetlb", "thp")
        want = (torch.arange(pool.v.numel(), dtype=torch.int32) % 1000).to(torch.int16).view(pool.v.shape)
        pool.v.view(torch.int16).copy_(want)
        assert torch.equal(pool.v.view(torch.int16), want)


def test_split_pages_takes_the_share_for_the_engines():
    assert split_pages(10, 0.0) == 0
    assert split_pages(10, 1.0) == 10
    assert split_pages(10, 0.55) == 6  # rounds to the nearest page (5.5 -> 6, banker's rounding)
    assert split_pages(1, 0.3) == 0
    with pytest.raises(ValueError):
        split_pages(4, 1.5)


def _smaps_for(pool, anon_huge_kb: int) -> str:
    """A smaps text with one mapping per pool buffer, ``anon_huge_kb`` of each in huge pages."""
    out = []
    for t in (pool.k, pool.v):
        lo = t.data_ptr() - t.data_ptr() % 4096
        hi = lo + (t.numel() * t.element_size() + 8191) // 4096 * 4096
        kb = (hi - lo) // 1024
        out += [f"{lo:x}-{hi:x} rw-p 00000000 00:00 0", f"Size: {kb} kB", "KernelPageSize: 4 kB"]
        out += [f"Rss: {kb} kB", f"AnonHugePages: {min(kb, anon_huge_kb)} kB"]
    return "\n".join(out) + "\n"


def test_huge_page_check_reads_each_buffer(tmp_path):
    geo = _geo()
    pool = build_host_pool(geo, "layer_first", pin=False, alloc="thp")
    path = tmp_path / "smaps"
    path.write_text(_smaps_for(pool, 1 << 30))
    assert has_huge_pages(pool, str(path))
    path.write_text(_smaps_for(pool, 0))
    assert not has_huge_pages(pool, str(path))
    assert not has_huge_pages(pool, str(tmp_path / "missing"))
    malloc = build_host_pool(geo, "layer_first", pin=False, alloc="malloc")
    path.write_text(_smaps_for(malloc, 1 << 30))
    assert not has_huge_pages(malloc, str(path))  # torch.empty memory is never taken for huge


@pytest.mark.parametrize("layout", ["layer_first", "page_first", "page_first_direct"])
def test_per_layer_choice_needs_huge_pages_and_contiguous_page_layers(layout):
    pool = build_host_pool(_geo(), layout, pin=False, alloc="malloc")
    assert per_layer_choice(pool, huge=False) == ("cuda", PER_LAYER_ROWS)
    want = ("cuda", PER_LAYER_ROWS) if layout == "page_first" else ("cuda_bulk", PER_LAYER_TMA)
    assert per_layer_choice(pool, huge=True) == want
    assert PER_LAYER_TMA.pdl and PER_LAYER_ROWS.pdl
