"""The write-back's first-call term (``kernel_first_call_extra_d2h_s``,
simulator/cost/hicache_transfer.py): absent or 0 prices exactly as before; set, a write-back
submission pays it once (one flush, however many pools), a load-back never, the direct
io-backend never; a profile carries it, and a served HiCache run's write-backs take it."""

from __future__ import annotations

import pytest

from simulator.cost.hicache_transfer import HostTransferModel, TransferCoefficients, transfer_geometry
from simulator.cost.profile import validate_profile
from simulator.errors import ConfigError
from simulator.gpus import get_gpu
from simulator.hicache_args import HiCacheArgs, resolve_hicache_args
from simulator.models import load_model

H100 = get_gpu("H100")
GEO = transfer_geometry(load_model("gpt-oss-120b"), 2, 2)
EXTRA = 2.9e-5


def _model(backend: str = "kernel", **kw) -> HostTransferModel:
    return HostTransferModel(H100, backend, "layer_first", 64, TransferCoefficients(**kw))


def test_default_is_zero_and_prices_bit_for_bit_as_before():
    assert TransferCoefficients().kernel_first_call_extra_d2h_s == 0.0
    plain, zero = _model(), _model(kernel_first_call_extra_d2h_s=0.0)
    for full, swa in ((0, 0), (64, 0), (64, 64), (4096, 128), (12_345, 77)):
        t = plain.pool_time("d2h", full, GEO.full, per_layer=False)
        t += plain.pool_time("d2h", swa, GEO.swa, per_layer=False)
        assert plain.backup_time(GEO, full, swa) == t  # exact: nothing added
        assert zero.backup_time(GEO, full, swa) == t


def test_a_submission_pays_the_extra_once():
    plain, m = _model(), _model(kernel_first_call_extra_d2h_s=EXTRA)
    for full, swa in ((64, 0), (0, 64), (4096, 128)):
        assert m.backup_time(GEO, full, swa) == pytest.approx(
            plain.backup_time(GEO, full, swa) + EXTRA, abs=1e-15
        )
    assert m.backup_time(GEO, 0, 0) == 0.0  # nothing moved, no call
    assert m.load_time(GEO, 4096, 128) == plain.load_time(GEO, 4096, 128)  # loads: not a write-back
    # one page: the first call's overhead + extra, then the bytes at the kernel's rate
    nbytes = 64 * GEO.full.bytes_per_token
    want = m.c.kernel_call_overhead_d2h_s + EXTRA + nbytes / (m.bandwidth_gbps("d2h") * 1e9)
    assert m.backup_time(GEO, 64) == pytest.approx(want, rel=1e-12)


def test_direct_io_backend_does_not_take_it():
    plain, m = _model("direct"), _model("direct", kernel_first_call_extra_d2h_s=EXTRA)
    assert m.backup_time(GEO, 4096, 128) == plain.backup_time(GEO, 4096, 128)


def test_profile_carries_and_checks_it():
    prof = {"version": 1, "hicache_transfer": {"kernel_first_call_extra_d2h_s": EXTRA}}
    hc = resolve_hicache_args(HiCacheArgs(hicache_ratio=2.0, hicache_io_backend="kernel"))
    m = HostTransferModel.from_resolved(H100, hc, 64, validate_profile(prof))
    assert m.c.kernel_first_call_extra_d2h_s == EXTRA
    with pytest.raises(ConfigError, match="kernel_first_call_extra_d2h_s"):
        validate_profile({"version": 1, "hicache_transfer": {"kernel_first_call_extra_d2h_s": -1e-6}})
    with pytest.raises(ConfigError, match="did you mean 'kernel_first_call_extra_d2h_s'"):
        validate_profile({"version": 1, "hicache_transfer": {"kernel_first_call_extra_d2h": 1e-6}})


def _served_records(extra: float) -> list:
    """A, backed up (write-through), demoted by B, loaded back for C (test_hicache_engine's
    scenario), with the write-back's first-call extra set to ``extra``."""
    from test_hicache_engine import POOLS, _req, _serve

    from simulator.cost.hicache_transfer import PoolGeometry, TransferGeometry
    from simulator.engine.hicache_steps import HiCacheSetup

    resolved = resolve_hicache_args(HiCacheArgs(enable_hierarchical_cache=True, hicache_ratio=2.0))
    coeffs = TransferCoefficients(kernel_first_call_extra_d2h_s=extra)
    transfer = HostTransferModel(H100, "kernel", "page_first", POOLS.page_size, coeffs)
    geometry = TransferGeometry(PoolGeometry(2, 4096), PoolGeometry(6, 4096))
    setup = HiCacheSetup(2048, 2048, resolved, transfer, geometry)
    a = _req("a", list(range(1000, 1030)), 480)
    b = _req("b", list(range(5000, 5057)), 900)
    c = _req("c", list(range(1000, 1030)) + list(range(7000, 7010)), 640)
    server, _, _ = _serve(setup, [(0.0, a), (1.0, b), (2.0, c)])
    return server.hicache.records


def test_a_served_run_prices_each_write_back_submission_with_it():
    """The engine's write-back (hicache_steps ``_submit`` -> ``backup_time``): each D2H operation
    takes exactly the extra more, each H2D load-back the same time as without it."""
    plain, extra = _served_records(0.0), _served_records(EXTRA)
    dirs = [r.direction for r in plain]
    assert "d2h" in dirs and "h2d" in dirs and dirs == [r.direction for r in extra]
    for p, e in zip(plain, extra, strict=True):
        assert (p.full_tokens, p.swa_tokens) == (e.full_tokens, e.swa_tokens)
        want = (p.done_s - p.start_s) + (EXTRA if p.direction == "d2h" else 0.0)
        assert e.done_s - e.start_s == pytest.approx(want, abs=1e-12)
