"""KV pool geometry of one TP rank, as SGLang 0.5.23 lays it out (no torch here).

The numbers come from the simulator: the model preset gives the layer split and head geometry,
``simulator.pool_sizing`` gives the device and host token counts. The GPU replay then allocates
pools of this shape, scaled down by caps where the lent machine cannot hold SGLang's full sizes.

SGLang names mirrored: ``SWAKVPool`` keeps a full pool and an SWA pool
(``mem_cache/swa_memory_pool.py``); each is an ``MHATokenToKVPool`` with ``size + page_size`` rows
per layer (``memory_pool.py::_create_buffers_normal``); each has its own host pool
(``hybrid_cache/hybrid_pool_assembler.py::build_hybrid_swa_stack``) whose size is a whole number
of pages plus one padding page (``pool_host/base.py::HostKVCache.__init__``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from simulator.errors import ConfigError
from simulator.gpus import get_gpu
from simulator.models import ModelSpec, load_model
from simulator.pool_sizing import PoolSizes, compute_pool_sizes
from simulator.server_args import ServerArgs

__all__ = [
    "HOST_LAYOUTS",
    "IO_BACKENDS",
    "PoolGeometry",
    "RankGeometry",
    "cap_rank",
    "rank_geometry",
    "resolve_layout_io",
]

GIB = 1 << 30
# --hicache-mem-layout values whose MHA host buffers we build (pool_host/mha.py::init_kv_buffer).
HOST_LAYOUTS = ("layer_first", "page_first", "page_first_direct")
# --hicache-io-backend values on CUDA (kernel_ascend is NPU-only).
IO_BACKENDS = ("kernel", "direct")
# The lent GPU machines have 128 GiB of RAM; leave room for the process and the OS.
DEFAULT_HOST_CAP_BYTES = 96 * GIB


def resolve_layout_io(layout: str, io_backend: str) -> tuple[str, str]:
    """hicache_hook.py::resolve_layout_io_compatibility for the MHA layouts we model:
    page_first_direct forces the direct backend, and page_first under direct becomes
    page_first_direct."""
    if layout not in HOST_LAYOUTS:
        raise ConfigError(f"host layout {layout!r} is not one of {', '.join(HOST_LAYOUTS)}")
    if io_backend not in IO_BACKENDS:
        raise ConfigError(f"io backend {io_backend!r} is not one of {', '.join(IO_BACKENDS)}")
    if layout == "page_first_direct" and io_backend == "kernel":
        return layout, "direct"
    if layout == "page_first" and io_backend == "direct":
        return "page_first_direct", io_backend
    return layout, io_backend


@dataclass(frozen=True, kw_only=True)
class PoolGeometry:
    """One device pool (full or SWA) and its host pool on one rank.

    ``device_tokens`` and ``host_tokens`` are the pool sizes without SGLang's padding page;
    device buffers get ``device_tokens + page_size`` rows, host buffers ``host_tokens +
    page_size`` (host pages = size // page_size + 1)."""

    name: str
    layer_ids: tuple[int, ...]
    head_num: int
    head_dim: int
    v_head_dim: int
    dtype_bytes: int
    page_size: int
    device_tokens: int
    host_tokens: int

    @property
    def layer_num(self) -> int:
        return len(self.layer_ids)

    @property
    def k_row_bytes(self) -> int:
        """Bytes of one token's K in one layer (SGLang's ``token_stride_size`` for K)."""
        return self.head_num * self.head_dim * self.dtype_bytes

    @property
    def v_row_bytes(self) -> int:
        return self.head_num * self.v_head_dim * self.dtype_bytes

    @property
    def page_layer_bytes(self) -> int:
        """K plus V bytes of one page in one layer: what a per-page, per-layer copy moves."""
        return self.page_size * (self.k_row_bytes + self.v_row_bytes)

    @property
    def device_rows(self) -> int:
        return self.device_tokens + self.page_size

    @property
    def host_rows(self) -> int:
        return self.host_tokens + self.page_size

    @property
    def device_pages(self) -> int:
        return self.device_rows // self.page_size

    @property
    def host_pages(self) -> int:
        return self.host_rows // self.page_size

    @property
    def device_bytes(self) -> int:
        return self.device_rows * self.layer_num * (self.k_row_bytes + self.v_row_bytes)

    @property
    def host_bytes(self) -> int:
        return self.host_rows * self.layer_num * (self.k_row_bytes + self.v_row_bytes)


@dataclass(frozen=True, kw_only=True)
class RankGeometry:
    """All KV pools of one TP rank (one for a non-hybrid model, full + SWA for a hybrid one)."""

    model: str
    tp_size: int
    page_size: int
    pools: tuple[PoolGeometry, ...]

    def pool(self, name: str) -> PoolGeometry:
        for p in self.pools:
            if p.name == name:
                return p
        raise ConfigError(f"no pool {name!r}; pools are {[p.name for p in self.pools]}")

    @property
    def device_bytes(self) -> int:
        return sum(p.device_bytes for p in self.pools)

    @property
    def host_bytes(self) -> int:
        return sum(p.host_bytes for p in self.pools)


def rank_geometry(
    model: ModelSpec | str,
    tp_size: int,
    *,
    page_size: int = 64,
    gpu: str = "H100",
    hicache_ratio: float | None = None,
    sizes: PoolSizes | None = None,
) -> RankGeometry:
    """SGLang's pools for ``model`` at TP ``tp_size`` on ``gpu``, from the simulator's sizing."""
    spec = load_model(model) if isinstance(model, str) else model
    if spec.is_dsv4:
        raise ConfigError("GPU replay models MHA/GQA pools; DeepSeek-V4 compressed pools are not built")
    if sizes is None:
        args = ServerArgs(
            tp_size=tp_size, page_size=page_size, enable_hierarchical_cache=True, hicache_ratio=hicache_ratio
        )
        sizes = compute_pool_sizes(spec, get_gpu(gpu), args)
    page = sizes.page_size
    dtype_bytes = sizes.kv_dtype_bytes
    full = PoolGeometry(
        name="full",
        layer_ids=tuple(spec.full_layer_ids) if sizes.hybrid_swa else tuple(range(spec.num_layers)),
        head_num=spec.kv_heads_per_rank(tp_size),
        head_dim=spec.head_dim,
        v_head_dim=spec.v_head_dim,
        dtype_bytes=dtype_bytes,
        page_size=page,
        device_tokens=sizes.full_tokens,
        host_tokens=_host_tokens(sizes.host_full_tokens, page),
    )
    if not sizes.hybrid_swa:
        return RankGeometry(model=spec.name, tp_size=tp_size, page_size=page, pools=(full,))
    # kv_cache_configurator.py::_build_hybrid_swa_kv_pool: only is_hybrid_swa_compress archs
    # allocate the SWA pool with SWA heads/dims; others reuse the full-layer geometry.
    swa_geo = spec.swa_pool_uses_swa_geometry
    swa = PoolGeometry(
        name="swa",
        layer_ids=tuple(spec.swa_layer_ids),
        head_num=spec.swa_kv_heads_per_rank(tp_size) if swa_geo else full.head_num,
        head_dim=spec.swa_head_dim if swa_geo else spec.head_dim,
        v_head_dim=spec.swa_v_head_dim if swa_geo else spec.v_head_dim,
        dtype_bytes=dtype_bytes,
        page_size=page,
        device_tokens=sizes.swa_tokens,
        host_tokens=_host_tokens(sizes.host_swa_tokens, page),
    )
    return RankGeometry(model=spec.name, tp_size=tp_size, page_size=page, pools=(full, swa))


def _host_tokens(tokens: int, page_size: int) -> int:
    """pool_host/base.py: whole pages only (the padding page is added by ``host_rows``)."""
    return (tokens // page_size) * page_size


def cap_rank(
    geo: RankGeometry,
    *,
    device_cap_bytes: int | None = None,
    host_cap_bytes: int | None = DEFAULT_HOST_CAP_BYTES,
) -> RankGeometry:
    """Shrink pool token counts (same geometry, same full:SWA proportion) so that the device pools
    fit ``device_cap_bytes`` and the host pools ``host_cap_bytes``. SGLang's sizes assume weights
    and a 2 TB host; the replay only needs the shapes and enough pages to scatter over."""
    pools = geo.pools
    for attr, cap in (("device", device_cap_bytes), ("host", host_cap_bytes)):
        if cap is None:
            continue
        total = sum(getattr(p, f"{attr}_bytes") for p in pools)
        if total <= cap:
            continue
        scale = cap / total
        pools = tuple(_scaled(p, attr, scale) for p in pools)
    return replace(geo, pools=pools)


def _scaled(p: PoolGeometry, attr: str, scale: float) -> PoolGeometry:
    per_row = p.layer_num * (p.k_row_bytes + p.v_row_bytes)
    rows_allowed = int(getattr(p, f"{attr}_bytes") * scale) // per_row
    tokens = max(p.page_size, (rows_allowed // p.page_size - 1) * p.page_size)
    return replace(p, **{f"{attr}_tokens": tokens})
