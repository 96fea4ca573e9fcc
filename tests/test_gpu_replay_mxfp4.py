"""MXFP4 experts (gpu_replay/mxfp4_moe.py): the E2M1/E8M0 layout, the routing alignment, and the
Triton kernel against the torch reference (on CPU through Triton's interpreter, float32
activations: the interpreter mishandles bf16 loads; on CUDA with bf16)."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
os.environ.setdefault("TRITON_INTERPRET", "0" if torch.cuda.is_available() else "1")

from gpu_replay.mxfp4_moe import (  # noqa: E402
    FP4_VALUES,
    MoEWeights,
    align,
    bits_per_weight,
    dequantize,
    max_blocks,
    moe_reference,
    quantize,
    random_weights,
)

DEV = "cuda" if torch.cuda.is_available() else "cpu"
DT = torch.bfloat16 if DEV == "cuda" else torch.float32


def test_e2m1_table_and_bits():
    assert FP4_VALUES[:8] == (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
    assert [-v for v in FP4_VALUES[:8]] == list(FP4_VALUES[8:])
    assert bits_per_weight(True) == 4.25 and bits_per_weight(False) == 16.0


def test_dequantize_by_hand():
    # one expert, K = 32 (one group), N = 1: codes 0..15 twice, scale 2^1
    codes = torch.arange(32) % 16
    packed = (codes[0::2] | (codes[1::2] << 4)).to(torch.uint8).reshape(1, 16, 1)
    scales = torch.full((1, 1, 1), 128, dtype=torch.uint8)
    got = dequantize(packed, scales).reshape(-1).tolist()
    assert got == [2.0 * FP4_VALUES[c] for c in codes.tolist()]


def test_quantize_exact_values_round_trip():
    gen = torch.Generator().manual_seed(3)
    codes = torch.randint(0, 16, (2, 64, 5), generator=gen)
    codes[:, ::32] = 7  # every group holds a 6 (the top code), so its scale is recovered exactly
    scales = torch.randint(120, 130, (2, 2, 5), generator=gen)
    lut = torch.tensor(FP4_VALUES)
    w = lut[codes] * torch.exp2(scales.float() - 127).repeat_interleave(32, dim=1)
    packed, sc = quantize(w)
    assert torch.equal(sc.long(), scales)
    assert torch.equal(dequantize(packed, sc), w)


def test_quantize_rejects_ragged_k():
    with pytest.raises(ValueError):
        quantize(torch.zeros(1, 48, 2))


def _align_by_hand(ids: list[int], experts: int, bm: int) -> tuple[list[int], list[int]]:
    rows, eid = [], []
    for e in range(experts):
        mine = [p for p, x in enumerate(ids) if x == e]
        while mine:
            block, mine = mine[:bm], mine[bm:]
            rows += block + [len(ids)] * (bm - len(block))
            eid.append(e)
    nb = max_blocks(len(ids), experts, bm)
    assert len(eid) <= nb
    return rows + [len(ids)] * (bm * (nb - len(eid))), eid + [-1] * (nb - len(eid))


@pytest.mark.parametrize("seed", range(6))
def test_align_matches_a_hand_loop(seed):
    gen = torch.Generator().manual_seed(seed)
    experts, bm = [4, 8, 128][seed % 3], [2, 4, 16][seed % 3]
    ids = torch.randint(0, experts, (1 + seed * 7, 2), generator=gen)
    rows, eid = align(ids, experts, bm)
    want_rows, want_eid = _align_by_hand(ids.reshape(-1).tolist(), experts, bm)
    assert rows.tolist() == want_rows and eid.tolist() == want_eid


def _small(mxfp4: bool | None, seed: int = 1) -> MoEWeights:
    """Small layer: MXFP4 (True), bf16 / float32 on CPU (False), or e4m3 experts (None)."""
    w = random_weights(8, 64, 96, mxfp4=False, device=DEV, seed=seed)
    router = w.router.to(DT)
    if mxfp4 is None:
        return MoEWeights(router, up=w.up.to(torch.float8_e4m3fn), down=w.down.to(torch.float8_e4m3fn))
    if not mxfp4:
        return MoEWeights(router, up=w.up.to(DT), down=w.down.to(DT))
    up_p, up_s = quantize(w.up.float())
    dn_p, dn_s = quantize(w.down.float())
    return MoEWeights(router, up_packed=up_p, up_scales=up_s, down_packed=dn_p, down_scales=dn_s)


@pytest.mark.parametrize("mxfp4", [True, False, None, "dot_scaled"])
@pytest.mark.parametrize("cfg", [(16, 32, 64, 4, 1), (16, 16, 128, 4, 1)])
def test_kernel_matches_reference(mxfp4, cfg):
    pytest.importorskip("triton")
    from gpu_replay._mxfp4_kernel import moe_forward

    ds = mxfp4 == "dot_scaled"
    dt = torch.bfloat16 if ds else DT  # tl.dot_scaled takes bf16 activations, also on CPU
    w = _small(True if ds else mxfp4)
    w.router = w.router.to(dt)
    x = torch.randn(5, 64, generator=torch.Generator().manual_seed(2)).to(DEV, dt)
    ref = moe_reference(x, w, 2)
    got = moe_forward(x, w, 2, cfg, cfg, 8, dot_scaled=ds).float()
    assert float((got - ref).norm() / ref.norm()) < (2e-2 if dt == torch.bfloat16 else 1e-5)


def test_kernel_sees_a_wrong_scale():
    """The check is not vacuous: one scale byte off by one doubles part of an expert."""
    pytest.importorskip("triton")
    from gpu_replay._mxfp4_kernel import moe_forward

    w = _small(True)
    x = torch.randn(5, 64, generator=torch.Generator().manual_seed(2)).to(DEV, DT)
    ref = moe_reference(x, w, 2)
    w.up_scales += 1
    got = moe_forward(x, w, 2, (16, 32, 64, 4, 1), (16, 32, 64, 4, 1), 8).float()
    assert float((got - ref).norm() / ref.norm()) > 0.1


def test_moe_forward_needs_one_block_rows():
    pytest.importorskip("triton")
    from gpu_replay._mxfp4_kernel import moe_forward

    w = _small(False)
    with pytest.raises(ValueError):
        moe_forward(torch.zeros(1, 64, dtype=DT, device=DEV), w, 2, (16, 32, 64, 4, 1), (32, 32, 64, 4, 1), 8)
