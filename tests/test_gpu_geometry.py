"""GPU replay pool geometry (pure Python: runs without torch)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpu_replay.geometry import GIB, cap_rank, rank_geometry, resolve_layout_io
from simulator.errors import ConfigError


def test_gpt_oss_tp2_geometry_from_the_simulator_sizing():
    geo = rank_geometry("gpt-oss-120b", 2, page_size=64, gpu="H100")
    full, swa = geo.pool("full"), geo.pool("swa")
    assert full.layer_ids == tuple(range(1, 36, 2)) and swa.layer_ids == tuple(range(0, 36, 2))
    assert (full.head_num, full.head_dim, full.k_row_bytes) == (4, 64, 512)
    assert full.page_layer_bytes == 64 * 1024
    # SGLang sizes the host pool at hicache_ratio (2.0) x device tokens, in whole pages.
    assert full.host_tokens % 64 == 0 and full.host_tokens >= 2 * full.device_tokens - 64
    assert full.device_rows == full.device_tokens + 64 and full.host_pages == full.host_tokens // 64 + 1


def test_caps_shrink_tokens_but_keep_shapes_and_proportion():
    geo = rank_geometry("gpt-oss-120b", 2, page_size=64, gpu="H100")
    capped = cap_rank(geo, device_cap_bytes=2 * GIB, host_cap_bytes=3 * GIB)
    assert capped.device_bytes <= 2 * GIB and capped.host_bytes <= 3 * GIB
    assert capped.device_bytes > 1.9 * GIB  # not shrunk more than needed
    for before, after in zip(geo.pools, capped.pools, strict=True):
        assert (after.head_num, after.head_dim, after.layer_ids) == (
            before.head_num,
            before.head_dim,
            before.layer_ids,
        )
        assert after.device_tokens % 64 == 0 and after.host_tokens % 64 == 0
    ratio_before = geo.pools[1].device_tokens / geo.pools[0].device_tokens
    ratio_after = capped.pools[1].device_tokens / capped.pools[0].device_tokens
    assert ratio_after == pytest.approx(ratio_before, rel=0.01)
    assert cap_rank(geo, device_cap_bytes=None, host_cap_bytes=None) == geo


def test_layout_backend_resolution_follows_sglang():
    assert resolve_layout_io("page_first_direct", "kernel") == ("page_first_direct", "direct")
    assert resolve_layout_io("page_first", "direct") == ("page_first_direct", "direct")
    assert resolve_layout_io("layer_first", "direct") == ("layer_first", "direct")
    assert resolve_layout_io("page_first", "kernel") == ("page_first", "kernel")
    with pytest.raises(ConfigError):
        resolve_layout_io("page_head", "kernel")
    with pytest.raises(ConfigError):
        resolve_layout_io("layer_first", "kernel_ascend")


def test_simulator_and_geometry_import_without_torch():
    code = (
        "import sys; sys.modules['torch'] = None; import simulator.cli.main, gpu_replay.geometry; print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
