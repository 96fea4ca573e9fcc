"""3D batch copies (direct backend, impl ``cxx_3d``) against plain indexing.

The plan (op offsets, widths, merged runs, pitches, the K/V slice stride) is checked on CPU pools
through ``memmove``; tests marked ``gpu`` run the same cases through ``cudaMemcpy3DBatchAsync``
on pinned pools. Every case poisons the destination, so a skipped, misplaced or extra row fails.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gpu_replay.geometry import PoolGeometry  # noqa: E402
from gpu_replay.pools import build_device_pool, build_host_pool  # noqa: E402
from gpu_replay.transfer import KVTransfer  # noqa: E402
from gpu_replay.transfer_batch3d import OpShape, page_ops, shapes_3d  # noqa: E402

POISON = 0x7FC1


def _geo(page: int = 4, v_head_dim: int = 16) -> PoolGeometry:
    return PoolGeometry(
        name="full",
        layer_ids=(1, 3, 5),
        head_num=2,
        head_dim=16,
        v_head_dim=v_head_dim,
        dtype_bytes=2,
        page_size=page,
        device_tokens=24 * page,
        host_tokens=40 * page,
    )


def test_page_ops_merge_runs_adjacent_on_both_sides():
    # pages 3,4,5 -> 7,8,9 form one run; 6 -> 11 breaks it on the destination; 9 -> 12 alone
    sp, dp = np.array([3, 4, 5, 9, 6]), np.array([7, 8, 9, 12, 11])
    so, do, w = page_ops(sp, dp, 100, 100, 100, merge=True)
    assert (
        so.tolist() == [300, 900, 600] and do.tolist() == [700, 1200, 1100] and w.tolist() == [300, 100, 100]
    )
    # sorted by a key first: 3,4,5,6 -> 7,8,9,11 still breaks at 6; 9 last
    so, do, w = page_ops(sp, dp, 100, 100, 100, merge=True, sort_key=sp)
    assert so.tolist() == [300, 600, 900] and w.tolist() == [300, 100, 100]
    # a side whose pages are not page_bytes apart never merges
    so, do, w = page_ops(sp, dp, 100, 400, 100, merge=True)
    assert w.tolist() == [100] * 5 and do.tolist() == [2800, 3200, 3600, 4800, 4400]


def test_shapes_one_op_for_both_components_where_strides_allow():
    # K layers at 1000 + 100 l, V one component stride (300 = 3 rows) later; dst pitched 50
    src = np.array([[1000, 1100, 1200], [1300, 1400, 1500]])
    dst = np.array([[0, 50, 100], [150, 200, 250]])
    assert shapes_3d(src, dst, 50) == [OpShape(1000, 100, 3, 0, 50, 3, height=3, depth=2)]
    # V before K on both sides: V is slice 0
    assert shapes_3d(src[::-1].copy(), dst[::-1].copy(), 50) == [OpShape(1000, 100, 3, 0, 50, 3, 3, 2)]
    # ops wider than the destination's rows: one op per component and layer
    assert len(shapes_3d(src, dst, 60)) == 6
    # V not a whole number of rows after K on one side: one op per component
    dst2 = dst + np.array([[0], [7]])
    assert shapes_3d(src, dst2, 50) == [
        OpShape(1000, 100, 0, 0, 50, 0, 3, 1),
        OpShape(1300, 100, 0, 157, 50, 0, 3, 1),
    ]
    # one layer: a row is the component stride, whatever the layer strides
    assert shapes_3d(src[:, 1:2], dst[:, 1:2], 50) == [OpShape(1100, 300, 1, 50, 150, 1, 1, 2)]
    # K and V in opposite orders on the two sides: per component
    assert len(shapes_3d(src[:, :1], dst[::-1, :1].copy(), 50)) == 2
    # uneven layer strides: one op per component and layer
    src3 = np.array([[1000, 1100, 1250], [1300, 1400, 1550]])
    assert len(shapes_3d(src3, dst, 50)) == 6


def _pools(layout, device, joint, stacked, pin, v_head_dim=16):
    geo = _geo(v_head_dim=v_head_dim)
    host = build_host_pool(geo, layout, pin=pin, alloc="malloc", kv_joint=joint)
    dev = build_device_pool(geo, device, stacked=stacked, kv_joint=joint)
    return geo, host, dev


def _host_rows(host, comp: str, layer: int) -> torch.Tensor:
    buf = host.k if comp == "k" else host.v
    if host.layout == "layer_first":
        return buf[layer]
    return buf[:, layer].reshape(-1, *buf.shape[3:])


def _case(layout, joint, stacked, direction, layers, device, seed, options=None, v_head_dim=16, runs=False):
    gen = torch.Generator().manual_seed(seed)
    geo, host, dev = _pools(layout, device, joint, stacked, device == "cuda", v_head_dim)
    bits = lambda t: t.view(torch.int16)  # noqa: E731
    for t in (host.k, host.v, *dev.k, *dev.v):
        bits(t).copy_(
            torch.randint(-(1 << 14), 1 << 14, t.shape, generator=gen, dtype=torch.int16).to(t.device)
        )
    if runs:  # runs of 3 adjacent pages on both sides, in random order
        hp = (torch.randperm(12, generator=gen)[:4] * 3 + 1)[:, None] + torch.arange(3)
        dp = (torch.randperm(7, generator=gen)[:4] * 3 + 1)[:, None] + torch.arange(3)
        hp, dp = hp.flatten(), dp.flatten()
    else:
        hp = torch.randperm(geo.host_pages - 1, generator=gen)[:9] + 1
        dp = torch.randperm(geo.device_pages - 1, generator=gen)[:9] + 1
    ar = torch.arange(geo.page_size)
    hi, di = (hp[:, None] * geo.page_size + ar).flatten(), (dp[:, None] * geo.page_size + ar).flatten()
    src_rows = {}
    for c in ("k", "v"):
        for lay in range(geo.layer_num):
            dst = _host_rows(host, c, lay) if direction == "d2h" else (dev.k if c == "k" else dev.v)[lay]
            src = (dev.k if c == "k" else dev.v)[lay] if direction == "d2h" else _host_rows(host, c, lay)
            src_rows[c, lay] = src.cpu().clone()
            if lay in layers and direction == "h2d":
                bits(dst)[di.to(dst.device)] = POISON
            elif lay in layers:  # through the buffer itself (a page_first_direct layer is a copy)
                buf = host.k if c == "k" else host.v
                if host.layout == "layer_first":
                    bits(buf[lay])[hi] = POISON
                else:
                    bits(buf)[hp, lay] = POISON
    before = {
        (c, lay): (_host_rows(host, c, lay) if direction == "d2h" else (dev.k if c == "k" else dev.v)[lay])
        .cpu()
        .clone()
        for c in ("k", "v")
        for lay in range(geo.layer_num)
    }
    mover = KVTransfer(host, dev, "direct", "cxx_3d", **(options or {}))
    try:
        mover.transfer(hi, di, layers, direction)
        if device == "cuda":
            torch.cuda.synchronize()
        _expect(host, dev, geo, hi, di, layers, direction, src_rows, before)
    finally:
        host.release()


def _expect(host, dev, geo, hi, di, layers, direction, src_rows, before) -> None:
    bits = lambda t: t.view(torch.int16)  # noqa: E731
    sidx, didx = (hi, di) if direction == "h2d" else (di, hi)
    for c in ("k", "v"):
        for lay in range(geo.layer_num):
            out = (
                _host_rows(host, c, lay) if direction == "d2h" else (dev.k if c == "k" else dev.v)[lay]
            ).cpu()
            want = before[c, lay].clone()
            if lay in layers:
                want[didx] = src_rows[c, lay][sidx]
            assert torch.equal(bits(out), bits(want)), (c, lay)


SCOPES = [(0,), (2,), (0, 1, 2), (0, 2)]


@pytest.mark.parametrize("layout", ["layer_first", "page_first_direct"])
@pytest.mark.parametrize("joint,stacked", [(True, True), (False, True), (True, False), (False, False)])
@pytest.mark.parametrize("direction", ["h2d", "d2h"])
@pytest.mark.parametrize("layers", SCOPES)
def test_cpu_plan_moves_exactly_the_pages(layout, joint, stacked, direction, layers):
    seed = zlib.crc32(repr((layout, joint, stacked, direction, layers)).encode()) % 1000
    _case(layout, joint, stacked, direction, layers, "cpu", seed)
    _case(layout, joint, stacked, direction, layers, "cpu", seed + 1, options={"sort": True}, runs=True)


@pytest.mark.parametrize("direction", ["h2d", "d2h"])
def test_cpu_plan_with_unequal_k_and_v_widths(direction):
    _case("layer_first", True, True, direction, (0, 1, 2), "cpu", 5, v_head_dim=8)


def test_page_first_is_refused():
    geo, host, dev = _pools("page_first", "cpu", True, True, False)
    with pytest.raises(ValueError):
        KVTransfer(host, dev, "direct", "cxx_3d")


def _cuda_ready() -> bool:
    if not torch.cuda.is_available():
        return False
    from gpu_replay.transfer_cuda import cuda_ext_available

    return cuda_ext_available()


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda_ready(), reason="needs CUDA and nvcc")
@pytest.mark.parametrize("layout", ["layer_first", "page_first_direct"])
@pytest.mark.parametrize("joint,stacked", [(True, True), (False, True), (True, False)])
@pytest.mark.parametrize("direction", ["h2d", "d2h"])
@pytest.mark.parametrize("layers", SCOPES)
@pytest.mark.parametrize("options", [{}, {"streams": 2, "max_batch": 2}, {"streams": 1, "sort": True}])
def test_cuda_3d_batch_moves_exactly_the_pages(layout, joint, stacked, direction, layers, options):
    seed = zlib.crc32(repr((layout, joint, stacked, direction, layers, options)).encode()) % 1000
    with torch.cuda.stream(torch.cuda.Stream()):
        _case(layout, joint, stacked, direction, layers, "cuda", seed, options=options)
        _case(layout, joint, stacked, direction, layers, "cuda", seed + 1, options=options, runs=True)
    _case(layout, joint, stacked, direction, layers, "cuda", seed + 2, options=options)  # legacy stream


@pytest.mark.parametrize("layout", ["layer_first", "page_first_direct"])
def test_joint_stacked_pools_take_one_op_per_page(layout):
    """SGLang's [2, ...] host buffer against a joint stacked device pool: every layer and both
    components of a page in one op, for all layers and for one."""
    geo, host, dev = _pools(layout, "cpu", True, True, False)
    mover = KVTransfer(host, dev, "direct", "cxx_3d")._fn
    for layers, height in (((0, 1, 2), 3), ((1,), 1)):
        for direction in ("h2d", "d2h"):
            src, dst, _, _ = mover._bases(("k", "v"), layers, direction)
            shapes = shapes_3d(src, dst, geo.page_size * geo.k_row_bytes)
            assert [(s.height, s.depth) for s in shapes] == [(height, 2)]


def test_shapes_keep_pitches_under_a_cap():
    src = np.array([[1000, 1100, 1200], [1300, 1400, 1500]])
    dst = np.array([[0, 50, 100], [150, 200, 250]])
    # the slice pitch (300) over the cap: one op per component, rows of 100 still allowed
    assert shapes_3d(src, dst, 50, max_pitch=299) == [
        OpShape(1000, 100, 0, 0, 50, 0, 3, 1),
        OpShape(1300, 100, 0, 150, 50, 0, 3, 1),
    ]
    # the row pitch over the cap too: one op per component and layer
    assert len(shapes_3d(src, dst, 50, max_pitch=99)) == 6


def test_shapes_keep_each_op_inside_one_allocation():
    src = np.array([[1000, 1100, 1200], [1300, 1400, 1500]])
    dst = np.array([[0, 50, 100], [150, 200, 250]])
    one = np.zeros((2, 3), dtype=np.int64)
    assert len(shapes_3d(src, dst, 50, allocs=(one, one))) == 1
    # K and V in two allocations on the destination: one op per component
    kv = np.array([[0, 0, 0], [1, 1, 1]])
    assert [(s.height, s.depth) for s in shapes_3d(src, dst, 50, allocs=(one, kv))] == [(3, 1), (3, 1)]
    # every layer its own allocation on the source: one op per component and layer
    lay = np.array([[0, 1, 2], [3, 4, 5]])
    assert len(shapes_3d(src, dst, 50, allocs=(lay, one))) == 6
