"""Architecture facts mirrored from SGLang 0.5.23 (names only; the behaviour is ours): which
architectures are hybrid SWA, which SGLang forces non-hybrid, whose window is inclusive, which are
multimodal by default, which size the SWA pool with the SWA geometry, and DeepSeek-V4.
"""

from __future__ import annotations

# configs/model_config.py::is_hybrid_swa_model (the allow-list; SWA_SINK_ARCHS and the MiMo-V2
# family expanded).
HYBRID_SWA_ARCHS: frozenset[str] = frozenset(
    {
        "BeamForCausalLM",
        "Llama4ForConditionalGeneration",
        "DeepseekV4ForCausalLM",
        "DeepseekV4ForCausalLMNextN",
        "DeepseekV4ForCausalLMDSpark",
        "GptOssForCausalLM",
        "GraniteSWAForCausalLM",
        "GraniteMoeSWAForCausalLM",
        "IQuestQ1ForCausalLM",
        "IQuestQ1MTP",
        "MiMoV2ForCausalLM",
        "MiMoV2FlashForCausalLM",
        "MiMoV2MTP",
        "Step3p5ForCausalLM",
        "Step3p5MTP",
        "Step3p7ForConditionalGeneration",
        "Gemma4ForCausalLM",
        "Gemma4ForConditionalGeneration",
        "EmbeddingGemma2Model",
        "Gemma4UnifiedForConditionalGeneration",
        "DiffusionGemmaForBlockDiffusion",
        "LagunaForCausalLM",
        "MellumForCausalLM",
        "MuseGlimmerForCausalLM",
        "MuseGlimmerForConditionalGeneration",
        "InklingForConditionalGeneration",
        "InklingForConditionalGenerationMTP",
        "UnlimitedOCRForCausalLM",
    }
)

# arg_groups/model_overrides/gemma2_gemma3.py: these archs get disable_hybrid_swa_memory=True.
FORCED_NON_HYBRID_ARCHS: frozenset[str] = frozenset(
    {
        "Gemma2ForCausalLM",
        "Gemma3ForCausalLM",
        "Gemma3ForConditionalGeneration",
        "Gemma3nForCausalLM",
        "Gemma3nForConditionalGeneration",
    }
)

# Archs whose SGLang model class returns ``config.sliding_window - 1`` from
# get_attention_sliding_window_size (models/gpt_oss.py, gemma2/3/3n/4, mellum, muse_glimmer, beam,
# laguna, granite, olmo2, exaone4, afmoe, iquest_q1, spark2_5, gemma4_diffusion ...). Other archs use
# the config value as-is (model_config.py::_get_sliding_window_size) or attention_chunk_size
# (load_model_utils.py::resolve_sliding_window_size).
INCLUSIVE_WINDOW_ARCHS: frozenset[str] = frozenset(
    {
        "GptOssForCausalLM",
        "Gemma2ForCausalLM",
        "Gemma3ForCausalLM",
        "Gemma3ForConditionalGeneration",
        "Gemma3nForCausalLM",
        "Gemma3nForConditionalGeneration",
        "Gemma4ForCausalLM",
        "Gemma4ForConditionalGeneration",
        "Gemma4UnifiedForConditionalGeneration",
        "DiffusionGemmaForBlockDiffusion",
        "MellumForCausalLM",
        "MuseGlimmerForCausalLM",
        "MuseGlimmerForConditionalGeneration",
        "BeamForCausalLM",
        "LagunaForCausalLM",
        "IQuestQ1ForCausalLM",
    }
)

# configs/model_config.py multimodal_model_archs (the hybrid-SWA-relevant subset) minus the archs
# for which ModelConfig.__init__ turns multimodal off by default (mm_disabled_models: Gemma3, Llama4).
DEFAULT_MULTIMODAL_ARCHS: frozenset[str] = frozenset(
    {
        "Gemma3nForConditionalGeneration",
        "Gemma4ForConditionalGeneration",
        "Gemma4UnifiedForConditionalGeneration",
        "DiffusionGemmaForBlockDiffusion",
        "MuseGlimmerForConditionalGeneration",
        "Step3p7ForConditionalGeneration",
        "UnlimitedOCRForCausalLM",
    }
)

# configs/model_config.py::_derive_hybrid_model is_hybrid_swa_compress: only these archs build
# their SWA device pool with the SWA head count / dims (kv_cache_configurator.py::
# _build_hybrid_swa_kv_pool); other hybrid archs allocate SWA layers with the full-layer geometry.
HYBRID_SWA_COMPRESS_ARCHS: frozenset[str] = frozenset(
    {
        "MiMoV2ForCausalLM",
        "MiMoV2FlashForCausalLM",
        "MiMoV2MTP",
        "Gemma4ForCausalLM",
        "Gemma4ForConditionalGeneration",
        "EmbeddingGemma2Model",
        "InklingForConditionalGeneration",
        "InklingForConditionalGenerationMTP",
        "Gemma4UnifiedForConditionalGeneration",
        "DiffusionGemmaForBlockDiffusion",
    }
)

DSV4_ARCHS: frozenset[str] = frozenset(
    {"DeepseekV4ForCausalLM", "DeepseekV4ForCausalLMNextN", "DeepseekV4ForCausalLMDSpark"}
)
