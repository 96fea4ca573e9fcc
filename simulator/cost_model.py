"""Step-time cost model: how long one prefill or decode forward of an SGLang server takes.

The simulator never runs a model; it charges each scheduled forward step a duration from this
module. The default is a roofline built from the model and GPU presets, per tensor-parallel (TP)
rank. A forward is split into groups of kernels that run one after another, and each group costs
``max(FLOPs / achievable FLOP/s, bytes / achievable HBM bandwidth)``:

* ``dense``  - attention projections, dense MLPs, shared experts, router, lm_head: every weight is
  read once per step; FLOPs are ``2 x params x tokens`` (lm_head only on each request's last token
  in prefill, which is what SGLang computes logits for).
* ``moe``    - routed experts: only the experts the step's tokens select are read. With ``N``
  tokens each picking ``k`` of ``E`` experts, the expected number of distinct experts per layer
  under uniform routing is ``E x (1 - (1 - k/E)^N)``; real routers are skewed, which touches fewer
  experts, so this is an upper bound on bytes. Experts are TP-sharded (SGLang's default, no EP).
* ``attn_full`` / ``attn_swa`` - attention over the KV cache on full and sliding-window layers:
  FLOPs ``2 x q_heads x (d_k + d_v)`` per (query, key) pair, bytes = KV read + KV written.
  SWA layers see at most ``window`` keys per query, so their cost stops growing with context.

Then ``allreduce`` (TP > 1: ``allreduces_per_layer`` per layer, each ``latency + 2(TP-1)/TP x
activation bytes / bus bandwidth``) and ``overhead`` (per step, per layer, per request: scheduler,
kernel launch floors, sampling) are added. Summing per-group maxima rather than taking one global
max matters because the groups are sequential kernels: a decode step's attention is memory-bound
even when its GEMMs are not, and a global max would hide one under the other.

Every coefficient (efficiencies, peaks, overheads, all-reduce figures) and every derived model
quantity (parameter split, bytes per parameter, hidden size, KV bytes) can be replaced by a
calibration profile (JSON, schema in docs/cost-model.md, read by :func:`load_profile`). A later
issue measures profiles on real GPUs with ``gpu_replay``; until then the defaults are estimates.

The model is pure and deterministic: no simulation state, no globals, no randomness. Formulas and
the worked example are in docs/cost-model.md.
"""

from __future__ import annotations

import bisect
import difflib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from simulator.errors import ConfigError
from simulator.gpus import GpuSpec
from simulator.models import ModelSpec

__all__ = [
    "PROFILE_VERSION",
    "CostCoefficients",
    "CostModel",
    "ModelCostGeometry",
    "derive_geometry",
    "load_profile",
    "validate_profile",
]

#: Schema version of calibration profiles this module reads and writes.
PROFILE_VERSION = 1

# Bytes of one activation element (BF16 hidden states) moved by TP all-reduces.
_ACT_BYTES = 2

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
# measured: NCCL all-reduce of 1 GiB on this project's device machines gave 329 (2 GPUs), 355 (4)
# and 361 GB/s (8); H200 shares H100's NVLink 4. The others are scaled from their link speed.
_ALLREDUCE_BUS_GBPS: dict[str, float] = {
    "h100": 350.0,
    "h200": 350.0,
    "b200": 700.0,  # NVLink 5 is twice NVLink 4 (estimate)
    "a100": 230.0,  # NVLink 3, 600 GB/s bidirectional (estimate)
    "l40s": 20.0,  # no NVLink; PCIe Gen4 x16 (estimate)
}
_ALLREDUCE_BUS_GBPS_DEFAULT = 100.0

# DeepSeek-V4 paged latent bytes per token (FlashMLA layout) and indexer bytes per c4 entry; the
# same constants simulator/pool_sizing.py prices pools with.
_DSV4_LATENT_BYTES = 584


# --------------------------------------------------------------------------------------------------
# Coefficients (what a calibration profile fits)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class CostCoefficients:
    """Achievable-rate and overhead coefficients of the roofline.

    Peaks come from the GPU preset (``None`` = take the preset's value). Efficiencies are the
    fraction of that peak real kernels reach; they are separate per kernel group because a
    calibration fits them separately: a prefill dominated by MoE GEMMs and one dominated by
    long-context attention move different coefficients. Times are seconds.
    """

    peak_tflops: float | None = None
    hbm_bandwidth_gbps: float | None = None
    allreduce_bus_gbps: float | None = None
    # Fraction of peak FLOP/s: dense GEMMs, MoE grouped GEMMs (routing imbalance, W4A16 dequant on
    # Hopper), attention (causal tile waste, small head dims).
    dense_flops_efficiency: float = 0.65
    moe_flops_efficiency: float = 0.45
    attention_flops_efficiency: float = 0.45
    # Fraction of peak HBM bandwidth: streaming weights (large, contiguous) and reading paged KV.
    weight_bandwidth_efficiency: float = 0.80
    kv_bandwidth_efficiency: float = 0.70
    # TP all-reduces: count per layer (after attention and after the MLP) and fixed latency each.
    allreduces_per_layer: float = 2.0
    allreduce_latency_s: float = 10e-6
    # Decode runs from CUDA graphs: a small per-step cost (sampling, graph launch, bookkeeping not
    # overlapped by the scheduler) and a per-layer floor of ~12-15 tiny kernels.
    decode_step_overhead_s: float = 200e-6
    decode_layer_overhead_s: float = 40e-6
    decode_per_request_s: float = 1e-6
    # Prefill runs eagerly: batch preparation, per-layer launch floors, per-request metadata.
    prefill_step_overhead_s: float = 1e-3
    prefill_layer_overhead_s: float = 30e-6
    prefill_per_request_s: float = 20e-6

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ConfigError(f"cost coefficient {f.name} must be a finite number, got {v!r}")
            if v < 0:
                raise ConfigError(f"cost coefficient {f.name} must be >= 0, got {v}")
            if f.name.endswith("_efficiency") and not 0 < v <= 1.5:
                raise ConfigError(f"cost coefficient {f.name} must lie in (0, 1.5], got {v}")
            if f.name in ("peak_tflops", "hbm_bandwidth_gbps", "allreduce_bus_gbps") and v <= 0:
                raise ConfigError(f"cost coefficient {f.name} must be positive, got {v}")

    def resolved(self, gpu: GpuSpec) -> CostCoefficients:
        """The same coefficients with every ``None`` peak filled from the GPU preset."""
        return replace(
            self,
            peak_tflops=self.peak_tflops if self.peak_tflops is not None else float(gpu.bf16_dense_tflops),
            hbm_bandwidth_gbps=(
                self.hbm_bandwidth_gbps
                if self.hbm_bandwidth_gbps is not None
                else float(gpu.hbm_bandwidth_gbps)
            ),
            allreduce_bus_gbps=(
                self.allreduce_bus_gbps
                if self.allreduce_bus_gbps is not None
                else _ALLREDUCE_BUS_GBPS.get(gpu.name.strip().lower(), _ALLREDUCE_BUS_GBPS_DEFAULT)
            ),
        )


# --------------------------------------------------------------------------------------------------
# Model quantities the roofline needs (derived from ModelSpec; overridable)
# --------------------------------------------------------------------------------------------------


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


_INT_GEOMETRY_FIELDS = frozenset(
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

    experts = model.num_experts or 0
    top_k = model.experts_per_token or 0
    is_moe = experts > 1 and 0 < top_k < experts
    vocab = model.vocab_size
    lm_head = float(vocab * hidden) if vocab else 0.0
    if not vocab:
        notes.append("vocab_size unknown; lm_head FLOPs are charged on every token as dense")

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
        if is_moe and active < total:
            routed = (total - active) / (1.0 - top_k / experts)
            routed = min(routed, total)
        else:
            routed = 0.0
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
            if total_g > 0 and routed_g > 0:
                routed = base * routed_g / total_g
            else:
                routed = 0.0
            dense = base - routed
            source = "weights + geometry split"
        if is_moe and routed > 0:
            notes.append("params_active unknown; routed/dense split from config geometry")
        elif is_moe:
            notes.append(
                "MoE without params_active or expert sizes: priced as dense (every weight read each step)"
            )
    if dense < lm_head:
        lm_head = dense
    notes.append(f"dense {dense / 1e9:.3f} B / routed {routed / 1e9:.3f} B parameters ({source})")

    total_params = dense + routed
    weight_bytes = float(model.weight_bytes) if model.weight_bytes else 2.0 * total_params
    if not model.weight_bytes:
        notes.append("weight_bytes unknown; assumed 2 bytes/parameter")
    avg_bpp = weight_bytes / total_params if total_params > 0 else 2.0
    if routed > 0:
        dense_bpp = _DENSE_BYTES_PER_PARAM.get(model.architecture, avg_bpp)
        expert_bpp = (weight_bytes - dense * dense_bpp) / routed
        if expert_bpp < 0.25:
            # The table's dense precision does not fit this checkpoint's size; fall back to uniform.
            dense_bpp = expert_bpp = avg_bpp
            notes.append("weights priced at the average bytes/parameter (per-part split did not fit)")
    else:
        dense_bpp = expert_bpp = avg_bpp

    full_kv, swa_kv = _kv_bytes_per_token_per_rank(model, tp, kvb)
    if model.is_dsv4:
        notes.append(
            "DeepSeek-V4 KV read per full token = compressed latent + indexer (index_topk sparsity "
            "not modelled: an upper bound at long context)"
        )
    window = model.sliding_window if model.num_swa_layers else None
    geometry = ModelCostGeometry(
        num_layers=model.num_layers,
        num_full_layers=model.num_full_layers,
        num_swa_layers=model.num_swa_layers,
        sliding_window=window,
        hidden_size=int(hidden),
        num_attention_heads=int(heads),
        full_qk_head_dim=model.head_dim,
        full_v_head_dim=model.v_head_dim,
        swa_qk_head_dim=model.swa_head_dim if model.num_swa_layers else model.head_dim,
        swa_v_head_dim=model.swa_v_head_dim if model.num_swa_layers else model.v_head_dim,
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


def _kv_bytes_per_token_per_rank(model: ModelSpec, tp: int, kvb: int) -> tuple[float, float]:
    """KV bytes per context token on one rank, summed over full and over SWA layers (the heads per
    rank floor at one, as SGLang's ModelConfig.get_num_kv_heads does)."""
    if model.dsv4 is not None:
        geom = model.dsv4
        # One latent head, replicated on every attention-TP rank. c4 layers keep 1/4 of the tokens
        # plus an FP8 indexer key; c128 layers 1/128; every layer keeps a window of SWA latents.
        indexer = geom.index_head_dim + geom.index_head_dim // 128 * 4
        n_c4, n_c128 = geom.layers_with_ratio(4), geom.layers_with_ratio(128)
        full = n_c4 * (_DSV4_LATENT_BYTES + indexer) / 4 + n_c128 * _DSV4_LATENT_BYTES / 128
        swa = len(geom.compress_ratios) * _DSV4_LATENT_BYTES
        return float(full), float(swa)
    full = model.num_full_layers * model.kv_heads_per_rank(tp) * (model.head_dim + model.v_head_dim) * kvb
    swa = 0
    if model.num_swa_layers:
        swa = (
            model.num_swa_layers
            * model.swa_kv_heads_per_rank(tp)
            * (model.swa_head_dim + model.swa_v_head_dim)
            * kvb
        )
    return float(full), float(swa)


# --------------------------------------------------------------------------------------------------
# Calibration profiles
# --------------------------------------------------------------------------------------------------

_COEFFICIENT_KEYS = tuple(f.name for f in fields(CostCoefficients))
_GEOMETRY_KEYS = tuple(f.name for f in fields(ModelCostGeometry))
_TOP_KEYS = ("version", "name", "description", "provenance", "coefficients", "model")
_PROVENANCE_KEYS = ("kind", "gpu", "model", "tp", "tool", "date", "source", "notes")
_PROVENANCE_KINDS = ("roofline", "measured", "fitted")


def _reject_unknown(section: str, given: Mapping[str, Any], allowed: tuple[str, ...], origin: str) -> None:
    for key in given:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{origin}: unknown {section} key {key!r}{hint}; allowed: {', '.join(allowed)}")


def validate_profile(profile: Mapping[str, Any], *, origin: str = "<profile>") -> dict[str, Any]:
    """Check a calibration profile and return a plain-dict copy.

    Unknown keys are rejected with an error naming the key (and the nearest valid one), so a typo
    never silently leaves a default in place. ``version`` must be :data:`PROFILE_VERSION`.
    Coefficient values are checked by building :class:`CostCoefficients`; model overrides by type.
    """
    if not isinstance(profile, Mapping):
        raise ConfigError(f"{origin}: a cost profile must be a JSON object")
    _reject_unknown("top-level", profile, _TOP_KEYS, origin)
    version = profile.get("version")
    if version != PROFILE_VERSION:
        raise ConfigError(
            f"{origin}: cost profile version {version!r} is not supported (this kvplan reads version "
            f'{PROFILE_VERSION}); set "version": {PROFILE_VERSION}'
        )
    out: dict[str, Any] = {"version": PROFILE_VERSION}
    for key in ("name", "description"):
        if key in profile:
            if not isinstance(profile[key], str):
                raise ConfigError(f"{origin}: {key} must be a string")
            out[key] = profile[key]
    prov = profile.get("provenance", {})
    if not isinstance(prov, Mapping):
        raise ConfigError(f"{origin}: provenance must be an object")
    _reject_unknown("provenance", prov, _PROVENANCE_KEYS, origin)
    if "kind" in prov and prov["kind"] not in _PROVENANCE_KINDS:
        raise ConfigError(
            f"{origin}: provenance.kind {prov['kind']!r} must be one of {', '.join(_PROVENANCE_KINDS)}"
        )
    if "tp" in prov and (isinstance(prov["tp"], bool) or not isinstance(prov["tp"], int) or prov["tp"] <= 0):
        raise ConfigError(f"{origin}: provenance.tp must be a positive integer")
    out["provenance"] = dict(prov)

    coeffs = profile.get("coefficients", {})
    if not isinstance(coeffs, Mapping):
        raise ConfigError(f"{origin}: coefficients must be an object")
    _reject_unknown("coefficient", coeffs, _COEFFICIENT_KEYS, origin)
    try:
        CostCoefficients(**dict(coeffs))
    except ConfigError as exc:
        raise ConfigError(f"{origin}: {exc}") from None
    out["coefficients"] = dict(coeffs)

    model = profile.get("model", {})
    if not isinstance(model, Mapping):
        raise ConfigError(f"{origin}: model must be an object")
    _reject_unknown("model", model, _GEOMETRY_KEYS, origin)
    for key, v in model.items():
        if key == "sliding_window" and v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ConfigError(f"{origin}: model.{key} must be a finite number >= 0, got {v!r}")
        if key in _INT_GEOMETRY_FIELDS and int(v) != v:
            raise ConfigError(f"{origin}: model.{key} must be an integer, got {v!r}")
    out["model"] = dict(model)
    return out


def load_profile(path: str | Path) -> dict[str, Any]:
    """Read and validate a calibration profile JSON file (see docs/cost-model.md for the schema)."""
    p = Path(path).expanduser()
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read cost profile: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{p}: invalid JSON: {exc}") from None
    return validate_profile(data, origin=str(p))


# --------------------------------------------------------------------------------------------------
# The cost model
# --------------------------------------------------------------------------------------------------

_PARTS = ("dense", "moe", "attn_full", "attn_swa", "allreduce", "overhead")

#: Prefill batches of at most this many requests are summed in plain Python (faster than numpy).
_SMALL_BATCH = 32


@dataclass(frozen=True)
class _Rates:
    """Per-rank constants folded once so the per-step arithmetic is a handful of float ops."""

    # dense group
    dense_flops_per_token: float
    lm_head_flops_per_request: float
    dense_bytes: float
    # moe group
    moe_flops_per_token: float
    expert_bytes: float  # one expert index, all layers, one rank
    num_experts: float
    miss_per_token: float  # 1 - k/E
    # attention (per (query, key) pair summed over layers of that kind; per token of KV)
    full_flops_per_pair: float
    swa_flops_per_pair: float
    full_kv_bytes: float
    swa_kv_bytes: float
    # rates (FLOP/s and B/s)
    dense_flops_rate: float
    moe_flops_rate: float
    attn_flops_rate: float
    weight_bw: float
    kv_bw: float
    # all-reduce
    allreduce_count: float
    allreduce_latency: float
    allreduce_s_per_token: float


@dataclass(frozen=True, kw_only=True)
class CostModel:
    """Roofline step-time model of one SGLang server (one TP group).

    Build it with :meth:`from_presets`. All times are seconds of one forward on the whole TP
    group (ranks run in lockstep, so one rank's time is the step's time).
    """

    model_name: str
    gpu_name: str
    tp: int
    coefficients: CostCoefficients
    geometry: ModelCostGeometry
    profile_name: str | None = None
    profile_provenance: Mapping[str, Any] = field(default_factory=dict)
    coefficient_sources: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    _r: _Rates = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.tp <= 0:
            raise ConfigError(f"tp must be positive, got {self.tp}")
        c, g, tp = self.coefficients, self.geometry, self.tp
        if c.peak_tflops is None or c.hbm_bandwidth_gbps is None or c.allreduce_bus_gbps is None:
            raise ConfigError("CostModel needs resolved coefficients (use CostCoefficients.resolved)")
        peak = c.peak_tflops * 1e12
        hbm = c.hbm_bandwidth_gbps * 1e9
        q_heads_rank = max(1.0, g.num_attention_heads / tp)
        rates = _Rates(
            dense_flops_per_token=2.0 * (g.dense_params - g.lm_head_params) / tp,
            lm_head_flops_per_request=2.0 * g.lm_head_params / tp,
            dense_bytes=g.dense_params * g.dense_bytes_per_param / tp,
            moe_flops_per_token=2.0 * g.experts_per_token * g.params_per_expert / tp,
            expert_bytes=g.params_per_expert * g.expert_bytes_per_param / tp,
            num_experts=float(g.num_experts),
            miss_per_token=1.0 - g.experts_per_token / g.num_experts if g.num_experts else 1.0,
            full_flops_per_pair=2.0
            * q_heads_rank
            * (g.full_qk_head_dim + g.full_v_head_dim)
            * g.num_full_layers,
            swa_flops_per_pair=2.0 * q_heads_rank * (g.swa_qk_head_dim + g.swa_v_head_dim) * g.num_swa_layers,
            full_kv_bytes=g.full_kv_bytes_per_token_per_rank,
            swa_kv_bytes=g.swa_kv_bytes_per_token_per_rank,
            dense_flops_rate=peak * c.dense_flops_efficiency,
            moe_flops_rate=peak * c.moe_flops_efficiency,
            attn_flops_rate=peak * c.attention_flops_efficiency,
            weight_bw=hbm * c.weight_bandwidth_efficiency,
            kv_bw=hbm * c.kv_bandwidth_efficiency,
            allreduce_count=c.allreduces_per_layer * g.num_layers if tp > 1 else 0.0,
            allreduce_latency=c.allreduce_latency_s if tp > 1 else 0.0,
            allreduce_s_per_token=(
                2.0 * (tp - 1) / tp * g.hidden_size * _ACT_BYTES / (c.allreduce_bus_gbps * 1e9)
                if tp > 1
                else 0.0
            ),
        )
        object.__setattr__(self, "_r", rates)

    # ---- construction --------------------------------------------------------------------------

    @classmethod
    def from_presets(
        cls,
        model: ModelSpec,
        gpu: GpuSpec,
        tp: int,
        profile: Mapping[str, Any] | None = None,
        *,
        kv_dtype_bytes: int | None = None,
    ) -> CostModel:
        """The roofline for ``model`` on ``tp`` GPUs of type ``gpu``, with a calibration profile's
        coefficients and model overrides applied on top of the defaults. ``kv_dtype_bytes``
        overrides the model's KV dtype (``--kv-cache-dtype fp8_e4m3`` gives 1)."""
        geometry, notes = derive_geometry(model, tp, kv_dtype_bytes=kv_dtype_bytes)
        coeffs = CostCoefficients()
        sources = {name: "default" for name in _COEFFICIENT_KEYS}
        for name in ("peak_tflops", "hbm_bandwidth_gbps"):
            sources[name] = f"gpu preset {gpu.name}"
        sources["allreduce_bus_gbps"] = (
            f"table for {gpu.name}" if gpu.name.strip().lower() in _ALLREDUCE_BUS_GBPS else "generic default"
        )
        prof_name: str | None = None
        provenance: dict[str, Any] = {}
        if profile is not None:
            checked = validate_profile(profile)
            prof_name = checked.get("name")
            provenance = dict(checked.get("provenance", {}))
            label = f"profile {prof_name}" if prof_name else "profile"
            if checked["coefficients"]:
                coeffs = replace(coeffs, **checked["coefficients"])
                for key in checked["coefficients"]:
                    sources[key] = label
            if checked["model"]:
                overrides = {
                    k: (int(v) if k in _INT_GEOMETRY_FIELDS else v) for k, v in checked["model"].items()
                }
                geometry = replace(geometry, **overrides)
                notes.append(f"model quantities overridden by {label}: {', '.join(sorted(overrides))}")
            notes.extend(_profile_mismatches(provenance, model, gpu, tp))
        return cls(
            model_name=model.name,
            gpu_name=gpu.name,
            tp=tp,
            coefficients=coeffs.resolved(gpu),
            geometry=geometry,
            profile_name=prof_name,
            profile_provenance=provenance,
            coefficient_sources=sources,
            notes=tuple(notes),
        )

    # ---- the roofline --------------------------------------------------------------------------

    def _linear_parts(self, tokens: float, requests: float) -> tuple[float, float]:
        """(dense, moe) seconds for a forward of ``tokens`` tokens from ``requests`` requests."""
        r = self._r
        dense = max(
            (r.dense_flops_per_token * tokens + r.lm_head_flops_per_request * requests) / r.dense_flops_rate,
            r.dense_bytes / r.weight_bw,
        )
        if r.num_experts:
            touched = r.num_experts * (1.0 - r.miss_per_token**tokens)
            moe = max(
                r.moe_flops_per_token * tokens / r.moe_flops_rate, touched * r.expert_bytes / r.weight_bw
            )
        else:
            moe = 0.0
        return dense, moe

    def _fixed_parts(self, tokens: float, requests: float, phase: str) -> tuple[float, float]:
        """(allreduce, overhead) seconds."""
        r, c, g = self._r, self.coefficients, self.geometry
        allreduce = r.allreduce_count * (r.allreduce_latency + r.allreduce_s_per_token * tokens)
        if phase == "decode":
            overhead = (
                c.decode_step_overhead_s
                + c.decode_layer_overhead_s * g.num_layers
                + c.decode_per_request_s * requests
            )
        else:
            overhead = (
                c.prefill_step_overhead_s
                + c.prefill_layer_overhead_s * g.num_layers
                + c.prefill_per_request_s * requests
            )
        return allreduce, overhead

    def _attention_parts(
        self, full_pairs: Any, swa_pairs: Any, full_read: Any, swa_read: Any, written: float
    ) -> Any:
        """(attn_full, attn_swa) seconds; the pair and read arguments may be floats or arrays (the
        same operations either way, so decode_times matches decode_time bit for bit)."""
        r = self._r
        mx = np.maximum if isinstance(full_pairs, np.ndarray) or isinstance(swa_pairs, np.ndarray) else max
        attn_full = mx(
            full_pairs * r.full_flops_per_pair / r.attn_flops_rate,
            (full_read + written) * r.full_kv_bytes / r.kv_bw,
        )
        attn_swa = mx(
            swa_pairs * r.swa_flops_per_pair / r.attn_flops_rate,
            (swa_read + written) * r.swa_kv_bytes / r.kv_bw,
        )
        return attn_full, attn_swa

    def _decode_parts(self, bs: int, full_ctx: Any, swa_ctx: Any) -> tuple[Any, ...]:
        n = float(bs)
        dense, moe = self._linear_parts(n, n)
        attn_full, attn_swa = self._attention_parts(full_ctx, swa_ctx, full_ctx, swa_ctx, n)
        allreduce, overhead = self._fixed_parts(n, n, "decode")
        return dense, moe, attn_full, attn_swa, allreduce, overhead

    @staticmethod
    def _sum(parts: tuple[Any, ...]) -> Any:
        dense, moe, attn_full, attn_swa, allreduce, overhead = parts
        return ((((dense + moe) + attn_full) + attn_swa) + allreduce) + overhead

    def decode_time(self, bs: int, full_ctx_tokens: int, swa_ctx_tokens: int) -> float:
        """Seconds for one decode forward of ``bs`` requests. ``full_ctx_tokens`` = Σ sequence
        lengths (KV the full layers read); ``swa_ctx_tokens`` = Σ min(sequence length, window)
        (KV the SWA layers read). ``bs == 0`` costs nothing."""
        if bs <= 0:
            if bs < 0:
                raise ValueError(f"decode batch size must be >= 0, got {bs}")
            return 0.0
        if full_ctx_tokens < 0 or swa_ctx_tokens < 0:
            raise ValueError(f"context tokens must be >= 0, got {full_ctx_tokens}, {swa_ctx_tokens}")
        return float(self._sum(self._decode_parts(bs, float(full_ctx_tokens), float(swa_ctx_tokens))))

    def decode_terms(self, bs: int) -> tuple[float, float, float, float, float, float, float]:
        """A decode step of ``bs`` requests as ``base + max(fa*x, fb*(x+bs)) + max(sa*y, sb*(y+bs))``.

        Returns ``(dense+moe, fa, fb, sa, sb, allreduce, overhead)``, where ``x`` / ``y`` are the
        FULL / SWA context sums, so a simulator can price many steps with a few array operations
        (:class:`DecodeClock`). Same roofline as :meth:`decode_time` up to float rounding.
        """
        n = float(bs)
        dense, moe = self._linear_parts(n, n)
        allreduce, overhead = self._fixed_parts(n, n, "decode")
        r = self._r
        return (
            dense + moe,
            r.full_flops_per_pair / r.attn_flops_rate,
            r.full_kv_bytes / r.kv_bw,
            r.swa_flops_per_pair / r.attn_flops_rate,
            r.swa_kv_bytes / r.kv_bw,
            allreduce,
            overhead,
        )

    def decode_times(
        self, bs: int, full_ctx0: int, swa_ctx0: int, k: int, full_growth: int, swa_growth: int
    ) -> np.ndarray:
        """Seconds of ``k`` consecutive decode steps of a fixed batch whose context sums grow by
        ``full_growth`` / ``swa_growth`` tokens per step (step ``i`` sees ``full_ctx0 + i x
        full_growth``). Equal, element for element, to calling :meth:`decode_time` ``k`` times."""
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        if bs <= 0:
            if bs < 0:
                raise ValueError(f"decode batch size must be >= 0, got {bs}")
            return np.zeros(k, dtype=np.float64)
        steps = np.arange(k, dtype=np.float64)
        full = float(full_ctx0) + steps * float(full_growth)
        swa = float(swa_ctx0) + steps * float(swa_growth)
        if k and (min(full[0], full[-1]) < 0 or min(swa[0], swa[-1]) < 0):
            raise ValueError("context tokens must stay >= 0 over the k steps")
        out = self._sum(self._decode_parts(bs, full, swa))
        return np.asarray(out, dtype=np.float64)

    def _prefill_inputs(
        self, extend_lens: Any, prefix_lens: Any
    ) -> tuple[float, float, float, float, float, float]:
        """(tokens, requests, full pairs, SWA pairs, full KV read, SWA KV read) of a prefill batch.

        Causal full attention: the query at position n (1-based) sees n keys, so a request that
        extends from p to p + e does sum_{n=p+1}^{p+e} n = e p + e (e + 1) / 2 (query, key) pairs
        and reads p + e tokens of KV. SWA layers: the query at n sees min(n, w) keys (the decode
        convention, swa_ctx = Σ min(len, w)) and the request reads min(p, w) + e tokens.
        Batches up to :data:`_SMALL_BATCH` requests take a plain-Python loop (numpy's per-call cost
        dominates there); larger ones the vectorised form of the same sums.
        """
        w = self.geometry.sliding_window if self.geometry.num_swa_layers else None
        if type(extend_lens) is list and type(prefix_lens) is list and len(extend_lens) <= _SMALL_BATCH:
            # the simulator's per-batch call: skip the round trip through numpy
            if len(extend_lens) != len(prefix_lens):
                raise ValueError(
                    f"extend_lens and prefix_lens differ in length: {len(extend_lens)} vs {len(prefix_lens)}"
                )
            return _prefill_sums_loop(extend_lens, prefix_lens, w)
        e_arr = np.asarray(extend_lens, dtype=np.float64).ravel()
        p_arr = np.asarray(prefix_lens, dtype=np.float64).ravel()
        if e_arr.shape != p_arr.shape:
            raise ValueError(f"extend_lens and prefix_lens differ in length: {e_arr.size} vs {p_arr.size}")
        if e_arr.size <= _SMALL_BATCH:
            return _prefill_sums_loop(e_arr.tolist(), p_arr.tolist(), w)
        if e_arr.min() < 0 or p_arr.min() < 0:
            raise ValueError("extend and prefix lengths must be >= 0")
        e, p = e_arr, p_arr
        end = p + e
        tokens = float(e.sum())
        requests = float(np.count_nonzero(e))
        full_pairs = float((e * p + e * (e + 1.0) * 0.5).sum())
        full_read = float(end.sum())
        if w is not None:
            swa_pairs = float((_capped_triangle(end, w) - _capped_triangle(p, w)).sum())
            swa_read = float((np.minimum(p, w) + e).sum())
        else:
            swa_pairs, swa_read = full_pairs, full_read
        return tokens, requests, full_pairs, swa_pairs, full_read, swa_read

    def _prefill_parts(self, extend_lens: Any, prefix_lens: Any) -> tuple[float, ...]:
        tokens, requests, full_pairs, swa_pairs, full_read, swa_read = self._prefill_inputs(
            extend_lens, prefix_lens
        )
        if tokens == 0:
            return (0.0,) * len(_PARTS)
        dense, moe = self._linear_parts(tokens, requests)
        # Prefill reads the prefix KV and the new tokens' KV, and writes the new tokens' KV.
        attn_full, attn_swa = self._attention_parts(full_pairs, swa_pairs, full_read, swa_read, tokens)
        allreduce, overhead = self._fixed_parts(tokens, requests, "prefill")
        return dense, moe, attn_full, attn_swa, allreduce, overhead

    def prefill_time(self, extend_lens: Any, prefix_lens: Any) -> float:
        """Seconds for one prefill (extend) forward: request ``i`` computes ``extend_lens[i]`` new
        tokens on top of ``prefix_lens[i]`` cached ones (prefix KV is read, not recomputed). A
        batch with no extend tokens costs nothing."""
        return float(self._sum(self._prefill_parts(extend_lens, prefix_lens)))

    # ---- reporting -----------------------------------------------------------------------------

    def decode_breakdown(self, bs: int, full_ctx_tokens: int, swa_ctx_tokens: int) -> dict[str, float]:
        """Seconds per kernel group of one decode step (sums to :meth:`decode_time`)."""
        if bs <= 0:
            return dict.fromkeys(_PARTS, 0.0)
        parts = self._decode_parts(bs, float(full_ctx_tokens), float(swa_ctx_tokens))
        return {name: float(v) for name, v in zip(_PARTS, parts, strict=True)}

    def prefill_breakdown(self, extend_lens: Any, prefix_lens: Any) -> dict[str, float]:
        """Seconds per kernel group of one prefill step (sums to :meth:`prefill_time`)."""
        parts = self._prefill_parts(extend_lens, prefix_lens)
        return {name: float(v) for name, v in zip(_PARTS, parts, strict=True)}

    def experts_touched(self, tokens: int) -> float:
        """Expected distinct experts per MoE layer read by a forward of ``tokens`` tokens
        (uniform routing: E x (1 - (1 - k/E)^tokens))."""
        r = self._r
        return r.num_experts * (1.0 - r.miss_per_token ** float(tokens)) if r.num_experts else 0.0

    def describe(self) -> dict[str, Any]:
        """Every coefficient, derived model quantity and per-rank constant, with where each came
        from, as plain data for reports and ``--json`` output."""
        c, g, r = self.coefficients, self.geometry, self._r
        coeffs = {
            f.name: {"value": getattr(c, f.name), "source": self.coefficient_sources.get(f.name, "default")}
            for f in fields(c)
        }
        geometry = {f.name: getattr(g, f.name) for f in fields(g)}
        per_rank = {
            "dense_weight_bytes": r.dense_bytes,
            "all_expert_weight_bytes": r.expert_bytes * r.num_experts,
            "weight_bytes": r.dense_bytes + r.expert_bytes * r.num_experts,
            "dense_flops_per_token": r.dense_flops_per_token,
            "moe_flops_per_token": r.moe_flops_per_token,
            "full_kv_bytes_per_token": r.full_kv_bytes,
            "swa_kv_bytes_per_token": r.swa_kv_bytes,
            "attention_flops_per_full_pair": r.full_flops_per_pair,
            "attention_flops_per_swa_pair": r.swa_flops_per_pair,
            "achievable_dense_tflops": r.dense_flops_rate / 1e12,
            "achievable_moe_tflops": r.moe_flops_rate / 1e12,
            "achievable_attention_tflops": r.attn_flops_rate / 1e12,
            "achievable_weight_bandwidth_gbps": r.weight_bw / 1e9,
            "achievable_kv_bandwidth_gbps": r.kv_bw / 1e9,
            "allreduces_per_step": r.allreduce_count,
        }
        return {
            "kind": "roofline" if self.profile_name is None else "roofline+profile",
            "model": self.model_name,
            "gpu": self.gpu_name,
            "tp": self.tp,
            "profile": {"name": self.profile_name, "provenance": dict(self.profile_provenance)},
            "coefficients": coeffs,
            "geometry": geometry,
            "per_rank": per_rank,
            "notes": list(self.notes),
        }


class DecodeClock:
    """End times of the consecutive decode steps of one jump, held as linear pieces.

    ``segments`` are ``(steps, C, bs, x0, y0, g)``: ``steps`` steps of one batch whose step
    ``t`` costs ``C + max(fa*x, fb*(x+bs)) + max(sa*y, sb*(y+bs))`` with ``x = x0 + bs*t``,
    ``y = y0 + g*t`` (:meth:`CostModel.decode_terms`). Each max switches branch at most once,
    so a segment is at most three pieces whose step times are linear in ``j``; step ``j`` of a
    piece ends at ``E + a*(j+1) + b*j*(j+1)/2``. Pricing a jump is Python arithmetic on a few
    pieces; the per-step array is built only for the steps that ran (an arrival usually cuts a
    jump short), and :meth:`end` gives one step's end bit for bit equal to :meth:`ends`.
    """

    __slots__ = ("_starts", "_pieces", "steps", "_e", "_coeffs")

    def __init__(
        self,
        now: float,
        segments: list[tuple[int, float, int, int, int, int]],
        fa: float,
        fb: float,
        sa: float,
        sb: float,
    ) -> None:
        self._starts: list[int] = []
        self._pieces: list[tuple[int, int, float, float, float]] = []  # (start, length, E, a, b)
        self._e = now  # when the last step priced so far ends
        self._coeffs = (fa, fb, sa, sb)
        self.steps = 0
        for seg in segments:
            self.add(*seg)

    def add(self, steps: int, c: float, n: int, x0: int, y0: int, g: int) -> None:
        """Price one more segment (see the class docstring) after the steps priced so far."""
        fa, fb, sa, sb = self._coeffs
        # full term: max(a1 + b1*t, a2 + b2*t) with a1 = fa*x0, b1 = fa*n, a2 = fb*(x0+n),
        # b2 = fb*n; SWA term likewise (a3, b3, a4, b4) with y0 and g
        a1, b1, a2, b2 = fa * x0, fa * n, fb * (x0 + n), fb * n
        a3, b3, a4, b4 = sa * y0, sa * g, sb * (y0 + n), sb * g
        bounds = [0, steps]
        if b1 != b2:
            t_c = (a2 - a1) / (b1 - b2)  # where the two lines cross
            if 0 < t_c < steps:
                bounds.append(math.ceil(t_c))
        if b3 != b4:
            t_c = (a4 - a3) / (b3 - b4)
            if 0 < t_c < steps:
                bounds.append(math.ceil(t_c))
        if len(bounds) > 2:
            bounds = sorted(set(bounds))
        e, pos = self._e, self.steps
        for u, v in zip(bounds, bounds[1:], strict=False):
            if v <= u:
                continue
            mid = (u + v - 1) * 0.5  # both branches are linear: the one on top at mid is on top
            if a1 + b1 * mid >= a2 + b2 * mid:
                alpha, beta = c + a1, b1
            else:
                alpha, beta = c + a2, b2
            if a3 + b3 * mid >= a4 + b4 * mid:
                alpha += a3
                beta += b3
            else:
                alpha += a4
                beta += b4
            length = v - u
            alpha += beta * u  # step times of the piece: alpha + beta*j, j = 0..length-1
            self._starts.append(pos)
            self._pieces.append((pos, length, e, alpha, beta))
            e += alpha * length + beta * (length - 1) * length * 0.5
            pos += length
        self._e, self.steps = e, pos

    @property
    def last_end(self) -> float:
        """When the last step priced so far ends (the start time before any step)."""
        return self.end(self.steps - 1) if self.steps else self._e

    @property
    def pieces(self) -> list[tuple[int, int, float, float, float]]:
        """``(first step, steps, E, a, b)`` per piece: step ``first + j`` ends at
        ``(j+1)*a + j*(j+1)/2*b + E`` (operations in that order)."""
        return self._pieces

    def end(self, step: int) -> float:
        """When step ``step`` (0-based) ends; the same float as ``ends()[step]``."""
        start, _, e, alpha, beta = self._pieces[bisect.bisect_right(self._starts, step) - 1]
        j = float(step - start)
        v = (j + 1.0) * alpha  # the operations of ends(), in its order
        if beta:
            v += j * (j + 1.0) * 0.5 * beta
        return v + e

    def steps_ended_by(self, t: float) -> int:
        """How many steps have ended at time ``t`` (``ends().searchsorted(t, "right")``).

        Finds the piece, estimates the step from the piece's quadratic, then settles the answer
        with exact :meth:`end` comparisons (end times increase: every step takes time)."""
        pieces = self._pieces
        i = 0
        while i + 1 < len(pieces) and pieces[i + 1][2] <= t:  # a piece's E = the end before it
            i += 1
        start, length, e, alpha, beta = pieces[i]
        # steps of this piece ended by t: the largest n with alpha*n + beta*n*(n-1)/2 <= t - e
        d = t - e
        if beta:
            b = alpha - beta * 0.5
            disc = b * b + 2.0 * beta * d
            guess = (math.sqrt(disc) - b) / beta if disc > 0 else 0.0
        else:
            guess = d / alpha if alpha > 0 else float(length)
        n = start + min(max(int(guess), 0), length)
        # settle across piece borders too: E is summed, not evaluated, so it may differ by an ulp
        while n > 0 and self.end(n - 1) > t:
            n -= 1
        while n < self.steps and self.end(n) <= t:
            n += 1
        return n

    def ends(self, steps: int | None = None) -> np.ndarray:
        """End times of the first ``steps`` steps (all by default), as one array."""
        total = self.steps if steps is None else steps
        out_all = np.empty(total, dtype=np.float64)
        tri1, tri2 = triangles(total)
        for start, length, e, alpha, beta in self._pieces:
            if start >= total:
                break
            length = min(length, total - start)
            out = out_all[start : start + length]
            np.multiply(tri1[:length], alpha, out=out)
            if beta:
                out += tri2[:length] * beta
            out += e
        return out_all


_TRIANGLES: list[np.ndarray] = [np.ones(0), np.zeros(0)]


def triangles(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(j + 1, j*(j+1)/2)`` for ``j < n``, grown on demand and reused across calls."""
    if len(_TRIANGLES[0]) < n:
        j = np.arange(max(n, 2 * len(_TRIANGLES[0])), dtype=np.float64)
        _TRIANGLES[0] = j + 1.0
        _TRIANGLES[1] = j * (j + 1.0) * 0.5
    return _TRIANGLES[0], _TRIANGLES[1]


def _capped_triangle(n: np.ndarray, w: int) -> np.ndarray:
    """Σ_{m=1}^{n} min(m, w), elementwise: keys seen by the first n queries of a window-w layer."""
    wf = float(w)
    return np.where(n <= wf, n * (n + 1.0) * 0.5, wf * (wf + 1.0) * 0.5 + (n - wf) * wf)


def _capped_triangle_1(n: float, w: float) -> float:
    """Scalar :func:`_capped_triangle`."""
    return n * (n + 1.0) * 0.5 if n <= w else w * (w + 1.0) * 0.5 + (n - w) * w


def _prefill_sums_loop(
    extend: list[float], prefix: list[float], window: int | None
) -> tuple[float, float, float, float, float, float]:
    """The sums of :meth:`CostModel._prefill_inputs` for a small batch, one request at a time."""
    tokens = requests = full_pairs = swa_pairs = full_read = swa_read = 0.0
    wf = float(window) if window is not None else 0.0
    for e, p in zip(extend, prefix, strict=True):
        if e < 0 or p < 0:
            raise ValueError("extend and prefix lengths must be >= 0")
        tokens += e
        if e > 0:
            requests += 1.0
        full_pairs += e * p + e * (e + 1.0) * 0.5
        full_read += p + e
        if window is not None:
            swa_pairs += _capped_triangle_1(p + e, wf) - _capped_triangle_1(p, wf)
            swa_read += min(p, wf) + e
    if window is None:
        swa_pairs, swa_read = full_pairs, full_read
    return tokens, requests, full_pairs, swa_pairs, full_read, swa_read


def _profile_mismatches(provenance: Mapping[str, Any], model: ModelSpec, gpu: GpuSpec, tp: int) -> list[str]:
    """Notes (not errors: reusing a profile elsewhere can be deliberate) where a profile was made
    for another GPU, model or TP size than the one it is applied to."""
    out: list[str] = []
    if "gpu" in provenance and str(provenance["gpu"]).strip().lower() != gpu.name.strip().lower():
        out.append(f"profile was made for GPU {provenance['gpu']!r}, applied to {gpu.name!r}")
    if "model" in provenance and str(provenance["model"]).strip().lower() not in {
        model.name.strip().lower(),
        *(a.strip().lower() for a in model.aliases),
    }:
        out.append(f"profile was made for model {provenance['model']!r}, applied to {model.name!r}")
    if "tp" in provenance and provenance["tp"] != tp:
        out.append(f"profile was made for TP {provenance['tp']}, applied to TP {tp}")
    return out
