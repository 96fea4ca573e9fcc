"""What the roofline needs to know about a model (:class:`ModelCostGeometry`), derived from a
:class:`~simulator.models.ModelSpec` by :func:`derive_geometry`; a calibration profile may
override any field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from simulator.errors import ConfigError
from simulator.kv_geometry import kv_bytes_per_token_per_rank
from simulator.models import ModelSpec

# --------------------------------------------------------------------------------------------------
# Facts the presets lack, with their sources. Used only when ModelSpec leaves a field empty.
# --------------------------------------------------------------------------------------------------

# Hidden sizes of presets whose ModelSpec has none. Used for TP all-reduce volume and lm_head size.
_HIDDEN_SIZE_FALLBACK: dict[str, tuple[int, str]] = {
    "llama-4-scout": (5120, "AIC:meta-llama--Llama-4-Scout-17B-16E-Instruct_config.json text_config"),
    "step-3.5-flash": (4096, "AIC:stepfun-ai--Step-3.7-Flash_config.json (same geometry as 3.5)"),
    "mimo-v2-flash": (4096, "MiMo-V2-Flash config.json hidden_size (unverified here)"),
    "gemma-3-27b": (5376, "Gemma 3 27B text_config hidden_size (unverified here)"),
}

# Bytes per parameter of the non-expert ("dense") weights by architecture, where the checkpoint
# quantizes experts differently from the rest (reference Table 1): gpt-oss keeps attention,
# router and embeddings in BF16 with MXFP4 experts; DeepSeek-V4 and MiMo-V2 are FP8 outside the
# experts. Other architectures use the checkpoint's average bytes per parameter.
_DENSE_BYTES_PER_PARAM: dict[str, float] = {
    "GptOssForCausalLM": 2.0,
    "DeepseekV4ForCausalLM": 1.0,
    "DeepseekV4ForCausalLMNextN": 1.0,
    "DeepseekV4ForCausalLMDSpark": 1.0,
    "MiMoV2ForCausalLM": 1.0,
    "MiMoV2FlashForCausalLM": 1.0,
}

# TP all-reduce bus bandwidth (nccl-tests "busbw" convention, GB/s) by GPU preset name. H100 is


@dataclass(frozen=True, kw_only=True)
class ModelCostGeometry:
    """What the roofline needs to know about a model, whole-model unless named ``per_rank``.

    ``dense_params`` are the weights every forward streams (attention, dense MLPs, shared experts,
    router, lm_head; the input embedding is a lookup and is ignored where it can be told apart).
    ``routed_params`` are all routed experts of all layers; one expert index across all layers is
    ``routed_params / num_experts``. KV bytes are per context token on one attention-TP rank,
    summed over the layers of that kind, as SGLang's pools store them.
    """

    num_layers: int
    num_full_layers: int
    num_swa_layers: int
    sliding_window: int | None
    hidden_size: int
    num_attention_heads: int
    full_qk_head_dim: int
    full_v_head_dim: int
    swa_qk_head_dim: int
    swa_v_head_dim: int
    dense_params: float
    lm_head_params: float
    routed_params: float
    num_experts: int
    experts_per_token: int
    dense_bytes_per_param: float
    expert_bytes_per_param: float
    full_kv_bytes_per_token_per_rank: float
    swa_kv_bytes_per_token_per_rank: float

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "sliding_window":
                if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
                    raise ConfigError(
                        f"geometry sliding_window must be a positive integer or null, got {v!r}"
                    )
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ConfigError(f"geometry {f.name} must be a finite number >= 0, got {v!r}")
        if self.num_layers <= 0 or self.hidden_size <= 0 or self.num_attention_heads <= 0:
            raise ConfigError("geometry needs positive num_layers, hidden_size and num_attention_heads")
        if self.num_full_layers + self.num_swa_layers > self.num_layers:
            raise ConfigError(
                f"geometry: {self.num_full_layers} full + {self.num_swa_layers} SWA layers exceed "
                f"num_layers={self.num_layers}"
            )
        if self.routed_params > 0 and not 0 < self.experts_per_token <= self.num_experts:
            raise ConfigError(
                f"geometry: experts_per_token={self.experts_per_token} must lie in [1, num_experts="
                f"{self.num_experts}] when routed_params > 0"
            )
        if self.lm_head_params > self.dense_params:
            raise ConfigError("geometry: lm_head_params cannot exceed dense_params")

    @property
    def params_per_expert(self) -> float:
        """Parameters of one expert index summed over all MoE layers."""
        return self.routed_params / self.num_experts if self.num_experts else 0.0


INT_GEOMETRY_FIELDS = frozenset(
    {
        "num_layers",
        "num_full_layers",
        "num_swa_layers",
        "hidden_size",
        "num_attention_heads",
        "full_qk_head_dim",
        "full_v_head_dim",
        "swa_qk_head_dim",
        "swa_v_head_dim",
        "num_experts",
        "experts_per_token",
    }
)


def derive_geometry(
    model: ModelSpec, tp: int, *, kv_dtype_bytes: int | None = None
) -> tuple[ModelCostGeometry, list[str]]:
    """Derive the roofline's model quantities from a ModelSpec; returns them with notes naming
    every quantity that had to be estimated (for ``describe()`` and reports).

    The parameter split comes from the model card's total/active counts when the preset has them:
    with ``k`` of ``E`` experts active, ``total - active = routed x (1 - k/E)``, so
    ``routed = (total - active) / (1 - k/E)`` and the rest is dense. Without counts it is built from
    the config geometry (hidden size, heads, intermediate sizes, vocabulary), and without those
    from the weight bytes at 2 bytes/parameter.
    """
    if tp <= 0:
        raise ConfigError(f"tp must be positive, got {tp}")
    notes: list[str] = []
    kvb = model.kv_dtype_bytes if kv_dtype_bytes is None else int(kv_dtype_bytes)
    if kvb <= 0:
        raise ConfigError(f"kv_dtype_bytes must be positive, got {kvb}")

    heads, hidden = _heads_and_hidden(model, notes)
    experts = model.num_experts or 0
    top_k = model.experts_per_token or 0
    is_moe = experts > 1 and 0 < top_k < experts
    vocab = model.vocab_size
    lm_head = float(vocab * hidden) if vocab else 0.0
    if not vocab:
        notes.append("vocab_size unknown; lm_head FLOPs are charged on every token as dense")
    dense, routed = _param_split(model, hidden, heads, lm_head, is_moe, notes)
    lm_head = min(lm_head, dense)
    dense_bpp, expert_bpp = _bytes_per_param(model, dense, routed, notes)

    full_kv, swa_kv = kv_bytes_per_token_per_rank(model, tp, kvb)
    if model.is_dsv4:
        notes.append(
            "DeepSeek-V4 KV read per full token = compressed latent + indexer (index_topk sparsity "
            "not modelled: an upper bound at long context)"
        )
    has_swa = bool(model.num_swa_layers)
    geometry = ModelCostGeometry(
        num_layers=model.num_layers,
        num_full_layers=model.num_full_layers,
        num_swa_layers=model.num_swa_layers,
        sliding_window=model.sliding_window if has_swa else None,
        hidden_size=int(hidden),
        num_attention_heads=int(heads),
        full_qk_head_dim=model.head_dim,
        full_v_head_dim=model.v_head_dim,
        swa_qk_head_dim=model.swa_head_dim if has_swa else model.head_dim,
        swa_v_head_dim=model.swa_v_head_dim if has_swa else model.v_head_dim,
        dense_params=float(dense),
        lm_head_params=float(lm_head),
        routed_params=float(routed),
        num_experts=experts if routed > 0 else 0,
        experts_per_token=top_k if routed > 0 else 0,
        dense_bytes_per_param=float(dense_bpp),
        expert_bytes_per_param=float(expert_bpp),
        full_kv_bytes_per_token_per_rank=float(full_kv),
        swa_kv_bytes_per_token_per_rank=float(swa_kv),
    )
    return geometry, notes


def _heads_and_hidden(model: ModelSpec, notes: list[str]) -> tuple[int, int]:
    """Query heads and hidden size, estimated (with a note) where the spec lacks them."""
    heads = model.num_attention_heads
    if not heads:
        heads = model.num_kv_heads
        notes.append(f"num_attention_heads unknown; assumed {heads} (= KV heads, MHA)")
    hidden = model.hidden_size
    if not hidden:
        fallback = _HIDDEN_SIZE_FALLBACK.get(model.name.strip().lower())
        if fallback is not None:
            hidden = fallback[0]
            notes.append(f"hidden_size {hidden} from {fallback[1]}")
        else:
            hidden = heads * model.head_dim
            notes.append(f"hidden_size unknown; estimated as heads x head_dim = {hidden}")
    return heads, hidden


def _param_split(
    model: ModelSpec, hidden: int, heads: int, lm_head: float, is_moe: bool, notes: list[str]
) -> tuple[float, float]:
    """(dense, routed) parameters: from the card's total/active counts when both are known,
    else from config geometry, else from the weight bytes split in the geometry's proportions."""
    total = model.params_total
    active = model.params_active
    if total is None and model.weight_bytes is None and model.hidden_size is None:
        raise ConfigError(
            f"model {model.name!r}: the cost model needs params_total, weight_bytes or hidden_size "
            "(add one to the model spec)"
        )
    if total is not None and active is not None:
        if active > total:
            raise ConfigError(f"model {model.name!r}: params_active {active} exceeds params_total {total}")
        routed = 0.0
        if is_moe and active < total:
            experts, top_k = model.num_experts or 0, model.experts_per_token or 0
            routed = min((total - active) / (1.0 - top_k / experts), total)
        dense = total - routed
        source = "card total/active"
    else:
        dense_g, routed_g, total_g = _params_from_geometry(model, hidden, heads, lm_head, is_moe)
        if total is None and model.weight_bytes is None and total_g > 0:
            routed, dense = routed_g, dense_g
            source = "config geometry"
            notes.append(f"parameters estimated from config geometry: {total_g / 1e9:.2f} B")
        else:
            base = float(total) if total is not None else float(model.weight_bytes or 0) / 2.0
            if total is None:
                notes.append("params_total unknown; estimated as weight_bytes / 2 (BF16)")
            routed = base * routed_g / total_g if total_g > 0 and routed_g > 0 else 0.0
            dense = base - routed
            source = "weights + geometry split"
        if is_moe and routed > 0:
            notes.append("params_active unknown; routed/dense split from config geometry")
        elif is_moe:
            notes.append(
                "MoE without params_active or expert sizes: priced as dense (every weight read each step)"
            )
    notes.append(f"dense {dense / 1e9:.3f} B / routed {routed / 1e9:.3f} B parameters ({source})")
    return dense, routed


def _bytes_per_param(model: ModelSpec, dense: float, routed: float, notes: list[str]) -> tuple[float, float]:
    """(dense, expert) bytes per parameter: the architecture's dense precision from the table,
    the experts taking the rest of the checkpoint's bytes; the average where that does not fit."""
    total_params = dense + routed
    weight_bytes = float(model.weight_bytes) if model.weight_bytes else 2.0 * total_params
    if not model.weight_bytes:
        notes.append("weight_bytes unknown; assumed 2 bytes/parameter")
    avg_bpp = weight_bytes / total_params if total_params > 0 else 2.0
    if routed <= 0:
        return avg_bpp, avg_bpp
    dense_bpp = _DENSE_BYTES_PER_PARAM.get(model.architecture, avg_bpp)
    expert_bpp = (weight_bytes - dense * dense_bpp) / routed
    if expert_bpp < 0.25:
        # The table's dense precision does not fit this checkpoint's size; fall back to uniform.
        notes.append("weights priced at the average bytes/parameter (per-part split did not fit)")
        return avg_bpp, avg_bpp
    return dense_bpp, expert_bpp


def _params_from_geometry(
    model: ModelSpec, hidden: int, heads: int, lm_head: float, is_moe: bool
) -> tuple[float, float, float]:
    """(dense, routed, total) parameters of a standard decoder from config geometry: GQA attention,
    gated (3-matrix) MLPs or experts in every layer, untied embeddings. Zeros when the geometry is
    too incomplete to say."""
    if not model.hidden_size:
        return 0.0, 0.0, 0.0

    def attn(kv_heads: int, dqk: int, dv: int) -> float:
        return float(hidden * (heads * dqk + kv_heads * (dqk + dv)) + heads * dv * hidden)

    attn_params = model.num_full_layers * attn(model.num_kv_heads, model.head_dim, model.v_head_dim)
    attn_params += model.num_swa_layers * attn(
        model.swa_num_kv_heads, model.swa_head_dim, model.swa_v_head_dim
    )
    if model.num_full_layers + model.num_swa_layers == 0:
        attn_params = model.num_layers * attn(model.num_kv_heads, model.head_dim, model.v_head_dim)
    routed = 0.0
    dense_mlp = 0.0
    if is_moe:
        expert_inter = model.moe_intermediate_size or model.intermediate_size
        if expert_inter:
            routed = float(model.num_layers * (model.num_experts or 0) * 3 * hidden * expert_inter)
    elif model.intermediate_size:
        dense_mlp = float(model.num_layers * 3 * hidden * model.intermediate_size)
    embed = lm_head  # untied input embedding of the same shape (read as a lookup, not streamed)
    dense = attn_params + dense_mlp + lm_head
    return dense, routed, dense + routed + embed
