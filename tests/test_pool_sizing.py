"""Pool sizing against SGLang 0.5.23's formulas, with hand-derived expected numbers."""

from __future__ import annotations

import pytest

from simulator.cost import derive_geometry
from simulator.errors import ConfigError
from simulator.gpus import get_gpu
from simulator.kv_geometry import (
    DSV4_LATENT_BYTES_PER_TOKEN,
    dsv4_indexer_bytes_per_token,
    dsv4_paged_bytes_per_token,
    full_layer_kv_bytes,
    kv_bytes_per_token_per_rank,
    swa_layer_kv_bytes,
)
from simulator.models import get_model, model_from_spec_dict, model_names
from simulator.pool_sizing import GIB, compute_pool_sizes, compute_pool_sizes_from_budget
from simulator.server_args import ServerArgs, resolve_server_args

GPT_OSS = get_model("gpt-oss-120b")
BUDGET_20 = 20 * GIB


def sized(model=GPT_OSS, budget=BUDGET_20, **kw):
    return compute_pool_sizes_from_budget(model, budget, ServerArgs(**kw))


def test_reference_worked_example():
    # sglang-kv-internals.md §1.2 item 8: F = S = 8 x 128 x 2 = 2048 B per layer; r = 0.8
    # cell = 2048*18 + 0.8*2048*18 = 66355.2; 20 GiB -> 323634 -> page 64 -> 323584 full;
    # int(323584 * 0.8) = 258867 -> 258816 SWA.
    p = sized(page_size=64, swa_full_tokens_ratio=0.8)
    assert p.cell_size == pytest.approx(66355.2)
    assert (p.full_tokens, p.swa_tokens) == (323584, 258816)
    assert p.configurator == "HybridSWAPoolConfigurator"
    # Allocated device bytes include one padding page per pool.
    assert p.full_bytes == (323584 + 64) * 36864
    assert p.swa_bytes == (258816 + 64) * 36864


def test_default_ratio_is_0_8():
    assert sized(page_size=64).swa_tokens == 258816


def test_swa_pool_too_small_raises():
    with pytest.raises(ConfigError, match=r"SWA pool \(0 tokens\) cannot hold even one request"):
        sized(page_size=64, swa_full_tokens_ratio=0.0001)


def test_swa_floor_boundary_is_window_plus_page():
    # page 1, ratio 1: cell = 2 x 18 x 2048 = 73728 B; window 127 -> need swa > 128.
    with pytest.raises(ConfigError, match=r"sliding_window_size \(127\) \+ page_size \(1\)"):
        sized(budget=128 * 73728, page_size=1, swa_full_tokens_ratio=1.0)
    p = sized(budget=129 * 73728, page_size=1, swa_full_tokens_ratio=1.0)
    assert p.swa_tokens == 129


def test_max_total_tokens_caps_and_recomputes_swa():
    p = sized(page_size=64, max_total_tokens=100_000)
    assert p.capped_by_max_total_tokens and p.profiled_max_total_tokens == 323584
    # floor_page(100000) = 99968; int(99968 * 0.8) = 79974 -> 79936.
    assert (p.full_tokens, p.swa_tokens) == (99968, 79936)


def test_max_total_tokens_above_profile_is_ignored_with_note():
    p = sized(page_size=64, max_total_tokens=10_000_000)
    assert not p.capped_by_max_total_tokens and p.full_tokens == 323584
    assert any("larger than the profiled value" in n for n in p.notes)


def test_cap_can_trigger_swa_floor():
    with pytest.raises(ConfigError, match="cannot hold even one request"):
        sized(page_size=64, max_total_tokens=200)


def test_gemma3_sized_as_all_full():
    p = sized(model=get_model("Gemma-3-27B"), budget=10 * GIB, page_size=1)
    assert p.configurator == "DefaultPoolConfigurator" and not p.hybrid_swa
    assert p.full_bytes_per_token == 16 * 256 * 2 * 62 == 507904  # 496 KiB, reference Table 1
    assert p.full_tokens == 10 * GIB // 507904
    assert p.swa_tokens == 0 and p.swa_bytes == 0


def test_disable_hybrid_swa_memory_flag():
    p = sized(page_size=64, disable_hybrid_swa_memory=True)
    assert p.configurator == "DefaultPoolConfigurator"
    assert p.full_bytes_per_token == 36 * 2048


def test_kv_head_floor_at_high_tp():
    # gpt-oss has 8 KV heads: tp 8 and tp 16 both keep one head per rank.
    p8, p16 = sized(tp_size=8, page_size=64), sized(tp_size=16, page_size=64)
    assert p8.full_bytes_per_token == p16.full_bytes_per_token == 18 * 1 * 128 * 2
    mimo = sized(model=get_model("MiMo-V2-Flash"), tp_size=8, page_size=64)
    assert mimo.full_bytes_per_token == 9 * 1 * (192 + 128) * 2  # 4 heads // 8 -> floor 1
    assert mimo.swa_bytes_per_token == 39 * 1 * (192 + 128) * 2  # 8 heads // 8 -> 1


def test_fp8_kv_halves_bytes():
    assert sized(page_size=64, kv_cache_dtype="fp8_e4m3").cell_size == pytest.approx(66355.2 / 2)


def test_hicache_ratio_two_host_pools():
    p = sized(page_size=64, hicache_ratio=2.0)
    # HostKVCache: int(device x ratio) // page + 1 padding page.
    assert p.host_full_tokens == (323584 * 2 // 64 + 1) * 64 == 647232
    assert p.host_swa_tokens == (258816 * 2 // 64 + 1) * 64 == 517696
    assert p.host_full_bytes == 647232 * 36864


def test_hicache_size_split_by_device_bytes():
    p = sized(page_size=64, hicache_size=100)
    full_dev, swa_dev = (323584 + 64) * 36864, (258816 + 64) * 36864
    share = 100 * full_dev / (full_dev + swa_dev)
    assert p.host_full_tokens == (int(share * 1e9 // 36864) // 64 + 1) * 64
    total = p.host_full_bytes + p.host_swa_bytes
    assert 100e9 - 2 * 36864 < total <= 100e9 + 2 * 64 * 36864
    assert p.host_full_tokens / p.host_swa_tokens == pytest.approx(full_dev / swa_dev, rel=1e-3)


def test_hicache_size_single_pool_for_non_hybrid():
    p = sized(model=get_model("Gemma-3-27B"), budget=10 * GIB, page_size=1, hicache_size=50)
    assert p.host_full_tokens == int(50e9 // 507904) + 1 and p.host_swa_tokens == 0


def test_hicache_default_ratio_is_2():
    p = sized(page_size=64, enable_hierarchical_cache=True)
    assert p.hicache_ratio == 2.0 and p.host_full_tokens == 647232


def test_step35_hicache_forces_ratio_one_and_single_pool():
    p = sized(model=get_model("Step-3.5-Flash"), page_size=64, hicache_ratio=2.0)
    assert not p.hybrid_swa and p.swa_full_tokens_ratio == 1.0


def test_max_running_requests_resolution():
    # resolve_max_num_reqs: clamp(int(tokens / ctx * 512), 2048, 4096), at most tokens // 2.
    assert sized(page_size=64).max_running_requests == 2048  # 323584/131072*512 = 1264 -> 2048
    assert sized(page_size=64, context_length=4096).max_running_requests == 4096
    small = sized(budget=GIB, page_size=1)  # 16181 tokens
    assert small.full_tokens == 16181 and small.max_running_requests == 2048
    p = sized(budget=GIB, page_size=1, max_running_requests=100_000)
    assert p.max_running_requests == 16181 // 2
    assert any("reduced from the requested 100000" in n for n in p.notes)


def test_request_cap_configurator():
    # radix off + --max-running-requests: SWA = ceil_page((127 + 128 + 64 + 64) * 32 + 2 * 8192 + 64).
    p = sized(page_size=64, disable_radix_cache=True, max_running_requests=32, chunked_prefill_size=8192)
    assert p.configurator == "SWARequestCapPoolConfigurator"
    assert p.swa_tokens == 28736
    assert p.full_tokens == int((BUDGET_20 - 28736 * 36864) // 36864) // 64 * 64 == 553792


# ---- GPU memory model -----------------------------------------------------------------------


def test_mem_fraction_default_heuristic():
    h100, h200, b200 = get_gpu("H100"), get_gpu("H200"), get_gpu("B200")
    # H100 tp1: reserved = 512 + 8192*1.5 + 128 + 256*2 + 58 prefill buckets * 8 = 13904 MB;
    # round((81559 - 13904) / 81559, 3) = 0.83 (reference §1.2 item 9: "about 0.83").
    assert resolve_server_args(GPT_OSS, h100, ServerArgs()).mem_fraction_static == 0.83
    assert resolve_server_args(GPT_OSS, h200, ServerArgs()).mem_fraction_static == 0.903
    assert resolve_server_args(GPT_OSS, b200, ServerArgs()).mem_fraction_static == 0.854
    # tp 8: +1024 parallel slack, decode graph max_bs 512.
    assert resolve_server_args(GPT_OSS, h100, ServerArgs(tp_size=8)).mem_fraction_static == 0.812
    # Gemma 4 is a VLM: no prefill graph reserve, then x 0.95 (ViT size unknown -> factor 1).
    g4 = resolve_server_args(get_model("Gemma-4-31B"), h100, ServerArgs())
    assert g4.mem_fraction_static == pytest.approx(0.835 * 0.95)


def test_gpu_memory_plan_arithmetic():
    h100 = get_gpu("H100")
    p = compute_pool_sizes(GPT_OSS, h100, ServerArgs())
    m = p.memory
    assert m is not None and m.mem_fraction_static == 0.83
    assert m.weight_bytes_per_rank == GPT_OSS.weight_bytes
    expected = h100.preload_free_bytes - GPT_OSS.weight_bytes - h100.preload_free_bytes * (1 - 0.83)
    assert abs(m.kv_budget_bytes - expected) < 1024
    assert p.kv_budget_bytes == m.kv_budget_bytes
    assert p.full_tokens == int(m.kv_budget_bytes // 66355.2)  # page 1


def test_weights_that_do_not_fit_raise():
    with pytest.raises(ConfigError, match="Raise --mem-fraction-static above"):
        compute_pool_sizes(get_model("MiMo-V2-Flash"), get_gpu("H100"), ServerArgs(tp_size=4))


def test_model_without_weights_needs_budget():
    toy = model_from_spec_dict(
        {
            "name": "toy",
            "layer_types": ["swa", "full"],
            "num_kv_heads": 2,
            "head_dim": 64,
            "sliding_window": 64,
        }
    )
    with pytest.raises(ConfigError, match="no weight size"):
        compute_pool_sizes(toy, get_gpu("H100"), ServerArgs())
    assert compute_pool_sizes_from_budget(toy, GIB, ServerArgs()).full_tokens > 0


def test_page_size_follows_backend_defaults():
    b200 = get_gpu("B200")
    assert compute_pool_sizes(GPT_OSS, b200, ServerArgs()).page_size == 64  # trtllm_mha
    assert compute_pool_sizes(GPT_OSS, b200, ServerArgs(page_size=32)).page_size == 32
    mimo = get_model("MiMo-V2-Flash")
    assert compute_pool_sizes(mimo, b200, ServerArgs(tp_size=4, page_size=64)).page_size == 128  # FA4
    assert compute_pool_sizes(GPT_OSS, get_gpu("H100"), ServerArgs()).page_size == 1


def test_mimo_seed_000_setting():
    """Seed 000 (PR 17220) ran MiMo-V2-Flash at TP 4, --mem-fraction-static 0.7, page 64, ratio 0.2;
    its decode log implies ~894k full / ~179k SWA tokens. Our GPU model gives about twice that on
    H200 and does not fit on H100 (documented in docs/pool-sizing.md); pinned here as regression."""
    mimo = get_model("MiMo-V2-Flash")
    args = ServerArgs(tp_size=4, mem_fraction_static=0.7, page_size=64, swa_full_tokens_ratio=0.2)
    p = compute_pool_sizes(mimo, get_gpu("H200"), args)
    assert p.cell_size == 9 * 640 + 0.2 * 39 * 1280 == 15744
    assert (p.full_tokens, p.swa_tokens) == (1726976, 345344)
    with pytest.raises(ConfigError, match="Loaded weights leave no GPU memory"):
        compute_pool_sizes(mimo, get_gpu("H100"), args)


# ---- DeepSeek-V4 ----------------------------------------------------------------------------


def test_dsv4_flash_sizing():
    dsv4 = get_model("DeepSeek-V4-Flash")
    p = compute_pool_sizes_from_budget(dsv4, 50 * GIB, ServerArgs(tp_size=4))
    assert p.configurator == "DSV4PoolConfigurator"
    assert p.page_size == 256 and p.swa_full_tokens_ratio == 0.1
    # V4 layout 584 B/token padded to 576-byte rows: 585 B at 256- and 64-token pages, 864 at 2.
    # SWA slot: 585 x 43 + 8/256 x (8192 + 2048) x 21 = 31875; full token: 0.1 x 31875 +
    # (585/4 + 132/4) x 21 + 864/128 x 20 = 7086.75.
    assert p.cell_size == pytest.approx(7086.75)
    # c128 compress state for 256 + 1 request slots: ceil128(257*128 + 129) rows x 1024 x 4 B x 20.
    assert p.fixed_bytes == 33152 * 1024 * 4 * 20
    assert p.full_tokens == int((50 * GIB - p.fixed_bytes) / 7086.75) // 256 * 256 == 7192320
    assert p.swa_tokens == 719104
    assert p.max_running_requests == 256
    assert p.c4_state_pool_size == 719104 // 256 * 8 and p.c128_state_pool_size == 257 * 128


def test_dsv4_rejects_hicache_size():
    with pytest.raises(ConfigError, match="does not support --hicache-size"):
        compute_pool_sizes_from_budget(get_model("DeepSeek-V4-Flash"), 50 * GIB, ServerArgs(hicache_size=100))


# ---- flag validation ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({"swa_full_tokens_ratio": 0.0}, "range"),
        ({"swa_full_tokens_ratio": 1.5}, "range"),
        ({"tp_size": 0}, "tp-size"),
        ({"page_size": 0}, "page-size"),
        ({"kv_cache_dtype": "int3"}, "kv-cache-dtype"),
        ({"hicache_ratio": -1.0}, "hicache-ratio"),
        ({"disable_radix_cache": True, "hicache_ratio": 2.0}, "mutually exclusive"),
    ],
)
def test_bad_flags(kw, msg):
    with pytest.raises(ConfigError, match=msg):
        ServerArgs(**kw)


def test_budget_must_be_positive():
    with pytest.raises(ConfigError, match="positive"):
        sized(budget=0)


def test_non_compress_arch_allocates_swa_with_full_geometry():
    # kv_cache_configurator.py::_build_hybrid_swa_kv_pool passes SWA heads/dims only for
    # is_hybrid_swa_compress archs (MiMo-V2, Gemma 4, ...): sizing prices SWA geometry, the
    # allocation uses the full one.
    spec = {
        "name": "odd-gpt-oss",
        "architecture": "GptOssForCausalLM",
        "layer_types": ["swa", "full"] * 4,
        "num_kv_heads": 8,
        "swa_num_kv_heads": 4,
        "head_dim": 64,
        "sliding_window": 127,
    }
    p = sized(model=model_from_spec_dict(spec), page_size=64)
    assert p.swa_bytes_per_token == 4 * 4 * 128 * 2
    assert p.swa_bytes == (p.swa_tokens + 64) * 4 * 8 * 128 * 2
    assert any("full-layer geometry" in n for n in p.notes)
    custom = sized(model=model_from_spec_dict({**spec, "architecture": "custom"}), page_size=64)
    assert custom.swa_bytes == (custom.swa_tokens + 64) * 4 * 4 * 128 * 2


def test_hicache_auto_size_lowers_default_ratio():
    h200 = get_gpu("H200")  # preset: 2,000 GB host DRAM per node
    p = compute_pool_sizes(GPT_OSS, h200, ServerArgs(tp_size=8, enable_hierarchical_cache=True))
    per_rank_budget = int((2000e9 - 10 * GIB) // 8 * 0.8)
    expected = per_rank_budget * 0.95 / (p.full_bytes + p.swa_bytes)
    assert expected < 2.0 and p.hicache_ratio == pytest.approx(expected)
    assert p.host_full_tokens == (int(p.full_tokens * expected) // p.page_size + 1) * p.page_size
    explicit = compute_pool_sizes(GPT_OSS, h200, ServerArgs(tp_size=8, hicache_ratio=2.0))
    assert explicit.hicache_ratio == 2.0


def test_dsv4_hicache_needs_explicit_ratio():
    dsv4 = get_model("DeepSeek-V4-Flash")
    with pytest.raises(ConfigError, match="auto-sizing does not support"):
        compute_pool_sizes_from_budget(dsv4, 50 * GIB, ServerArgs(enable_hierarchical_cache=True))
    p = compute_pool_sizes_from_budget(dsv4, 50 * GIB, ServerArgs(hicache_ratio=2.0))
    assert p.host_full_tokens == int(p.full_tokens // 256 * 2.0) * 256


# ---- one definition of KV bytes per token (simulator/kv_geometry.py) ------------------------------

MHA_PRESETS = [name for name in model_names() if not get_model(name).is_dsv4]


@pytest.mark.parametrize("tp", [1, 2, 8])
@pytest.mark.parametrize("name", MHA_PRESETS)
def test_pool_cells_and_cost_geometry_share_kv_bytes_per_token(name, tp):
    """Pool sizing's cell sizes and the cost model's KV bytes per token come from one formula:
    with hybrid pools they are the same numbers; a one-pool model sizes every layer as full."""
    model = get_model(name)
    pools = compute_pool_sizes_from_budget(model, 400 * GIB, ServerArgs(tp_size=tp, page_size=64))
    kvb = pools.kv_dtype_bytes
    full, swa = kv_bytes_per_token_per_rank(model, tp, kvb)
    if pools.hybrid_swa:
        assert (pools.full_bytes_per_token, pools.swa_bytes_per_token) == (full, swa)
    else:
        assert pools.full_bytes_per_token == model.num_layers * full_layer_kv_bytes(model, tp, kvb)
        assert pools.swa_bytes_per_token == 0
    geometry, _ = derive_geometry(model, tp, kv_dtype_bytes=kvb)
    assert geometry.full_kv_bytes_per_token_per_rank == full
    assert geometry.swa_kv_bytes_per_token_per_rank == swa


def test_kv_bytes_per_layer_by_hand():
    # gpt-oss-120b: 8 KV heads x (64 + 64) dims x 2 B; TP 16 floors at one head per rank.
    assert full_layer_kv_bytes(GPT_OSS, 1, 2) == 8 * 128 * 2 == 2048
    assert swa_layer_kv_bytes(GPT_OSS, 1, 2) == 2048
    assert full_layer_kv_bytes(GPT_OSS, 16, 2) == 1 * 128 * 2
    assert kv_bytes_per_token_per_rank(GPT_OSS, 1, 1) == (18 * 1024.0, 18 * 1024.0)


def test_dsv4_facts_by_hand():
    # V4 layout: 584 B per token, pages padded to 576-byte rows. Page 256: 256 x 584 = 149504 B
    # -> 260 rows of 576 = 149760 B -> 585.0 B per token. Page 72 fills its rows exactly.
    assert DSV4_LATENT_BYTES_PER_TOKEN == 584
    assert dsv4_paged_bytes_per_token(256) == 149760 / 256 == 585.0
    assert dsv4_paged_bytes_per_token(72) == 584.0
    # FP8 indexer key: one byte per dimension plus a 4-byte scale per 128 dimensions.
    assert dsv4_indexer_bytes_per_token(128) == 132
    assert dsv4_indexer_bytes_per_token(512) == 528
    dsv4 = get_model("DeepSeek-V4-Flash")
    geom = dsv4.dsv4
    assert geom is not None
    full, swa = kv_bytes_per_token_per_rank(dsv4, 4, 1)
    n_c4, n_c128 = geom.layers_with_ratio(4), geom.layers_with_ratio(128)
    idx = dsv4_indexer_bytes_per_token(geom.index_head_dim)
    assert full == n_c4 * (584 + idx) / 4 + n_c128 * 584 / 128
    assert swa == len(geom.compress_ratios) * 584
    # Pool sizing prices the same layers with the paged layout (page 256 default).
    pools = compute_pool_sizes_from_budget(dsv4, 40 * GIB, ServerArgs(tp_size=4))
    compressed = (0.25 * dsv4_paged_bytes_per_token(64) + 0.25 * idx) * n_c4 + (
        1 / 128
    ) * dsv4_paged_bytes_per_token(2) * n_c128
    assert pools.full_bytes_per_token == round(compressed)
