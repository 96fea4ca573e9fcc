"""Hugging Face ``config.json`` -> :class:`ModelSpec`, by the rules of SGLang 0.5.23's
``ModelConfig`` (``sglang/srt/configs/model_config.py``); each rule names the SGLang function it
mirrors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from simulator.errors import ConfigError
from simulator.models.archs import (
    DEFAULT_MULTIMODAL_ARCHS,
    DSV4_ARCHS,
    FORCED_NON_HYBRID_ARCHS,
    HYBRID_SWA_ARCHS,
    INCLUSIVE_WINDOW_ARCHS,
)
from simulator.models.spec import Dsv4Geometry, ModelSpec

# utils/hf_transformers/common.py::CONTEXT_LENGTH_KEYS, in SGLang's order.
_CONTEXT_LENGTH_KEYS = (
    "max_sequence_length",
    "seq_length",
    "max_seq_len",
    "model_max_length",
    "max_position_embeddings",
)


def model_from_hf_config(
    config: Mapping[str, Any], *, name: str = "hf-model", weight_bytes: int | None = None
) -> ModelSpec:
    """Derive a ModelSpec from a Hugging Face ``config.json`` as SGLang 0.5.23 would.

    Handles gpt-oss, MiMo-V2, Llama 4, Gemma 2/3/4, Step-3.5/3.7, DeepSeek-V4 and other archs on
    SGLang's hybrid list that state ``layer_types`` or ``hybrid_layer_pattern``; anything else is
    read as an ordinary all-full model. ``weight_bytes`` is not in config.json; pass it (or put a
    ``model.safetensors.index.json`` next to the config) for the GPU memory model.
    """
    archs = config.get("architectures") or []
    if not isinstance(archs, list) or not archs:
        raise ConfigError(f"{name}: config.json has no 'architectures' list")
    arch = str(archs[0])
    text = _text_config(config)
    num_layers = int(text.get("num_hidden_layers", 0))
    if num_layers <= 0:
        raise ConfigError(f"{name}: config has no positive num_hidden_layers")
    num_heads = int(text.get("num_attention_heads", 0) or 0)
    if arch in DSV4_ARCHS:
        return _dsv4_from_hf(config, text, arch, name, weight_bytes)

    heads = _head_geometry(arch, text, num_heads, name)
    swa_ids, full_ids, window, hybrid = _layers_and_window(arch, text, num_layers)
    vision = config.get("vision_config") if isinstance(config.get("vision_config"), Mapping) else None
    return ModelSpec(
        name=name,
        architecture=arch,
        num_layers=num_layers,
        full_layer_ids=tuple(full_ids),
        swa_layer_ids=tuple(swa_ids),
        **heads,
        sliding_window=window,
        kv_dtype_bytes=2,
        weight_bytes=weight_bytes,
        context_length=_context_length(text),
        hybrid_swa=hybrid,
        forced_non_hybrid=arch in FORCED_NON_HYBRID_ARCHS,
        has_attention_sinks=_has_sinks(arch, text),
        is_multimodal=arch in DEFAULT_MULTIMODAL_ARCHS,
        vision_num_layers=_opt_int(vision.get("num_hidden_layers")) if vision else None,
        vision_hidden_size=_opt_int(vision.get("hidden_size")) if vision else None,
        hidden_size=_opt_int(text.get("hidden_size")),
        num_attention_heads=num_heads or None,
        intermediate_size=_opt_int(text.get("intermediate_size")),
        moe_intermediate_size=_opt_int(text.get("moe_intermediate_size")),
        num_experts=_opt_int(
            text.get("num_local_experts") or text.get("n_routed_experts") or text.get("num_experts")
        ),
        experts_per_token=_opt_int(text.get("num_experts_per_tok") or text.get("experts_per_token")),
        vocab_size=_opt_int(text.get("vocab_size")),
        source="Hugging Face config.json",
    )


def _text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """utils/hf_transformers/common.py::get_hf_text_config: multimodal configs nest the LM."""
    for sub in ("text_config", "llm_config", "language_config"):
        if isinstance(config.get(sub), Mapping):
            return config[sub]
    return config


def _is_hybrid_swa_model(arch: str, text: Mapping[str, Any]) -> bool:
    """configs/model_config.py::is_hybrid_swa_model: the allow-list (or the config's own flag),
    with its special cases: Beam only with a sliding layer, Laguna only with a window."""
    hybrid = arch in HYBRID_SWA_ARCHS or bool(text.get("is_hybrid_swa", False))
    if arch == "BeamForCausalLM" and "sliding_attention" not in (text.get("layer_types") or []):
        hybrid = False
    if arch == "LagunaForCausalLM" and not text.get("sliding_window"):
        hybrid = False
    return hybrid


def _head_geometry(arch: str, text: Mapping[str, Any], num_heads: int, name: str) -> dict[str, int]:
    """KV heads and K/V head dims of full and SWA layers (ModelConfig._derive_model_shapes)."""
    head_dim = text.get("head_dim")
    if head_dim is None:
        if not num_heads:
            raise ConfigError(f"{name}: config has neither head_dim nor num_attention_heads")
        head_dim = int(text.get("hidden_size")) // num_heads
    head_dim = int(head_dim)
    kv_heads = _total_kv_heads(text, num_heads)
    if arch.startswith("Gemma4") or arch == "DiffusionGemmaForBlockDiffusion":
        # utils/hf_transformers/config.py::_apply_gemma4_attention_overrides: Gemma 4 states the SWA
        # shape as the base and overrides full layers with global_head_dim / num_global_key_value_heads.
        full_dim = int(text.get("global_head_dim") or head_dim)
        return {
            "num_kv_heads": int(text.get("num_global_key_value_heads") or kv_heads),
            "head_dim": full_dim,
            "v_head_dim": full_dim,
            "swa_num_kv_heads": kv_heads,
            "swa_head_dim": head_dim,
            "swa_v_head_dim": head_dim,
        }
    swa_head_dim_cfg = text.get("swa_head_dim")
    swa_head_dim = int(swa_head_dim_cfg) if swa_head_dim_cfg is not None else head_dim
    swa_v_cfg = text.get("swa_v_head_dim")
    return {
        "num_kv_heads": kv_heads,
        "head_dim": head_dim,
        "v_head_dim": int(text.get("v_head_dim") or head_dim),
        "swa_num_kv_heads": _swa_kv_heads(text, kv_heads),
        "swa_head_dim": swa_head_dim,
        "swa_v_head_dim": int(swa_v_cfg) if swa_v_cfg is not None else swa_head_dim,
    }


def _layers_and_window(
    arch: str, text: Mapping[str, Any], num_layers: int
) -> tuple[list[int], list[int], int | None, bool]:
    """``(SWA layer ids, full layer ids, window, hybrid)``: the split of
    configs/model_config.py::get_hybrid_layer_ids and the window of
    load_model_utils.py::resolve_sliding_window_size. An arch on the hybrid list whose config
    states no split is read as all-full and not hybrid."""
    hybrid = _is_hybrid_swa_model(arch, text)
    swa_ids, full_ids = _hybrid_layer_ids(arch, text, num_layers) if hybrid else (None, None)
    if swa_ids is None or full_ids is None:
        swa_ids, full_ids = [], list(range(num_layers))
        hybrid = False
    window = _sglang_window(arch, text, hybrid)
    if arch in FORCED_NON_HYBRID_ARCHS:
        # Record the SWA/full split for information; the pools size every layer as full.
        swa_ids, full_ids = _layer_types_split(text, num_layers)
        window = _sglang_window(arch, text, True)
    return swa_ids, full_ids, window, hybrid


def _opt_int(v: Any) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _total_kv_heads(text: Mapping[str, Any], num_heads: int) -> int:
    # model_config.py::get_total_num_kv_heads attribute order.
    if text.get("multi_query"):
        return 1
    for key in (
        "n_head_kv",
        "num_kv_heads",
        "num_key_value_heads",
        "multi_query_group_num",
        "num_attention_groups",
    ):
        if text.get(key) is not None:
            return int(text[key])
    if not num_heads:
        raise ConfigError("config has no KV head count")
    return num_heads


def _swa_kv_heads(text: Mapping[str, Any], full_kv_heads: int) -> int:
    # model_config.py::get_swa_num_kv_heads
    if text.get("swa_num_key_value_heads") is not None:
        return int(text["swa_num_key_value_heads"])
    other = text.get("attention_other_setting")
    if isinstance(other, Mapping) and other.get("num_attention_groups") is not None:
        return int(other["num_attention_groups"])
    return full_kv_heads


def _layer_types_split(text: Mapping[str, Any], num_layers: int) -> tuple[list[int], list[int]]:
    types = list(text.get("layer_types") or [])
    if not types:
        # Gemma 2/3 configs without layer_types: full iff (i + 1) % pattern == 0 (transformers
        # default sliding_window_pattern 6 for Gemma 3).
        pattern = int(text.get("sliding_window_pattern") or text.get("_sliding_window_pattern") or 6)
        types = [
            "full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(num_layers)
        ]
    swa = [i for i, t in enumerate(types[:num_layers]) if t == "sliding_attention"]
    full = [i for i, t in enumerate(types[:num_layers]) if t != "sliding_attention"]
    return swa, full


def _hybrid_layer_ids(
    arch: str, text: Mapping[str, Any], num_layers: int
) -> tuple[list[int] | None, list[int] | None]:
    """configs/model_config.py::get_hybrid_layer_ids, for the archs kvplan reads."""
    if arch == "Llama4ForConditionalGeneration":
        return (
            [i for i in range(num_layers) if (i + 1) % 4 != 0],
            [i for i in range(num_layers) if (i + 1) % 4 == 0],
        )
    if arch in ("MiMoV2ForCausalLM", "MiMoV2FlashForCausalLM") or (
        arch not in ("Step3p5ForCausalLM", "Step3p7ForConditionalGeneration")
        and text.get("layer_types") is None
        and text.get("hybrid_layer_pattern") is not None
    ):
        pattern = text.get("hybrid_layer_pattern")
        if not isinstance(pattern, list) or len(pattern) < num_layers:
            raise ConfigError("hybrid_layer_pattern must list at least num_hidden_layers entries")
        return (
            [i for i in range(num_layers) if pattern[i] == 1],
            [i for i in range(num_layers) if pattern[i] == 0],
        )
    types = text.get("layer_types")
    if isinstance(types, list) and types:
        # SWA_SINK_ARCHS / Gemma 4 / Beam / Laguna / Mellum / Muse: every listed layer counts.
        # Step-3.5/3.7: only i < num_hidden_layers (the extra entries are MTP layers).
        limit = (
            num_layers if arch in ("Step3p5ForCausalLM", "Step3p7ForConditionalGeneration") else len(types)
        )
        swa = [i for i, t in enumerate(types) if t == "sliding_attention" and i < limit]
        full = [i for i, t in enumerate(types) if t == "full_attention" and i < limit]
        return swa, full
    return None, None


def _sglang_window(arch: str, text: Mapping[str, Any], hybrid: bool) -> int | None:
    if arch in INCLUSIVE_WINDOW_ARCHS and text.get("sliding_window") is not None:
        return int(text["sliding_window"]) - 1
    if hybrid:
        for key in ("sliding_window_size", "sliding_window", "window_size"):
            if text.get(key) is not None:
                return int(text[key])
    if text.get("attention_chunk_size") is not None:
        return int(text["attention_chunk_size"])
    return None


def _context_length(text: Mapping[str, Any]) -> int:
    # utils/hf_transformers/common.py::get_context_length: the rope factor multiplies only when the
    # scaling dict has no original_max_position_embeddings and is not llama3-type.
    rope = text.get("rope_scaling")
    factor = 1.0
    if isinstance(rope, Mapping) and rope:
        factor = float(rope.get("factor", 1))
        if "original_max_position_embeddings" in rope or rope.get("rope_type") == "llama3":
            factor = 1.0
    for key in _CONTEXT_LENGTH_KEYS:
        if text.get(key) is not None:
            return int(factor * int(text[key]))
    return 2048


def _has_sinks(arch: str, text: Mapping[str, Any]) -> bool:
    # model_config.py::_detect_attention_sinks
    if arch in (
        "GptOssForCausalLM",
        "GraniteSWAForCausalLM",
        "GraniteMoeSWAForCausalLM",
        "IQuestQ1ForCausalLM",
    ):
        return True
    if arch.startswith("MiMoV2"):
        return bool(text.get("add_swa_attention_sink_bias") or text.get("add_full_attention_sink_bias"))
    return bool(text.get("learnable_sink", False))


def _dsv4_from_hf(
    config: Mapping[str, Any], text: Mapping[str, Any], arch: str, name: str, weight_bytes: int | None
) -> ModelSpec:
    num_layers = int(text["num_hidden_layers"])
    ratios = [int(r) for r in text["compress_ratios"]][:num_layers]
    rope = int(text["qk_rope_head_dim"])
    head_dim = int(text["head_dim"])
    geom = Dsv4Geometry(
        compress_ratios=tuple(ratios),
        qk_nope_head_dim=head_dim - rope,
        qk_rope_head_dim=rope,
        index_head_dim=int(text["index_head_dim"]),
    )
    return ModelSpec(
        name=name,
        architecture=arch,
        num_layers=num_layers,
        full_layer_ids=(),
        swa_layer_ids=tuple(range(num_layers)),
        num_kv_heads=int(text.get("num_key_value_heads", 1)),
        head_dim=head_dim,
        v_head_dim=head_dim,
        swa_num_kv_heads=int(text.get("num_key_value_heads", 1)),
        swa_head_dim=head_dim,
        swa_v_head_dim=head_dim,
        sliding_window=int(text["sliding_window"]),
        kv_dtype_bytes=1,
        weight_bytes=weight_bytes,
        context_length=_context_length(text),
        hybrid_swa=True,
        mtp_layers=int(text.get("num_nextn_predict_layers", 0) or 0),
        dsv4=geom,
        hidden_size=_opt_int(text.get("hidden_size")),
        num_attention_heads=_opt_int(text.get("num_attention_heads")),
        moe_intermediate_size=_opt_int(text.get("moe_intermediate_size")),
        num_experts=_opt_int(text.get("n_routed_experts")),
        experts_per_token=_opt_int(text.get("num_experts_per_tok")),
        vocab_size=_opt_int(text.get("vocab_size")),
        source="Hugging Face config.json",
    )
