"""GPU replay pools and KV page transfers against an independent expectation.

Every implementation runs on random bits with a poisoned destination and random page ids; the
expectation is plain indexing of token rows, so a transfer that skips, misplaces or over-writes
a row fails. CPU torch runs the references, the copy plan of the direct backend and (under
Triton's interpreter) the Triton kernel; tests marked ``gpu`` run the same matrix on CUDA.
"""

from __future__ import annotations

import os
import zlib

import pytest

torch = pytest.importorskip("torch")
os.environ.setdefault("TRITON_INTERPRET", "0" if torch.cuda.is_available() else "1")

from gpu_replay.geometry import PoolGeometry, rank_geometry  # noqa: E402
from gpu_replay.pools import build_device_pool, build_host_pool  # noqa: E402
from gpu_replay.transfer import KVTransfer  # noqa: E402
from gpu_replay.transfer_triton import KernelConfig, triton_available  # noqa: E402

POISON = 0x7FC1  # a bf16 NaN bit pattern no random draw below produces
HAS_CUDA = torch.cuda.is_available()

COMBOS = [
    ("layer_first", "kernel", "reference"),
    ("page_first", "kernel", "reference"),
    ("layer_first", "kernel", "triton"),
    ("page_first", "kernel", "triton"),
    ("layer_first", "kernel", "triton_tma"),
    ("page_first", "kernel", "triton_tma"),
    ("layer_first", "direct", "reference"),
    ("page_first_direct", "direct", "reference"),
    ("layer_first", "direct", "batch"),
    ("page_first_direct", "direct", "batch"),
    ("layer_first", "direct", "loop"),
    ("page_first_direct", "direct", "loop"),
    ("layer_first", "direct", "pitched"),
    ("page_first_direct", "direct", "pitched"),
    ("layer_first", "hybrid", "pitched"),
    ("page_first_direct", "hybrid", "batch"),
    ("layer_first", "kernel", "cuda"),
    ("page_first", "kernel", "cuda"),
    ("layer_first", "kernel", "cuda_bulk"),
    ("layer_first", "direct", "cxx_loop"),
    ("page_first_direct", "direct", "cxx_loop"),
    ("layer_first", "direct", "cxx_batch"),
    ("page_first_direct", "direct", "cxx_batch"),
    ("layer_first", "direct", "cxx_pitched"),
    ("page_first_direct", "direct", "cxx_pitched"),
    ("layer_first", "hybrid", "cxx"),
    ("page_first_direct", "hybrid", "cxx"),
    ("layer_first", "hybrid", "split"),
    ("page_first_direct", "hybrid", "split"),
]
NVCC_IMPLS = ("cuda", "cuda_bulk", "cxx_loop", "cxx_batch", "cxx_pitched", "cxx", "staged", "split")


def _geo(head_dim: int = 16, v_head_dim: int = 16, page: int = 4) -> PoolGeometry:
    return PoolGeometry(
        name="full",
        layer_ids=(1, 3, 5),
        head_num=2,
        head_dim=head_dim,
        v_head_dim=v_head_dim,
        dtype_bytes=2,
        page_size=page,
        device_tokens=24 * page,
        host_tokens=40 * page,
    )


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16)


def _randomize(t: torch.Tensor, gen: torch.Generator) -> None:
    vals = torch.randint(-(1 << 14), 1 << 14, t.shape, generator=gen, dtype=torch.int16)
    _bits(t).copy_(vals.to(t.device))


def _host_tokens(host, comp: str, layer: int) -> torch.Tensor:
    """Token-major copy of one host layer, built by hand from the layout's dims."""
    buf = host.k if comp == "k" else host.v
    if host.layout == "layer_first":
        return buf[layer].clone()
    if host.layout == "page_first":
        return buf[:, layer].clone()
    return buf[:, layer].reshape(-1, *buf.shape[3:]).clone()


def _random_pages(n: int, total: int, gen: torch.Generator) -> torch.Tensor:
    """n distinct page ids in [1, total) (page 0 is SGLang's padding page)."""
    return torch.randperm(total - 1, generator=gen)[:n] + 1


def _page_runs(n_runs: int, run: int, total: int, gen: torch.Generator) -> torch.Tensor:
    """``n_runs`` runs of ``run`` adjacent page ids in [1, total), in random order."""
    starts = torch.randperm((total - 1) // run, generator=gen)[:n_runs] * run + 1
    return (starts[:, None] + torch.arange(run)).flatten()


def _token_slots(pages: torch.Tensor, page: int) -> torch.Tensor:
    return (pages[:, None] * page + torch.arange(page)).flatten()


def _skip_unavailable(impl: str, device: str, backend: str = "") -> None:
    if impl in NVCC_IMPLS:
        from gpu_replay.transfer_cuda import cuda_ext_available

        if device == "cpu" or not cuda_ext_available():
            pytest.skip("the nvcc-built transfers need CUDA and nvcc")
    if backend == "hybrid":
        impl = "triton"
    if impl == "triton_tma" and device == "cpu":
        pytest.skip("TMA needs a Hopper GPU")
    if impl.startswith("triton") and not triton_available():
        pytest.skip("triton is not installed")
    if impl == "triton" and device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("Triton on CPU needs TRITON_INTERPRET=1")


def _small_cuda_config(impl: str):
    """Few blocks and a short unroll, so that warps loop and chunks end part-way."""
    from gpu_replay.transfer_cuda import CudaConfig

    return (
        CudaConfig(grid=3, block=64, unroll=4, stages=2) if impl == "cuda" else CudaConfig(grid=3, stages=2)
    )


def _run_case(
    layout,
    backend,
    impl,
    direction,
    scope,
    device,
    seed,
    geo=None,
    config=None,
    extra=None,
    run=1,
    alloc=None,
):
    _skip_unavailable(impl, device, backend)
    geo = geo or _geo()
    gen = torch.Generator().manual_seed(seed)
    host = build_host_pool(geo, layout, pin=device != "cpu", alloc=alloc)
    dev = build_device_pool(geo, device, stacked=impl in ("pitched", "cxx_pitched"))
    try:
        for t in (host.k, host.v, *dev.k, *dev.v):
            _randomize(t, gen)
        if run > 1:  # runs of pages adjacent on both sides: the copy engines merge them
            n_runs = int(torch.randint(1, 5, (1,), generator=gen))
            hp = _page_runs(n_runs, run, geo.host_pages, gen)
            dp = _page_runs(n_runs, run, geo.device_pages, gen)
        else:
            n_pages = int(torch.randint(1, 12, (1,), generator=gen))
            hp = _random_pages(n_pages, geo.host_pages, gen)
            dp = _random_pages(n_pages, geo.device_pages, gen)
        hi, di = _token_slots(hp, geo.page_size), _token_slots(dp, geo.page_size)
        layers = (int(torch.randint(0, geo.layer_num, (1,), generator=gen)),) if scope == "one" else (0, 1, 2)
        src_h = {(c, lay): _host_tokens(host, c, lay) for c in "kv" for lay in range(geo.layer_num)}
        src_d = {
            (c, lay): (dev.k if c == "k" else dev.v)[lay].cpu().clone() for c in "kv" for lay in range(3)
        }
        # Poison the destination side.
        for t in (host.k, host.v) if direction == "d2h" else (*dev.k, *dev.v):
            _bits(t).fill_(POISON)
        uses_triton = impl.startswith("triton") or backend == "hybrid"
        kwargs = {"config": KernelConfig(programs=3, tok=2)} if uses_triton else {}
        if impl in ("cuda", "cuda_bulk", "cxx", "staged", "split"):
            kwargs = {"config": config or _small_cuda_config(impl)}
        kwargs |= extra or {}
        mover = KVTransfer(host, dev, backend, impl, **kwargs)
        idx_dev = dev.k[0].device if backend == "kernel" else "cpu"
        mover.transfer(hi.to(idx_dev), di.to(idx_dev), layers, direction)
        if device != "cpu":
            torch.cuda.synchronize()
        for c in "kv":
            for lay in range(geo.layer_num):
                if direction == "h2d":
                    got = (dev.k if c == "k" else dev.v)[lay].cpu()
                    moved, rows, want = lay in layers, di, src_h[(c, lay)][hi]
                else:
                    got = _host_tokens(host, c, lay)
                    moved, rows, want = lay in layers, hi, src_d[(c, lay)][di]
                untouched = torch.ones(got.shape[0], dtype=torch.bool)
                if moved:
                    assert torch.equal(_bits(got[rows]), _bits(want)), (c, lay)
                    untouched[rows] = False
                assert bool((_bits(got[untouched]) == POISON).all()), f"stray write in {c} layer {lay}"
    finally:
        host.release()


@pytest.mark.parametrize("layout,backend,impl", COMBOS)
@pytest.mark.parametrize("direction", ["h2d", "d2h"])
@pytest.mark.parametrize("scope", ["one", "all"])
def test_transfer_cpu(layout, backend, impl, direction, scope):
    _run_case(
        layout,
        backend,
        impl,
        direction,
        scope,
        "cpu",
        seed=zlib.crc32(f"{layout}{impl}{direction}{scope}".encode()),
    )


@pytest.mark.parametrize("impl", ["reference", "triton"])
def test_kernel_backend_unequal_k_v_widths(impl):
    """MiMo-style pools (K 192, V 128 wide) take two launches with their own row widths."""
    _run_case("page_first", "kernel", impl, "h2d", "all", "cpu", seed=7, geo=_geo(head_dim=24, v_head_dim=16))


def test_direct_plan_merges_adjacent_pages_only():
    from gpu_replay.transfer_direct import plan_direct

    geo = _geo()
    host, dev = build_host_pool(geo, "layer_first", pin=False), build_device_pool(geo, "cpu")
    hp, dp = torch.tensor([5, 6, 7, 20, 9]), torch.tensor([3, 4, 5, 11, 1])
    hi, di = _token_slots(hp, 4), _token_slots(dp, 4)
    plan = plan_direct(host, dev, hi, di, (0, 2), "h2d")
    assert plan.count == 2 * 2 * 3  # K/V x 2 layers x runs [5-7], [20], [9]
    assert plan.nbytes == 2 * 2 * 5 * geo.page_size * geo.k_row_bytes
    pfd = build_host_pool(geo, "page_first_direct", pin=False)
    stacked = build_device_pool(geo, "cpu", stacked=True)
    pitched = plan_direct(host, stacked, hi, di, (0, 1, 2), "h2d", pitched=True)
    assert pitched.count == 2 * 3 and set(pitched.height.tolist()) == {3}  # one copy per run, all layers
    assert pitched.nbytes == 2 * 3 * 5 * geo.page_size * geo.k_row_bytes
    assert (
        plan_direct(pfd, dev, hi, di, (0, 2), "h2d").count == 2 * 2 * 5
    )  # pages of one layer are not adjacent


def test_invalid_layout_backend_pairs_are_refused():
    geo = _geo()
    dev = build_device_pool(geo, "cpu")
    with pytest.raises(ValueError, match="page_first_direct"):
        KVTransfer(build_host_pool(geo, "page_first", pin=False), dev, "direct", "reference")
    with pytest.raises(ValueError, match="direct"):
        KVTransfer(build_host_pool(geo, "page_first_direct", pin=False), dev, "kernel", "triton")


def test_gpt_oss_tp2_pools_match_sglang_geometry():
    geo = rank_geometry("gpt-oss-120b", 2, page_size=64, gpu="H100")
    full, swa = geo.pool("full"), geo.pool("swa")
    assert (full.layer_num, swa.layer_num) == (18, 18)
    assert full.head_num == 4 and full.k_row_bytes == 512
    assert full.page_layer_bytes == 64 * 1024  # the 64 KiB per page and layer
    small = _geo()
    for layout, shape in [
        ("layer_first", (3, small.host_rows, 2, 16)),
        ("page_first", (small.host_rows, 3, 2, 16)),
        ("page_first_direct", (small.host_pages, 3, 4, 2, 16)),
    ]:
        assert tuple(build_host_pool(small, layout, pin=False).k.shape) == shape
    assert tuple(build_device_pool(small, "cpu").k[0].shape) == (small.device_rows, 2, 16)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")
@pytest.mark.parametrize("layout,backend,impl", COMBOS)
@pytest.mark.parametrize("direction", ["h2d", "d2h"])
@pytest.mark.parametrize("scope", ["one", "all"])
def test_transfer_cuda(layout, backend, impl, direction, scope):
    _run_case(layout, backend, impl, direction, scope, "cuda", seed=11)


def test_bulk_copy_refuses_strided_pages():
    """page_first keeps a page's rows one layer-set apart: no contiguous run for a bulk copy."""
    geo = _geo()
    with pytest.raises(ValueError, match="not contiguous"):
        KVTransfer(
            build_host_pool(geo, "page_first", pin=False),
            build_device_pool(geo, "cpu"),
            "kernel",
            "cuda_bulk",
        )


@pytest.mark.parametrize("impl", ["pitched", "cxx_pitched", "cxx_batch", "cxx_loop"])
@pytest.mark.parametrize("direction", ["h2d", "d2h"])
@pytest.mark.parametrize("scope", ["one", "all"])
def test_copy_engines_merge_page_runs(impl, direction, scope):
    """Runs of 3 pages adjacent on both sides (merged into one copy, or one 2D copy of all layers
    per run): every row lands, nothing else is written. The Python planner also runs on CPU."""
    device = "cuda" if HAS_CUDA else "cpu"
    if device == "cpu" and impl != "pitched":
        pytest.skip("the C++-issued copies need CUDA")
    for seed in (3, 4, 5):
        _run_case("layer_first", "direct", impl, direction, scope, device, seed=seed, run=3)


def test_cuda_library_compiles(tmp_path):
    """The nvcc-built library compiles wherever nvcc is (no GPU needed)."""
    from gpu_replay.cuda_build import build, nvcc_path

    if nvcc_path() is None:
        pytest.skip("nvcc not found")
    assert build(tmp_path).stat().st_size > 0


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")
@pytest.mark.parametrize(
    "layout,backend,impl",
    [c for c in COMBOS if c[2] in NVCC_IMPLS],
)
@pytest.mark.parametrize("direction", ["h2d", "d2h"])
def test_nvcc_transfers_real_rows(layout, backend, impl, direction):
    """gpt-oss-120b TP 2 rows (4 heads x 64, page 64) with the default launch shapes."""
    from gpu_replay.transfer_cuda import CudaConfig

    geo = PoolGeometry(
        name="full",
        layer_ids=(0, 2, 4),
        head_num=4,
        head_dim=64,
        v_head_dim=64,
        dtype_bytes=2,
        page_size=64,
        device_tokens=24 * 64,
        host_tokens=40 * 64,
    )
    _run_case(layout, backend, impl, direction, "all", "cuda", seed=5, geo=geo, config=CudaConfig())


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")
@pytest.mark.parametrize(
    "layout,backend,impl", [c for c in COMBOS if c[2] in ("cxx_batch", "cxx_loop", "cxx")]
)
@pytest.mark.parametrize("direction", ["h2d", "d2h"])
def test_cxx_copies_on_several_streams(layout, backend, impl, direction):
    """Copies split over 3 issuing threads and streams, batches of at most 3 copies."""
    extra = {"streams": 3, "max_batch": 3, "dma_fraction": 0.6}
    _run_case(layout, backend, impl, direction, "all", "cuda", seed=9, extra=extra)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")
@pytest.mark.parametrize("streams,max_batch", [(1, 0), (4, 2)])
@pytest.mark.parametrize("direction", ["h2d", "d2h"])
def test_cxx_copies_sorted_by_host_page(streams, max_batch, direction):
    """Pages reordered by host id before issue (pairs kept together), plain and in page runs."""
    extra = {"streams": streams, "max_batch": max_batch, "sort": True, "side": True}
    for seed, run in ((21, 1), (22, 3)):
        _run_case(
            "layer_first", "direct", "cxx_batch", direction, "all", "cuda", seed=seed, extra=extra, run=run
        )


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")
@pytest.mark.parametrize("fraction", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("streams", [1, 3])
@pytest.mark.parametrize("direction", ["h2d", "d2h"])
def test_split_transfer_every_share(fraction, streams, direction):
    """Engines for none, some or all of the pages, the row kernel for the rest; twice with the
    same index tensors (the second call reuses the cached split)."""
    extra = {"dma_fraction": fraction, "streams": streams, "max_batch": 2}
    for scope in ("one", "all"):
        _run_case("layer_first", "hybrid", "split", direction, scope, "cuda", seed=31, extra=extra)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")
@pytest.mark.parametrize("impl", ["cuda", "cuda_bulk"])
def test_per_layer_loads_with_programmatic_dependent_launch(impl):
    """One-layer loads back to back on a load stream, each kernel free to start before the one
    before it ends: every layer's rows land, nothing else is written, and after each layer's
    event that layer is complete."""
    from gpu_replay.transfer_cuda import CudaConfig, cuda_ext_available

    if not cuda_ext_available():
        pytest.skip("the nvcc-built transfers need nvcc")
    geo = PoolGeometry(
        name="full",
        layer_ids=tuple(range(0, 12, 2)),
        head_num=4,
        head_dim=64,
        v_head_dim=64,
        dtype_bytes=2,
        page_size=64,
        device_tokens=48 * 64,
        host_tokens=80 * 64,
    )
    gen = torch.Generator().manual_seed(17)
    host, dev = build_host_pool(geo, "layer_first", pin=True), build_device_pool(geo, "cuda")
    try:
        for t in (host.k, host.v):
            _randomize(t, gen)
        for t in (*dev.k, *dev.v):
            _bits(t).fill_(POISON)
        hp, dp = _random_pages(40, geo.host_pages, gen), _random_pages(40, geo.device_pages, gen)
        hi, di = _token_slots(hp, geo.page_size), _token_slots(dp, geo.page_size)
        mover = KVTransfer(host, dev, "kernel", impl, config=CudaConfig(pdl=True))
        load = torch.cuda.Stream()
        events = []
        with torch.cuda.stream(load):
            for lay in range(geo.layer_num):
                mover.load_to_device_per_layer(hi.cuda(), di.cuda(), lay)
                events.append(torch.cuda.Event())
                events[-1].record()
        for lay in range(geo.layer_num):
            events[lay].synchronize()
            for buf, src in ((dev.k, host.k), (dev.v, host.v)):
                got = buf[lay].cpu()
                assert torch.equal(_bits(got[di]), _bits(src[lay][hi])), lay
                untouched = torch.ones(got.shape[0], dtype=torch.bool)
                untouched[di] = False
                assert bool((_bits(got[untouched]) == POISON).all()), lay
    finally:
        host.release()


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")
@pytest.mark.parametrize("alloc", ["thp", "malloc"])
def test_default_movers_move_real_rows(alloc):
    """The measured defaults (transfer_defaults): per-layer loads on a load stream and the bulk
    split, on a huge-page pool (TMA) and a 4 KiB one (row kernel)."""
    from gpu_replay.transfer_cuda import cuda_ext_available
    from gpu_replay.transfer_defaults import bulk_mover, load_mover, per_layer_choice

    if not cuda_ext_available():
        pytest.skip("the nvcc-built transfers need nvcc")
    geo = PoolGeometry(
        name="full",
        layer_ids=(0, 2, 4),
        head_num=4,
        head_dim=64,
        v_head_dim=64,
        dtype_bytes=2,
        page_size=64,
        device_tokens=24 * 64,
        host_tokens=40 * 64,
    )
    gen = torch.Generator().manual_seed(23)
    host, dev = build_host_pool(geo, "layer_first", pin=True, alloc=alloc), build_device_pool(geo, "cuda")
    try:
        if alloc == "malloc":
            assert per_layer_choice(host)[0] == "cuda"
        for t in (host.k, host.v, *dev.k, *dev.v):
            _randomize(t, gen)
        hp, dp = _random_pages(9, geo.host_pages, gen), _random_pages(9, geo.device_pages, gen)
        hi, di = _token_slots(hp, geo.page_size), _token_slots(dp, geo.page_size)
        load, stream = load_mover(host, dev), torch.cuda.Stream()
        with torch.cuda.stream(stream):
            for lay in range(geo.layer_num):
                load.load_to_device_per_layer(hi.cuda(), di.cuda(), lay)
        stream.synchronize()
        for lay in range(geo.layer_num):
            assert torch.equal(_bits(dev.k[lay][di].cpu()), _bits(host.k[lay][hi]))
            assert torch.equal(_bits(dev.v[lay][di].cpu()), _bits(host.v[lay][hi]))
            _bits(dev.v[lay]).random_(-(1 << 14), 1 << 14)
        bulk_mover(host, dev).backup_from_device_all_layer(hi, di)
        torch.cuda.synchronize()
        for lay in range(geo.layer_num):
            assert torch.equal(_bits(dev.v[lay][di].cpu()), _bits(host.v[lay][hi]))
    finally:
        host.release()


@pytest.mark.parametrize("alloc", ["malloc", "thp", "auto"])
@pytest.mark.parametrize("layout", ["layer_first", "page_first", "page_first_direct"])
def test_transfer_from_each_host_allocation(alloc, layout):
    """Pools on 2 MiB-page mappings move the same rows as on torch.empty (references on CPU;
    pinned and through the copy engines where CUDA is)."""
    device = "cuda" if HAS_CUDA else "cpu"
    backend, impl = ("direct", "reference") if layout == "page_first_direct" else ("kernel", "reference")
    if HAS_CUDA:
        backend, impl = "direct", "cxx_batch"
        layout = "page_first_direct" if layout == "page_first" else layout
    for direction in ("h2d", "d2h"):
        _run_case(layout, backend, impl, direction, "all", device, seed=41, alloc=alloc)


def test_staged_transfer_refuses_layer_first():
    geo = _geo()
    with pytest.raises(ValueError, match="page_first_direct"):
        KVTransfer(
            build_host_pool(geo, "layer_first", pin=False), build_device_pool(geo, "cpu"), "hybrid", "staged"
        )


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")
@pytest.mark.parametrize("direction", ["h2d", "d2h"])
@pytest.mark.parametrize("ring_pages,slots", [(2, 2), (3, 3), (16, 2)])
def test_staged_ring_transfers(direction, ring_pages, slots):
    """Ring slots reused several times within one transfer (and a ring larger than it)."""
    extra = {"ring_pages": ring_pages, "slots": slots}
    for seed in (3, 4):
        _run_case("page_first_direct", "hybrid", "staged", direction, "all", "cuda", seed=seed, extra=extra)
