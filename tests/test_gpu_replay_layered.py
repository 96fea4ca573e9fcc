"""Background-issued per-layer copy-engine loads (``gpu_replay.transfer_layered``) against plain
indexing, on CUDA (the issue path is C++ only; CPU runs check the argument errors)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gpu_replay.geometry import PoolGeometry  # noqa: E402
from gpu_replay.pools import build_device_pool, build_host_pool  # noqa: E402

POISON = 0x7FC1


def _geo(v_head_dim: int = 16) -> PoolGeometry:
    return PoolGeometry(
        name="full",
        layer_ids=(1, 3, 5, 7),
        head_num=2,
        head_dim=16,
        v_head_dim=v_head_dim,
        dtype_bytes=2,
        page_size=4,
        device_tokens=96,
        host_tokens=160,
    )


def _cuda_ready() -> bool:
    if not torch.cuda.is_available():
        return False
    from gpu_replay.transfer_cuda import cuda_ext_available

    return cuda_ext_available()


def _bits(t):
    return t.view(torch.int16)


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda_ready(), reason="needs CUDA and nvcc")
@pytest.mark.parametrize("layout", ["layer_first", "page_first_direct"])
@pytest.mark.parametrize("direction", ["h2d", "d2h"])
@pytest.mark.parametrize("options", [{}, {"streams": 3, "max_batch": 2}, {"streams": 1, "batch": False}])
@pytest.mark.parametrize("runs", [False, True])
def test_layered_load_lands_every_layer_in_order(layout, direction, options, runs):
    from gpu_replay.transfer_layered import LayeredCopyLoad

    gen = torch.Generator().manual_seed(7)
    geo = _geo()
    host = build_host_pool(geo, layout, pin=True, alloc="malloc")
    dev = build_device_pool(geo, "cuda")
    try:
        for t in (host.k, host.v, *dev.k, *dev.v):
            _bits(t).copy_(torch.randint(-(1 << 14), 1 << 14, t.shape, generator=gen, dtype=torch.int16))
        if runs:
            hp = ((torch.randperm(13, generator=gen)[:3] * 3 + 1)[:, None] + torch.arange(3)).flatten()
            dp = ((torch.randperm(7, generator=gen)[:3] * 3 + 1)[:, None] + torch.arange(3)).flatten()
        else:
            hp = torch.randperm(geo.host_pages - 1, generator=gen)[:9] + 1
            dp = torch.randperm(geo.device_pages - 1, generator=gen)[:9] + 1
        ar = torch.arange(geo.page_size)
        hi, di = (hp[:, None] * 4 + ar).flatten(), (dp[:, None] * 4 + ar).flatten()

        def host_rows(comp, lay):
            buf = host.k if comp == "k" else host.v
            return buf[lay] if layout == "layer_first" else buf[:, lay].reshape(-1, *buf.shape[3:])

        layers = (3, 0, 2)  # not every layer, not in order
        before = {}
        for c in ("k", "v"):
            for lay in range(geo.layer_num):
                d = (dev.k if c == "k" else dev.v)[lay]
                if lay in layers and direction == "h2d":
                    _bits(d)[di.cuda()] = POISON
                elif lay in layers:
                    buf = host.k if c == "k" else host.v
                    if layout == "layer_first":
                        _bits(buf[lay])[hi] = POISON
                    else:
                        _bits(buf)[hp, lay] = POISON
                before[c, lay] = (host_rows(c, lay).clone(), d.cpu().clone())
        load = LayeredCopyLoad(host, dev, **options)
        with torch.cuda.stream(torch.cuda.Stream()):
            load.start(hi, di, layers, direction)
            seen = []
            for i, lay in enumerate(layers):
                load.wait(i)  # layer i is complete on this stream from here on
                seen.append(
                    (dev.k[lay][di.cuda()].cpu(), dev.v[lay][di.cuda()].cpu()) if direction == "h2d" else None
                )
            load.finish()
            torch.cuda.synchronize()
        for i, lay in enumerate(layers):
            for j, c in enumerate(("k", "v")):
                h_before, d_before = before[c, lay]
                if direction == "h2d":
                    want = d_before.clone()
                    want[di] = h_before[hi]
                    got = (dev.k if c == "k" else dev.v)[lay].cpu()
                    assert torch.equal(_bits(seen[i][j]), _bits(h_before[hi])), (c, lay)
                else:
                    want = h_before.clone()
                    want[hi] = d_before[di]
                    got = host_rows(c, lay)
                assert torch.equal(_bits(got), _bits(want)), (c, lay)
        for lay in set(range(geo.layer_num)) - set(layers):  # untouched layers stay
            for c in ("k", "v"):
                got = (dev.k if c == "k" else dev.v)[lay].cpu() if direction == "h2d" else host_rows(c, lay)
                want = before[c, lay][1] if direction == "h2d" else before[c, lay][0]
                assert torch.equal(_bits(got), _bits(want))
    finally:
        host.release()


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda_ready(), reason="needs CUDA and nvcc")
def test_layered_load_refuses_unequal_widths_and_page_first():
    from gpu_replay.transfer_layered import LayeredCopyLoad

    geo = _geo(v_head_dim=8)
    host = build_host_pool(geo, "layer_first", pin=False, alloc="malloc")
    with pytest.raises(ValueError):
        LayeredCopyLoad(host, build_device_pool(geo, "cuda"))
    geo = _geo()
    host = build_host_pool(geo, "page_first", pin=False, alloc="malloc")
    with pytest.raises(ValueError):
        LayeredCopyLoad(host, build_device_pool(geo, "cuda"))


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda_ready(), reason="needs CUDA and nvcc")
@pytest.mark.parametrize("layout", ["layer_first", "page_first_direct"])
@pytest.mark.parametrize("direction", ["h2d", "d2h"])
def test_graph_copies_move_exactly_the_pages(layout, direction):
    """Reused graphs (same and smaller node counts, disabled spare nodes) land every row."""
    from gpu_replay.transfer_graph import GraphCopyTransfer

    gen = torch.Generator().manual_seed(11)
    geo = _geo()
    host = build_host_pool(geo, layout, pin=True, alloc="malloc")
    dev = build_device_pool(geo, "cuda")
    mover = GraphCopyTransfer(host, dev)
    try:
        for t in (host.k, host.v, *dev.k, *dev.v):
            _bits(t).copy_(torch.randint(-(1 << 14), 1 << 14, t.shape, generator=gen, dtype=torch.int16))

        def host_rows(comp, lay):
            buf = host.k if comp == "k" else host.v
            return buf[lay] if layout == "layer_first" else buf[:, lay].reshape(-1, *buf.shape[3:])

        for n_pages, layers, runs in (
            (9, (0, 1, 2, 3), False),
            (9, (2,), False),
            (6, (1, 3), True),
            (9, (0,), True),
        ):
            if runs:
                hp = (
                    (torch.randperm(13, generator=gen)[: n_pages // 3] * 3 + 1)[:, None] + torch.arange(3)
                ).flatten()
                dp = (
                    (torch.randperm(7, generator=gen)[: n_pages // 3] * 3 + 1)[:, None] + torch.arange(3)
                ).flatten()
            else:
                hp = torch.randperm(geo.host_pages - 1, generator=gen)[:n_pages] + 1
                dp = torch.randperm(geo.device_pages - 1, generator=gen)[:n_pages] + 1
            ar = torch.arange(geo.page_size)
            hi, di = (hp[:, None] * 4 + ar).flatten(), (dp[:, None] * 4 + ar).flatten()
            before = {
                (c, lay): (host_rows(c, lay).clone(), (dev.k if c == "k" else dev.v)[lay].cpu().clone())
                for c in ("k", "v")
                for lay in range(geo.layer_num)
            }
            with torch.cuda.stream(torch.cuda.Stream()):
                mover(hi, di, layers, direction)
            torch.cuda.synchronize()
            for c in ("k", "v"):
                for lay in range(geo.layer_num):
                    h_before, d_before = before[c, lay]
                    if direction == "h2d":
                        want, got = d_before.clone(), (dev.k if c == "k" else dev.v)[lay].cpu()
                        if lay in layers:
                            want[di] = h_before[hi]
                    else:
                        want, got = h_before.clone(), host_rows(c, lay)
                        if lay in layers:
                            want[hi] = d_before[di]
                    assert torch.equal(_bits(got), _bits(want)), (n_pages, layers, c, lay)
    finally:
        mover.close()
        host.release()
