"""KV bytes per token: the one place that turns a model's geometry into bytes.

Pool sizing (``simulator.pool_sizing``) prices pools with these figures and the cost model
(``simulator.cost``) prices the KV reads of attention with them, so the two can never disagree
about what one token of KV costs. Page rounding lives in ``simulator.request_kv``
(``ceil_page`` / ``floor_page``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simulator.models import ModelSpec

__all__ = [
    "DSV4_LATENT_BYTES_PER_TOKEN",
    "DSV4_PAGE_ALIGN_BYTES",
    "GIB",
    "dsv4_indexer_bytes_per_token",
    "dsv4_paged_bytes_per_token",
    "full_layer_kv_bytes",
    "kv_bytes_per_token_per_rank",
    "swa_layer_kv_bytes",
]

GIB = 1 << 30

# kernels/ops/attention/dsv4/kv_layout.py::KVLayout.V4 (the default SGLANG_DSV4_KV_LAYOUT="v4"):
# 448 fp8 nope + 64 bf16 rope + 8 scale bytes per token, pages padded to 576-byte rows.
DSV4_LATENT_BYTES_PER_TOKEN = 584
DSV4_PAGE_ALIGN_BYTES = 576


def full_layer_kv_bytes(model: ModelSpec, attn_tp: int, kv_dtype_bytes: int) -> int:
    """K + V bytes of one token on one full-attention layer of one attention-TP rank
    (pool_configurator.py::HybridSWAPoolConfigurator.__init__, MHA): heads per rank (floored
    at one) x (k_dim + v_dim) x dtype bytes."""
    return model.kv_heads_per_rank(attn_tp) * (model.head_dim + model.v_head_dim) * kv_dtype_bytes


def swa_layer_kv_bytes(model: ModelSpec, attn_tp: int, kv_dtype_bytes: int) -> int:
    """K + V bytes of one token on one sliding-window layer of one rank, with the SWA heads/dims."""
    return model.swa_kv_heads_per_rank(attn_tp) * (model.swa_head_dim + model.swa_v_head_dim) * kv_dtype_bytes


def dsv4_indexer_bytes_per_token(index_head_dim: int) -> int:
    """deepseek_v4_memory_pool.py::get_dsv4_indexer_bytes_per_token (FP8 indexer key on CUDA):
    one byte per dimension plus a 4-byte scale per 128 dimensions."""
    return index_head_dim + index_head_dim // 128 * 4


def dsv4_paged_bytes_per_token(page: int) -> float:
    """KVLayout.page_bytes(page) / page for the V4 layout: a page's latents padded to 576-byte rows."""
    raw = page * DSV4_LATENT_BYTES_PER_TOKEN
    return (-(-raw // DSV4_PAGE_ALIGN_BYTES) * DSV4_PAGE_ALIGN_BYTES) / page


def kv_bytes_per_token_per_rank(model: ModelSpec, tp: int, kv_dtype_bytes: int) -> tuple[float, float]:
    """KV bytes per context token on one rank, summed over full and over SWA layers (each layer
    priced with its own geometry, whether or not SGLang builds separate pools for them).

    DeepSeek-V4 keeps one latent head, replicated on every attention-TP rank: c4 layers keep 1/4
    of the tokens plus an FP8 indexer key, c128 layers 1/128, and every layer a window of SWA
    latents (unpadded bytes; the pools' page padding is pool sizing's business)."""
    if model.dsv4 is not None:
        geom = model.dsv4
        indexer = dsv4_indexer_bytes_per_token(geom.index_head_dim)
        n_c4, n_c128 = geom.layers_with_ratio(4), geom.layers_with_ratio(128)
        latent = DSV4_LATENT_BYTES_PER_TOKEN
        full = n_c4 * (latent + indexer) / 4 + n_c128 * latent / 128
        swa = len(geom.compress_ratios) * latent
        return float(full), float(swa)
    full = model.num_full_layers * full_layer_kv_bytes(model, tp, kv_dtype_bytes)
    swa = model.num_swa_layers * swa_layer_kv_bytes(model, tp, kv_dtype_bytes)
    return float(full), float(swa)
