"""The KV-relevant geometry of one model (:class:`ModelSpec`) and DeepSeek-V4's compressed
attention geometry (:class:`Dsv4Geometry`), in the terms SGLang's pool configurators use.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from simulator.errors import ConfigError
from simulator.models.archs import HYBRID_SWA_ARCHS, HYBRID_SWA_COMPRESS_ARCHS


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
