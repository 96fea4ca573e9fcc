"""Seed 003: host bytes per cached sequence with SGLang's one-window SWA backup, by hand."""

from __future__ import annotations

import pytest

from simulator.models import load_model
from simulator.sizing.swa_host import host_bytes_per_sequence


def test_gpt_oss_120b_at_the_seeds_setup():
    r = host_bytes_per_sequence(load_model("gpt-oss-120b"), 20480, window=4096)
    # 18 full and 18 SWA layers of 8 KV heads x 64 x 2 (K, V) x 2 B = 2048 B per layer
    assert (r.full_bytes_per_token, r.swa_bytes_per_token, r.swa_tokens_backed_up) == (36864, 36864, 4096)
    assert r.bytes_one_window == 20480 * 36864 + 4096 * 36864
    assert r.cacheable_multiplier == pytest.approx(40960 / 24576)


def test_gemma4_and_page_rounding():
    r = host_bytes_per_sequence(load_model("Gemma-4-31B"), 20480, window=4096)
    assert r.cacheable_multiplier == pytest.approx(901120 * 20480 / (81920 * 20480 + 819200 * 4096))
    r = host_bytes_per_sequence(load_model("gpt-oss-120b"), 20480, window=4095, page_size=64)
    assert r.swa_tokens_backed_up == 4096
    # a sequence shorter than the window backs up all of it: no saving
    assert host_bytes_per_sequence(load_model("gpt-oss-120b"), 2000, window=4096).cacheable_multiplier == 1.0


def test_models_sglang_runs_non_hybrid_under_hicache_get_no_saving():
    for name in ("Step-3.5-Flash", "Gemma-3-27B"):
        r = host_bytes_per_sequence(load_model(name), 20480, window=4096)
        assert not r.hybrid_swa and r.cacheable_multiplier == 1.0
