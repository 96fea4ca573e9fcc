"""Model and GPU presets, the registries, and the readers for HF config.json and our own spec."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.errors import ConfigError
from simulator.gpus import get_gpu, gpu_names
from simulator.models import (
    ModelSpec,
    get_model,
    load_model,
    model_from_hf_config,
    model_from_spec_dict,
    model_names,
    register_model,
)

PRESETS = [
    "gpt-oss-120b",
    "gpt-oss-20b",
    "MiMo-V2-Flash",
    "Llama-4-Scout",
    "Gemma-3-27B",
    "Gemma-4-31B",
    "Step-3.5-Flash",
    "DeepSeek-V4-Flash",
]


def test_all_presets_registered():
    assert sorted(PRESETS) == model_names()
    assert gpu_names() == ["A100", "B200", "H100", "H200", "L40S"]


def test_lookup_is_case_insensitive_and_takes_hf_ids():
    assert get_model("GPT-OSS-120B") is get_model("openai/gpt-oss-120b")
    assert get_gpu("h200").name == "H200"


def test_unknown_names_list_the_valid_ones():
    with pytest.raises(ConfigError, match="presets: DeepSeek-V4-Flash, Gemma-3-27B"):
        get_model("llama-2")
    with pytest.raises(ConfigError, match="A100, B200, H100, H200, L40S"):
        get_gpu("V100")


def test_registry_rejects_duplicates():
    spec = get_model("gpt-oss-20b")
    with pytest.raises(ConfigError, match="conflicting registration"):
        register_model(spec)


@pytest.mark.parametrize(
    ("name", "n_full", "n_swa", "window", "full_layer_bytes", "swa_layer_bytes"),
    [
        # Reference Table 1: per-layer KV bytes per token at BF16, tp=1.
        ("gpt-oss-120b", 18, 18, 127, 2048, 2048),
        ("gpt-oss-20b", 12, 12, 127, 2048, 2048),
        ("MiMo-V2-Flash", 9, 39, 128, 2560, 5120),
        ("Llama-4-Scout", 12, 36, 8192, 4096, 4096),
        ("Gemma-3-27B", 10, 52, 1023, 8192, 8192),
        ("Gemma-4-31B", 10, 50, 1023, 8192, 16384),
        ("Step-3.5-Flash", 12, 33, 512, 4096, 4096),
    ],
)
def test_preset_geometry(name, n_full, n_swa, window, full_layer_bytes, swa_layer_bytes):
    m = get_model(name)
    assert (m.num_full_layers, m.num_swa_layers, m.sliding_window) == (n_full, n_swa, window)
    assert m.kv_heads_per_rank(1) * (m.head_dim + m.v_head_dim) * m.kv_dtype_bytes == full_layer_bytes
    assert m.swa_kv_heads_per_rank(1) * (m.swa_head_dim + m.swa_v_head_dim) * m.kv_dtype_bytes == (
        swa_layer_bytes
    )
    assert m.weight_bytes and m.weight_bytes > 0


def test_layer_placement_follows_sglang_rules():
    assert get_model("gpt-oss-120b").full_layer_ids == tuple(range(1, 36, 2))
    assert get_model("MiMo-V2-Flash").full_layer_ids == (0, 5, 11, 17, 23, 29, 35, 41, 47)
    assert get_model("Llama-4-Scout").full_layer_ids == tuple(range(3, 48, 4))
    assert get_model("Step-3.5-Flash").full_layer_ids == tuple(range(0, 45, 4))
    assert get_model("Gemma-4-31B").full_layer_ids == tuple(range(5, 60, 6))


def test_gemma3_is_not_hybrid_in_sglang():
    m = get_model("Gemma-3-27B")
    assert m.forced_non_hybrid and not m.uses_hybrid_pools()
    assert get_model("Gemma-4-31B").uses_hybrid_pools()
    assert not get_model("gpt-oss-120b").uses_hybrid_pools(disable_hybrid_swa_memory=True)


def test_kv_heads_floor_at_one_per_rank():
    m = get_model("MiMo-V2-Flash")  # 4 full KV heads, 8 SWA KV heads
    assert [m.kv_heads_per_rank(tp) for tp in (1, 2, 4, 8, 16)] == [4, 2, 1, 1, 1]
    assert [m.swa_kv_heads_per_rank(tp) for tp in (1, 4, 8, 16)] == [8, 2, 1, 1]


def test_dsv4_geometry():
    m = get_model("DeepSeek-V4-Flash")
    assert m.dsv4 is not None
    assert m.dsv4.layers_with_ratio(0) == 2
    assert m.dsv4.layers_with_ratio(4) == 21
    assert m.dsv4.layers_with_ratio(128) == 20
    assert m.kv_dtype_bytes == 1 and m.sliding_window == 128


def test_gpu_memory_figures():
    h100, h200 = get_gpu("H100"), get_gpu("H200")
    # Measured on the device machines: torch total and free-after-context.
    assert abs(h100.device_total_bytes - 85017493504) < 1 << 20
    assert abs(h200.device_total_bytes - 150109880320) < 1 << 20
    assert abs(h100.preload_free_bytes - 84366524416) < 1 << 20
    assert abs(h200.preload_free_bytes - 149557477376) < 1 << 20
    assert get_gpu("B200").is_sm100 and h100.is_sm90


# ---- Hugging Face config.json ---------------------------------------------------------------


def _gpt_oss_config() -> dict:
    return {
        "architectures": ["GptOssForCausalLM"],
        "model_type": "gpt_oss",
        "num_hidden_layers": 36,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "hidden_size": 2880,
        "sliding_window": 128,
        "layer_types": ["sliding_attention", "full_attention"] * 18,
        "max_position_embeddings": 131072,
        "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096},
        "num_local_experts": 128,
        "experts_per_token": 4,
    }


def test_hf_gpt_oss_matches_preset():
    m = model_from_hf_config(_gpt_oss_config(), name="gpt-oss-120b-hf", weight_bytes=65_300_000_000)
    p = get_model("gpt-oss-120b")
    for attr in ("full_layer_ids", "swa_layer_ids", "num_kv_heads", "head_dim", "sliding_window"):
        assert getattr(m, attr) == getattr(p, attr), attr
    assert m.context_length == 131072  # yarn with original_max_position_embeddings: no factor
    assert m.has_attention_sinks and m.hybrid_swa


def test_hf_mimo_hybrid_layer_pattern():
    pattern = [0 if i in (0, 5, 11, 17, 23, 29, 35, 41, 47) else 1 for i in range(48)]
    cfg = {
        "architectures": ["MiMoV2FlashForCausalLM"],
        "num_hidden_layers": 48,
        "num_attention_heads": 64,
        "num_key_value_heads": 4,
        "swa_num_key_value_heads": 8,
        "head_dim": 192,
        "v_head_dim": 128,
        "swa_head_dim": 192,
        "swa_v_head_dim": 128,
        "hybrid_layer_pattern": pattern,
        "sliding_window_size": 128,
        "sliding_window": 128,
        "max_position_embeddings": 262144,
        "add_swa_attention_sink_bias": True,
    }
    m = model_from_hf_config(cfg)
    p = get_model("MiMo-V2-Flash")
    assert (m.full_layer_ids, m.swa_num_kv_heads, m.v_head_dim, m.sliding_window) == (
        p.full_layer_ids,
        8,
        128,
        128,
    )


def test_hf_llama4_text_config_and_chunk_window():
    cfg = {
        "architectures": ["Llama4ForConditionalGeneration"],
        "text_config": {
            "num_hidden_layers": 48,
            "num_attention_heads": 40,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "attention_chunk_size": 8192,
            "max_position_embeddings": 10485760,
            "rope_scaling": {"rope_type": "llama3", "factor": 16.0},
        },
        "vision_config": {"num_hidden_layers": 34, "hidden_size": 1408},
    }
    m = model_from_hf_config(cfg)
    assert m.full_layer_ids == tuple(range(3, 48, 4))
    assert m.sliding_window == 8192
    assert m.context_length == 10485760  # llama3 rope: factor not applied
    assert not m.is_multimodal  # SGLang turns multimodal off for Llama 4 by default


def test_hf_gemma3_all_full_and_gemma4_global_heads():
    g3 = {
        "architectures": ["Gemma3ForConditionalGeneration"],
        "text_config": {
            "num_hidden_layers": 62,
            "num_attention_heads": 32,
            "num_key_value_heads": 16,
            "head_dim": 128,
            "sliding_window": 1024,
            "max_position_embeddings": 131072,
        },
    }
    m3 = model_from_hf_config(g3)
    assert m3.forced_non_hybrid and not m3.uses_hybrid_pools()
    assert m3.full_layer_ids == tuple(range(5, 62, 6)) and m3.sliding_window == 1023

    g4 = {
        "architectures": ["Gemma4ForConditionalGeneration"],
        "text_config": {
            "num_hidden_layers": 60,
            "num_attention_heads": 32,
            "num_key_value_heads": 16,
            "num_global_key_value_heads": 4,
            "head_dim": 256,
            "global_head_dim": 512,
            "sliding_window": 1024,
            "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 10,
            "max_position_embeddings": 262144,
        },
    }
    m4 = model_from_hf_config(g4)
    p4 = get_model("Gemma-4-31B")
    for attr in (
        "num_kv_heads",
        "head_dim",
        "swa_num_kv_heads",
        "swa_head_dim",
        "full_layer_ids",
        "sliding_window",
    ):
        assert getattr(m4, attr) == getattr(p4, attr), attr
    assert m4.is_multimodal


def test_hf_step35_ignores_mtp_layer_types():
    types = [("full_attention" if i % 4 == 0 else "sliding_attention") for i in range(45)]
    types += ["full_attention", "sliding_attention", "sliding_attention"]
    cfg = {
        "architectures": ["Step3p5ForCausalLM"],
        "num_hidden_layers": 45,
        "num_attention_heads": 64,
        "num_attention_groups": 8,
        "head_dim": 128,
        "attention_other_setting": {"num_attention_heads": 96, "num_attention_groups": 8},
        "layer_types": types,
        "sliding_window": 512,
        "max_seq_len": 262144,
        "max_position_embeddings": 131072,
    }
    m = model_from_hf_config(cfg)
    assert (m.num_full_layers, m.num_swa_layers, m.sliding_window, m.context_length) == (12, 33, 512, 262144)


def test_hf_dsv4(tmp_path: Path):
    ratios = [0, 0] + [4, 128] * 20 + [4, 0]
    cfg = {
        "architectures": ["DeepseekV4ForCausalLM"],
        "model_type": "deepseek_v4",
        "compress_ratios": ratios,
        "head_dim": 512,
        "qk_rope_head_dim": 64,
        "index_head_dim": 128,
        "num_hidden_layers": 43,
        "num_key_value_heads": 1,
        "num_attention_heads": 64,
        "sliding_window": 128,
        "max_position_embeddings": 1048576,
        "rope_scaling": {"factor": 16, "original_max_position_embeddings": 65536, "type": "yarn"},
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 123}}))
    m = load_model(str(tmp_path))
    assert m.dsv4 == get_model("DeepSeek-V4-Flash").dsv4
    assert m.weight_bytes == 123 and m.context_length == 1048576


def test_hf_config_errors():
    with pytest.raises(ConfigError, match="architectures"):
        model_from_hf_config({"num_hidden_layers": 2})
    with pytest.raises(ConfigError, match="num_hidden_layers"):
        model_from_hf_config({"architectures": ["LlamaForCausalLM"]})


def test_plain_model_is_all_full():
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "hidden_size": 4096,
        "max_position_embeddings": 8192,
    }
    m = model_from_hf_config(cfg)
    assert not m.uses_hybrid_pools() and m.head_dim == 128 and m.num_full_layers == 32


# ---- our own spec schema --------------------------------------------------------------------


def test_own_yaml_spec(tmp_path: Path):
    path = tmp_path / "toy.yaml"
    path.write_text(
        "name: toy-swa\n"
        "layer_types: [swa, swa, swa, full]\n"
        "num_kv_heads: 4\n"
        "head_dim: 128\n"
        "swa_num_kv_heads: 2\n"
        "sliding_window: 4096\n"
        "weight_gb: 10\n"
        "context_length: 32768\n"
    )
    m = load_model(str(path))
    assert isinstance(m, ModelSpec)
    assert (m.full_layer_ids, m.swa_layer_ids) == ((3,), (0, 1, 2))
    assert (m.v_head_dim, m.swa_head_dim, m.swa_v_head_dim) == (128, 128, 128)
    assert m.weight_bytes == 10_000_000_000 and m.uses_hybrid_pools()


def test_own_spec_errors(tmp_path: Path):
    with pytest.raises(ConfigError, match="unknown model spec keys"):
        model_from_spec_dict({"name": "x", "num_layers": 1, "num_kv_heads": 1, "head_dim": 8, "bogus": 1})
    with pytest.raises(ConfigError, match="missing 'head_dim'"):
        model_from_spec_dict({"name": "x", "num_layers": 1, "num_kv_heads": 1})
    with pytest.raises(ConfigError, match="need a sliding_window"):
        model_from_spec_dict({"name": "x", "layer_types": ["swa", "full"], "num_kv_heads": 1, "head_dim": 8})
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="invalid JSON"):
        load_model(str(bad))
    with pytest.raises(ConfigError, match="not found"):
        load_model(str(tmp_path / "missing.json"))


def test_own_spec_swa_ids_only():
    m = model_from_spec_dict(
        {
            "name": "x",
            "num_layers": 4,
            "swa_layer_ids": [0, 1],
            "num_kv_heads": 2,
            "head_dim": 8,
            "sliding_window": 16,
        }
    )
    assert m.full_layer_ids == (2, 3)
