"""Model geometry that decides KV-cache size: the ``ModelSpec`` dataclass, the preset registry,
and readers for Hugging Face ``config.json`` files and our own YAML/JSON spec files.

Only what SGLang 0.5.23 reads when it sizes KV pools is modelled: which layers are full-attention
and which are sliding-window (SWA), KV heads and K/V head dims per layer type, the window as SGLang
uses it, the KV dtype, the weight bytes (for the GPU memory model) and the context length. The
rules that turn a config into these numbers follow ``sglang/srt/configs/model_config.py``; each is
marked with the SGLang function it mirrors.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any

from simulator.errors import ConfigError
from simulator.preset_registry import PresetRegistry

__all__ = [
    "Dsv4Geometry",
    "ModelSpec",
    "get_model",
    "load_model",
    "model_from_hf_config",
    "model_from_spec_dict",
    "model_names",
    "register_model",
]


# --------------------------------------------------------------------------------------------------
# Architecture facts mirrored from SGLang 0.5.23 (names only; the behaviour is ours).
# --------------------------------------------------------------------------------------------------

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

# utils/hf_transformers/common.py::CONTEXT_LENGTH_KEYS, in SGLang's order.
_CONTEXT_LENGTH_KEYS = (
    "max_sequence_length",
    "seq_length",
    "max_seq_len",
    "model_max_length",
    "max_position_embeddings",
)


# --------------------------------------------------------------------------------------------------
# The spec
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Dsv4Geometry:
    """DeepSeek-V4 compressed-attention geometry (the inputs of SGLang's DSV4PoolConfigurator).

    ``compress_ratios`` has one entry per main-model layer: 0 = SWA only, 4 = CSA (+ indexer),
    128 = HCA. Every layer also keeps a ``sliding_window``-token SWA latent.
    """

    compress_ratios: tuple[int, ...]
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    index_head_dim: int

    def __post_init__(self) -> None:
        bad = sorted({r for r in self.compress_ratios if r not in (0, 4, 128)})
        if bad:
            raise ConfigError(
                f"DeepSeek-V4 compress_ratios {bad} are not modelled (kvplan supports 0, 4 and 128)"
            )

    def layers_with_ratio(self, ratio: int) -> int:
        return sum(1 for r in self.compress_ratios if r == ratio)


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """KV-relevant geometry of one model, in the terms SGLang's pool configurators use.

    Head counts are whole-model totals; per-rank counts come from :meth:`kv_heads_per_rank`, which
    floors at one head per rank as ``ModelConfig.get_num_kv_heads`` does. ``sliding_window`` is the
    exclusive window SGLang uses (gpt-oss config 128 -> 127). ``hybrid_swa`` says whether SGLang's
    ``is_hybrid_swa_model`` accepts the architecture; ``forced_non_hybrid`` says whether an SGLang
    model override turns hybrid memory off anyway (Gemma 2/3), in which case every layer is sized as
    a full layer.
    """

    name: str
    architecture: str
    num_layers: int
    full_layer_ids: tuple[int, ...]
    swa_layer_ids: tuple[int, ...]
    num_kv_heads: int
    head_dim: int
    v_head_dim: int
    swa_num_kv_heads: int
    swa_head_dim: int
    swa_v_head_dim: int
    sliding_window: int | None
    kv_dtype_bytes: int = 2
    weight_bytes: int | None = None
    context_length: int = 2048
    hybrid_swa: bool = True
    forced_non_hybrid: bool = False
    has_attention_sinks: bool = False
    is_multimodal: bool = False
    vision_num_layers: int | None = None
    vision_hidden_size: int | None = None
    mtp_layers: int = 0
    dsv4: Dsv4Geometry | None = None
    # Optional facts for a later cost model.
    params_total: float | None = None
    params_active: float | None = None
    hidden_size: int | None = None
    num_attention_heads: int | None = None
    intermediate_size: int | None = None
    moe_intermediate_size: int | None = None
    num_experts: int | None = None
    experts_per_token: int | None = None
    vocab_size: int | None = None
    source: str = ""
    aliases: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("model spec needs a non-empty name")
        for fname in ("num_layers", "num_kv_heads", "head_dim", "v_head_dim", "kv_dtype_bytes"):
            if getattr(self, fname) <= 0:
                raise ConfigError(
                    f"model {self.name!r}: {fname} must be positive, got {getattr(self, fname)}"
                )
        if self.swa_layer_ids and (self.swa_num_kv_heads <= 0 or self.swa_head_dim <= 0):
            raise ConfigError(f"model {self.name!r}: SWA layers need positive swa_num_kv_heads/swa_head_dim")
        overlap = set(self.full_layer_ids) & set(self.swa_layer_ids)
        if overlap and self.dsv4 is None:
            raise ConfigError(f"model {self.name!r}: layers {sorted(overlap)} are both full and SWA")
        ids = set(self.full_layer_ids) | set(self.swa_layer_ids)
        if any(i < 0 or i >= self.num_layers for i in ids):
            raise ConfigError(f"model {self.name!r}: layer ids must lie in [0, {self.num_layers})")
        if self.dsv4 is None and len(ids) != self.num_layers:
            raise ConfigError(
                f"model {self.name!r}: {len(self.full_layer_ids)} full + {len(self.swa_layer_ids)} SWA "
                f"layer ids do not cover num_layers={self.num_layers}"
            )
        if self.swa_layer_ids and self.sliding_window is None and self.hybrid_swa:
            raise ConfigError(f"model {self.name!r}: SWA layers need a sliding_window")
        if self.sliding_window is not None and self.sliding_window <= 0:
            raise ConfigError(f"model {self.name!r}: sliding_window must be positive")
        if self.weight_bytes is not None and self.weight_bytes < 0:
            raise ConfigError(f"model {self.name!r}: weight_bytes must be >= 0")
        if self.context_length <= 0:
            raise ConfigError(f"model {self.name!r}: context_length must be positive")

    # ---- layer split -------------------------------------------------------------------------

    @property
    def num_full_layers(self) -> int:
        return len(self.full_layer_ids)

    @property
    def num_swa_layers(self) -> int:
        return len(self.swa_layer_ids)

    @property
    def is_dsv4(self) -> bool:
        return self.dsv4 is not None

    def uses_hybrid_pools(self, disable_hybrid_swa_memory: bool = False) -> bool:
        """Whether SGLang builds separate full and SWA pools (``ModelConfig.is_hybrid_swa``):
        the architecture is on the hybrid list and no flag or model override disables it."""
        return (
            self.hybrid_swa
            and bool(self.swa_layer_ids or self.dsv4)
            and not self.forced_non_hybrid
            and not disable_hybrid_swa_memory
        )

    # ---- per-rank heads (ModelConfig.get_num_kv_heads / get_swa_num_kv_heads) ------------------

    def kv_heads_per_rank(self, attn_tp: int) -> int:
        """Full-layer KV heads on one attention-TP rank. SGLang replicates heads once attention TP
        exceeds the head count, so the floor is one head (model_config.py::get_num_kv_heads)."""
        return max(1, self.num_kv_heads // attn_tp)

    def swa_kv_heads_per_rank(self, attn_tp: int) -> int:
        """SWA-layer KV heads per rank (model_config.py::get_swa_num_kv_heads), floored at one."""
        return max(1, self.swa_num_kv_heads // attn_tp)

    @property
    def swa_pool_uses_swa_geometry(self) -> bool:
        """Whether SGLang allocates the SWA pool with the SWA heads/dims. Hybrid archs outside the
        is_hybrid_swa_compress list allocate it with the full-layer geometry (the sizing still
        prices SWA geometry); our own specs ("custom") are taken at their word."""
        return self.architecture in HYBRID_SWA_COMPRESS_ARCHS or self.architecture not in HYBRID_SWA_ARCHS

    def summary(self) -> dict[str, Any]:
        """Plain-data view for JSON output and docs."""
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Dsv4Geometry):
                v = {g.name: getattr(v, g.name) for g in fields(v)}
            if isinstance(v, tuple):
                v = list(v)
            out[f.name] = v
        return out


# --------------------------------------------------------------------------------------------------
# Registry (the only list of preset names)
# --------------------------------------------------------------------------------------------------


def _load_presets() -> list[ModelSpec]:
    text = resources.files("simulator").joinpath("presets", "models.json").read_text(encoding="utf-8")
    return [
        model_from_spec_dict(entry, origin="simulator/presets/models.json")
        for entry in json.loads(text)["models"]
    ]


_MODELS: PresetRegistry[ModelSpec] = PresetRegistry("model", _load_presets)


def register_model(spec: ModelSpec) -> None:
    """Add a model to the registry; rejects duplicate names or aliases."""
    _MODELS.register(spec)


def model_names() -> list[str]:
    """Sorted preset names (canonical spelling)."""
    return _MODELS.names()


def get_model(name: str) -> ModelSpec:
    """Preset by name or alias (case-insensitive); ConfigError lists the valid names."""
    return _MODELS.get(name)


def load_model(name_or_path: str) -> ModelSpec:
    """What ``--model`` accepts: a preset name, a Hugging Face ``config.json`` (or a directory
    holding one), or a YAML/JSON spec in kvplan's own schema (see docs/pool-sizing.md)."""
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        cfg = path / "config.json"
        if not cfg.is_file():
            raise ConfigError(f"{path}: directory has no config.json")
        return _load_file(cfg)
    if path.is_file():
        return _load_file(path)
    if any(sep in name_or_path for sep in ("/", "\\")) and name_or_path.endswith((".json", ".yaml", ".yml")):
        raise ConfigError(f"model file not found: {name_or_path}")
    return get_model(name_or_path)


def _load_file(path: Path) -> ModelSpec:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read model file: {exc}") from None
    data: Any
    if path.suffix in (".yaml", ".yml"):
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: invalid YAML: {exc}") from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}: invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    if "architectures" in data or "model_type" in data:
        weight_bytes = _safetensors_total_size(path.parent)
        return model_from_hf_config(data, name=_default_name(path), weight_bytes=weight_bytes)
    return model_from_spec_dict(data, origin=str(path))


def _default_name(path: Path) -> str:
    return path.parent.name if path.name == "config.json" and path.parent.name else path.stem


def _safetensors_total_size(directory: Path) -> int | None:
    """Weight bytes from ``model.safetensors.index.json`` (``metadata.total_size``) when it sits
    next to the config; None otherwise."""
    index = directory / "model.safetensors.index.json"
    if not index.is_file():
        return None
    try:
        total = json.loads(index.read_text(encoding="utf-8")).get("metadata", {}).get("total_size")
    except (OSError, json.JSONDecodeError):
        return None
    return int(total) if isinstance(total, (int, float)) and total > 0 else None


# --------------------------------------------------------------------------------------------------
# Our own schema
# --------------------------------------------------------------------------------------------------

_GIB = 1 << 30
_SPEC_KEYS = {f.name for f in fields(ModelSpec)} | {"layer_types", "weight_gb", "weight_gib", "dsv4"}


def model_from_spec_dict(data: Mapping[str, Any], *, origin: str = "<spec>") -> ModelSpec:
    """Build a ModelSpec from kvplan's own schema (documented in docs/pool-sizing.md).

    Layers are given either as ``layer_types`` (a list of ``"full"``/``"swa"`` per layer, also
    accepting HF's ``full_attention``/``sliding_attention``) or as ``full_layer_ids`` +
    ``swa_layer_ids``. SWA head fields default to the full-layer ones. Weights may be given as
    ``weight_bytes``, ``weight_gb`` (1e9) or ``weight_gib``.
    """
    unknown = sorted(set(data) - _SPEC_KEYS)
    if unknown:
        raise ConfigError(f"{origin}: unknown model spec keys {unknown}")
    d = dict(data)
    name = d.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{origin}: model spec needs a 'name'")

    def req_int(key: str) -> int:
        if key not in d:
            raise ConfigError(f"{origin}: model {name!r} is missing {key!r}")
        return _as_int(d[key], key, origin)

    layer_types = d.pop("layer_types", None)
    if layer_types is not None:
        if not isinstance(layer_types, list) or not layer_types:
            raise ConfigError(f"{origin}: layer_types must be a non-empty list")
        full_ids, swa_ids = [], []
        for i, t in enumerate(layer_types):
            if t in ("full", "full_attention"):
                full_ids.append(i)
            elif t in ("swa", "sliding", "sliding_attention", "chunked_attention"):
                swa_ids.append(i)
            else:
                raise ConfigError(f"{origin}: layer_types[{i}] = {t!r}; expected 'full' or 'swa'")
        d.setdefault("num_layers", len(layer_types))
        d["full_layer_ids"], d["swa_layer_ids"] = full_ids, swa_ids
    num_layers = req_int("num_layers")
    swa_ids = tuple(_as_int(x, "swa_layer_ids", origin) for x in d.get("swa_layer_ids", ()))
    # Layers not listed as SWA are full unless full_layer_ids says otherwise.
    default_full = [i for i in range(num_layers) if i not in set(swa_ids)]
    full_ids = tuple(_as_int(x, "full_layer_ids", origin) for x in d.get("full_layer_ids", default_full))

    weight = d.pop("weight_bytes", None)
    if "weight_gb" in d:
        weight = float(d.pop("weight_gb")) * 1e9
    if "weight_gib" in d:
        weight = float(d.pop("weight_gib")) * _GIB

    dsv4 = d.pop("dsv4", None)
    dsv4_geom = None
    if dsv4 is not None:
        if not isinstance(dsv4, Mapping):
            raise ConfigError(f"{origin}: dsv4 must be a mapping")
        dsv4_geom = Dsv4Geometry(
            compress_ratios=tuple(int(r) for r in dsv4["compress_ratios"]),
            qk_nope_head_dim=int(dsv4["qk_nope_head_dim"]),
            qk_rope_head_dim=int(dsv4["qk_rope_head_dim"]),
            index_head_dim=int(dsv4["index_head_dim"]),
        )

    head_dim = req_int("head_dim")
    kv_heads = req_int("num_kv_heads")
    v_head_dim = _as_int(d.get("v_head_dim", head_dim), "v_head_dim", origin)
    swa_head_dim = _as_int(d.get("swa_head_dim", head_dim), "swa_head_dim", origin)
    kwargs: dict[str, Any] = {
        "name": name,
        "architecture": str(d.get("architecture", "custom")),
        "num_layers": num_layers,
        "full_layer_ids": full_ids,
        "swa_layer_ids": swa_ids,
        "num_kv_heads": kv_heads,
        "head_dim": head_dim,
        "v_head_dim": v_head_dim,
        "swa_num_kv_heads": _as_int(d.get("swa_num_kv_heads", kv_heads), "swa_num_kv_heads", origin),
        "swa_head_dim": swa_head_dim,
        "swa_v_head_dim": _as_int(d.get("swa_v_head_dim", swa_head_dim), "swa_v_head_dim", origin),
        "sliding_window": None
        if d.get("sliding_window") is None
        else _as_int(d["sliding_window"], "sliding_window", origin),
        "weight_bytes": None if weight is None else int(weight),
        "dsv4": dsv4_geom,
    }
    passthrough = {
        "kv_dtype_bytes",
        "context_length",
        "hybrid_swa",
        "forced_non_hybrid",
        "has_attention_sinks",
        "is_multimodal",
        "vision_num_layers",
        "vision_hidden_size",
        "mtp_layers",
        "params_total",
        "params_active",
        "hidden_size",
        "num_attention_heads",
        "intermediate_size",
        "moe_intermediate_size",
        "num_experts",
        "experts_per_token",
        "vocab_size",
        "source",
    }
    for key in passthrough:
        if key in d and d[key] is not None:
            kwargs[key] = d[key]
    if "aliases" in d:
        kwargs["aliases"] = tuple(d["aliases"])
    try:
        return ModelSpec(**kwargs)
    except TypeError as exc:  # wrong value types that dataclass construction trips on
        raise ConfigError(f"{origin}: {exc}") from None


def _as_int(value: Any, key: str, origin: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise ConfigError(f"{origin}: {key} must be an integer, got {value!r}")
    return int(value)


# --------------------------------------------------------------------------------------------------
# Hugging Face config.json (SGLang's ModelConfig rules)
# --------------------------------------------------------------------------------------------------


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
    # utils/hf_transformers/common.py::get_hf_text_config: multimodal configs nest the LM.
    text: Mapping[str, Any] = config
    for sub in ("text_config", "llm_config", "language_config"):
        if isinstance(config.get(sub), Mapping):
            text = config[sub]
            break

    def get(key: str, default: Any = None) -> Any:
        return text.get(key, default)

    num_layers = int(get("num_hidden_layers", 0))
    if num_layers <= 0:
        raise ConfigError(f"{name}: config has no positive num_hidden_layers")
    num_heads = int(get("num_attention_heads", 0) or 0)

    hybrid = arch in HYBRID_SWA_ARCHS or bool(get("is_hybrid_swa", False))
    # is_hybrid_swa_model special cases: Beam only with a sliding layer, Laguna only with a window.
    if arch == "BeamForCausalLM" and "sliding_attention" not in (get("layer_types") or []):
        hybrid = False
    if arch == "LagunaForCausalLM" and not get("sliding_window"):
        hybrid = False

    if arch in DSV4_ARCHS:
        return _dsv4_from_hf(config, text, arch, name, weight_bytes)

    # ---- head dims (ModelConfig._derive_model_shapes) ----
    head_dim = get("head_dim")
    if head_dim is None:
        if not num_heads:
            raise ConfigError(f"{name}: config has neither head_dim nor num_attention_heads")
        head_dim = int(get("hidden_size")) // num_heads
    head_dim = int(head_dim)
    kv_heads = _total_kv_heads(text, num_heads)
    swa_head_dim_cfg = get("swa_head_dim")
    swa_kv_heads: int
    if arch.startswith("Gemma4") or arch == "DiffusionGemmaForBlockDiffusion":
        # utils/hf_transformers/config.py::_apply_gemma4_attention_overrides: Gemma 4 states the SWA
        # shape as the base and overrides full layers with global_head_dim / num_global_key_value_heads.
        swa_head_dim = head_dim
        swa_kv_heads = kv_heads
        head_dim = int(get("global_head_dim") or head_dim)
        kv_heads = int(get("num_global_key_value_heads") or kv_heads)
        v_head_dim = head_dim
        swa_v_head_dim = swa_head_dim
    else:
        v_head_dim = int(get("v_head_dim") or head_dim)
        swa_head_dim = int(swa_head_dim_cfg) if swa_head_dim_cfg is not None else head_dim
        swa_v_cfg = get("swa_v_head_dim")
        swa_v_head_dim = int(swa_v_cfg) if swa_v_cfg is not None else swa_head_dim
        swa_kv_heads = _swa_kv_heads(text, kv_heads)

    # ---- layer split (configs/model_config.py::get_hybrid_layer_ids) ----
    swa_ids, full_ids = _hybrid_layer_ids(arch, text, num_layers) if hybrid else (None, None)
    if swa_ids is None or full_ids is None:
        swa_ids, full_ids = [], list(range(num_layers))
        hybrid = False

    # ---- window (load_model_utils.py::resolve_sliding_window_size) ----
    window = _sglang_window(arch, text, hybrid)

    forced_non_hybrid = arch in FORCED_NON_HYBRID_ARCHS
    if forced_non_hybrid:
        # Record the SWA/full split for information; the pools size every layer as full.
        swa_ids, full_ids = _layer_types_split(text, num_layers)
        window = _sglang_window(arch, text, True)

    vision = config.get("vision_config") if isinstance(config.get("vision_config"), Mapping) else None
    return ModelSpec(
        name=name,
        architecture=arch,
        num_layers=num_layers,
        full_layer_ids=tuple(full_ids),
        swa_layer_ids=tuple(swa_ids),
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        v_head_dim=v_head_dim,
        swa_num_kv_heads=swa_kv_heads,
        swa_head_dim=swa_head_dim,
        swa_v_head_dim=swa_v_head_dim,
        sliding_window=window,
        kv_dtype_bytes=2,
        weight_bytes=weight_bytes,
        context_length=_context_length(text),
        hybrid_swa=hybrid,
        forced_non_hybrid=forced_non_hybrid,
        has_attention_sinks=_has_sinks(arch, text),
        is_multimodal=arch in DEFAULT_MULTIMODAL_ARCHS,
        vision_num_layers=_opt_int(vision.get("num_hidden_layers")) if vision else None,
        vision_hidden_size=_opt_int(vision.get("hidden_size")) if vision else None,
        hidden_size=_opt_int(get("hidden_size")),
        num_attention_heads=num_heads or None,
        intermediate_size=_opt_int(get("intermediate_size")),
        moe_intermediate_size=_opt_int(get("moe_intermediate_size")),
        num_experts=_opt_int(get("num_local_experts") or get("n_routed_experts") or get("num_experts")),
        experts_per_token=_opt_int(get("num_experts_per_tok") or get("experts_per_token")),
        vocab_size=_opt_int(get("vocab_size")),
        source="Hugging Face config.json",
    )


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
