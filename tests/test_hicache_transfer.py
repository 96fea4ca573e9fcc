"""HiCache transfer times (simulator/cost/hicache_transfer.py): hand-computed values, the
layer-wise overlap against a step-by-step pipeline, and the defaults against kvplan's own H100
measurements in gpu_replay/results."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from simulator.cost.hicache_transfer import (
    HostTransferModel,
    PoolGeometry,
    TransferCoefficients,
    TransferGeometry,
    exposed_load_time,
    storage_time,
    transfer_geometry,
)
from simulator.cost.profile import validate_profile
from simulator.errors import ConfigError
from simulator.gpus import get_gpu
from simulator.hicache_args import StorageTier
from simulator.models import load_model

RESULTS = Path(__file__).resolve().parents[1] / "gpu_replay" / "results"
H100 = get_gpu("H100")
C = TransferCoefficients(
    h2d_peak_gbps=50,
    d2h_peak_gbps=40,
    kernel_efficiency_h2d=0.8,
    kernel_efficiency_d2h=1.0,
    kernel_call_overhead_h2d_s=1e-5,
    kernel_call_overhead_d2h_s=2e-5,
    direct_copy_overhead_h2d_s=1e-6,
    direct_copy_overhead_d2h_s=3e-6,
)
GEO = TransferGeometry(PoolGeometry(2, 1000), PoolGeometry(3, 500))


def test_kernel_times_by_hand():
    m = HostTransferModel(H100, "kernel", "layer_first", 16, C)
    # load: 1000 tokens x 2 layers x 1000 B = 2e6 B at 50 x 0.8 GB/s = 50 us, plus 2 calls x 10 us
    assert m.load_time(GEO, 1000) == pytest.approx(70e-6)
    # + SWA 200 tokens x 3 layers x 500 B = 3e5 B at 40 GB/s = 7.5 us, plus 3 calls x 10 us
    assert m.load_time(GEO, 1000, 200) == pytest.approx(70e-6 + 37.5e-6)
    # backup: 2e6 B at 40 x 1.0 GB/s = 50 us, one all-layer call of 20 us per pool
    assert m.backup_time(GEO, 1000) == pytest.approx(70e-6)
    assert m.backup_time(GEO, 1000, 200) == pytest.approx(70e-6 + 7.5e-6 + 20e-6)
    assert m.load_time(GEO, 0, 0) == 0.0


def test_direct_times_by_hand():
    m = HostTransferModel(H100, "direct", "page_first_direct", 16, C)
    # 1000 tokens = 63 pages of 16; 63 x 2 layers x 2 (K, V) = 252 copies of 1 us; 2e6 B at 50 GB/s
    assert m.load_time(GEO, 1000) == pytest.approx(252e-6 + 40e-6)
    # D2H: 252 copies x 3 us + 2e6 B at 40 GB/s
    assert m.backup_time(GEO, 1000) == pytest.approx(756e-6 + 50e-6)


def test_peaks_default_to_the_gpu_preset():
    m = HostTransferModel(H100, "kernel", "page_first", 1)
    assert m.peak_gbps == {"h2d": 55.2, "d2h": 55.2}
    assert m.bandwidth_gbps("h2d") == pytest.approx(55.2 * 0.879)
    assert HostTransferModel(H100, "direct", "layer_first", 1).bandwidth_gbps("d2h") == 55.2


def test_exposed_load_by_hand():
    # l = 1 ms, c = 2 ms: everything after the first layer's load hides.
    assert exposed_load_time(10e-3, 20e-3, 10) == pytest.approx(1e-3)
    # l = 3 ms, c = 1 ms: 30 ms - 9 x 1 ms = 21 ms exposed.
    assert exposed_load_time(30e-3, 10e-3, 10) == pytest.approx(21e-3)
    # half the window usable: 30 - 0.5 x 9 = 25.5 ms
    assert exposed_load_time(30e-3, 10e-3, 10, 0.5) == pytest.approx(25.5e-3)
    assert exposed_load_time(0.0, 1.0, 10) == 0.0


def _pipeline_end(load: float, compute: float, layers: int) -> float:
    """The forward's end when layer i's compute waits for layer i's load (loads back to back)."""
    end = 0.0
    for i in range(layers):
        end = max(end, (i + 1) * load / layers) + compute / layers
    return end


def test_exposed_load_matches_the_layer_pipeline():
    rng = random.Random(7)
    for _ in range(200):
        load, compute, layers = rng.uniform(0, 0.05), rng.uniform(0, 0.05), rng.randint(1, 80)
        expected = _pipeline_end(load, compute, layers) - compute
        assert exposed_load_time(load, compute, layers) == pytest.approx(expected, abs=1e-12)


def test_storage_time_by_hand():
    tier = StorageTier("sim", 0, read_gbps=2.0, write_gbps=1.0, op_latency_s=100e-6)
    assert storage_time(tier, "write", 10**9, ops=3) == pytest.approx(1.0003)
    assert storage_time(tier, "read", 10**9) == pytest.approx(0.5001)
    infinite = StorageTier("sim", 0, read_gbps=0.0, write_gbps=0.0, op_latency_s=0.0)
    assert storage_time(infinite, "read", 10**12) == 0.0
    with pytest.raises(ConfigError):
        storage_time(tier, "sideways", 1)


def test_gpt_oss_geometry_at_tp2():
    g = transfer_geometry(load_model("gpt-oss-120b"), 2, 2)
    # 4 KV heads per rank x 64 x 2 (K, V) x 2 B on each of 18 full and 18 SWA layers
    assert g.full == PoolGeometry(18, 1024) and g.swa == PoolGeometry(18, 1024) and g.layers == 36


def _measured(impl: str, layout: str, direction: str) -> dict[int, float]:
    d = json.loads((RESULTS / "gpu_cuda_transfer-h100-2026-11-26-run3.json").read_text())
    out: dict[int, float] = {}
    for r in d["per_layer"]:
        if r["impl"].split("[")[0] == impl and r["layout"] == layout and r["direction"] == direction:
            out[r["prefix"]] = min(out.get(r["prefix"], 1.0), r["median_s"])
    return out


@pytest.mark.parametrize(
    ("impl", "io", "layout", "direction", "tolerance"),
    [
        ("cuda", "kernel", "layer_first", "h2d", 0.05),
        ("cuda", "kernel", "layer_first", "d2h", 0.05),
        ("cuda", "kernel", "page_first", "h2d", 0.05),
        ("cxx_loop", "direct", "layer_first", "h2d", 0.15),
        ("cxx_loop", "direct", "layer_first", "d2h", 0.15),
        ("cxx_loop", "direct", "page_first_direct", "h2d", 0.2),
    ],
)
def test_defaults_reproduce_kvplans_h100_per_layer_transfers(impl, io, layout, direction, tolerance):
    """One layer of one request's pages (gpt-oss-120b TP 2 full pool, page 64), 1k-32k tokens."""
    m = HostTransferModel(H100, io, layout, 64)
    one_layer = PoolGeometry(1, 1024)
    measured = _measured(impl, layout, direction)
    assert len(measured) == 6
    for prefix, seconds in measured.items():
        model = m.pool_time(direction, prefix, one_layer, per_layer=True)
        assert model == pytest.approx(seconds, rel=tolerance), (prefix, model, seconds)


def test_profile_section_overrides_and_is_validated():
    p = validate_profile({"version": 1, "hicache_transfer": {"kernel_efficiency_h2d": 0.5}})
    c = TransferCoefficients.from_profile(p["hicache_transfer"])
    assert c.kernel_efficiency_h2d == 0.5 and c.kernel_efficiency_d2h == 0.908
    with pytest.raises(ConfigError, match="did you mean"):
        validate_profile({"version": 1, "hicache_transfer": {"kernel_efficency_h2d": 0.5}})
    with pytest.raises(ConfigError):
        validate_profile({"version": 1, "hicache_transfer": {"h2d_peak_gbps": -1}})
    with pytest.raises(ConfigError):
        HostTransferModel(H100, "kernel_ascend", "page_first_direct", 1)


def test_from_resolved_flags_and_profile():
    from simulator.hicache_args import HiCacheArgs, resolve_hicache_args

    resolved = resolve_hicache_args(HiCacheArgs(hicache_ratio=2.0, hicache_io_backend="direct"))
    profile = validate_profile({"version": 1, "hicache_transfer": {"direct_copy_overhead_h2d_s": 1e-6}})
    m = HostTransferModel.from_resolved(H100, resolved, 16, profile)
    assert (m.io_backend, m.mem_layout, m.c.direct_copy_overhead_h2d_s) == (
        "direct",
        "page_first_direct",
        1e-6,
    )
    assert HostTransferModel.from_resolved(H100, resolved, 16).c == TransferCoefficients()
