"""The SGLang server flags kvplan models, and how SGLang 0.5.23 resolves their defaults.

``ServerArgs`` holds what a user passes (``None`` = "not given", exactly as SGLang's fields).
``resolve_server_args`` fills the defaults the way SGLang's argument pipeline does for the flags
that change pool sizes: model overrides (``arg_groups/model_overrides/*.py``), the GPU-memory
heuristic (``arg_groups/memory_hook.py::handle_gpu_memory_settings``), the attention-backend and
page-size passes (``arg_groups/overrides.py``), and the HiCache ratio default
(``arg_groups/hicache_hook.py::handle_hicache_ratio_default``). Each decision is recorded in
``ResolvedServerArgs.notes`` so a user can see why a value came out as it did.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from simulator.errors import ConfigError
from simulator.gpus import GpuSpec
from simulator.models import ModelSpec

__all__ = [
    "ATTENTION_BACKENDS",
    "KV_CACHE_DTYPES",
    "ResolvedServerArgs",
    "ServerArgs",
    "default_mem_fraction_static",
    "resolve_server_args",
]

# --kv-cache-dtype choices kvplan prices (bytes per element). "auto" = the model's KV dtype.
KV_CACHE_DTYPES: dict[str, int | None] = {
    "auto": None,
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
}

# --attention-backend names SGLang accepts (arg_groups/choices.py::ATTENTION_BACKEND_CHOICES, CUDA
# and other platforms). kvplan resolves page-size constraints for the ones it knows
# (_resolve_page_size); the others keep the requested page size.
ATTENTION_BACKENDS: tuple[str, ...] = (
    "triton",
    "torch_native",
    "flex_attention",
    "dsa",
    "nsa",
    "qsa",
    "dsv4",
    "compressed",
    "fa3",
    "fa4",
    "flashinfer",
    "llada2_cfg_flashinfer",
    "flashmla",
    "trtllm_mla",
    "cutedsl_mla",
    "tokenspeed_mla",
    "trtllm_mha",
    "hpc_ops",
    "minicpm_flashattn",
    "minicpm_flashinfer",
    "aiter",
    "wave",
    "intel_amx",
    "ascend",
    "intel_xpu",
)

# arg_groups/fields/schedule.py: swa_full_tokens_ratio fallback.
DEFAULT_SWA_FULL_TOKENS_RATIO = 0.8
# pool_configurator.py::DSV4_DEFAULT_SWA_FULL_TOKENS_RATIO (also model_overrides/deepseek_v4.py).
DSV4_DEFAULT_SWA_FULL_TOKENS_RATIO = 0.1
# arg_groups/fields/schedule.py: max_prefill_tokens default.
DEFAULT_MAX_PREFILL_TOKENS = 16384


@dataclass(frozen=True, kw_only=True)
class ServerArgs:
    """SGLang launch flags that change KV pool sizes. Field names are SGLang's; ``None`` means
    the flag was not passed and SGLang's default resolution applies."""

    tp_size: int = 1
    page_size: int | None = None
    swa_full_tokens_ratio: float | None = None
    mem_fraction_static: float | None = None
    max_total_tokens: int | None = None
    max_running_requests: int | None = None
    chunked_prefill_size: int | None = None
    max_prefill_tokens: int = DEFAULT_MAX_PREFILL_TOKENS
    context_length: int | None = None
    kv_cache_dtype: str = "auto"
    disable_hybrid_swa_memory: bool = False
    disable_radix_cache: bool = False
    disable_cuda_graph: bool = False
    attention_backend: str | None = None
    enable_hierarchical_cache: bool = False
    hicache_ratio: float | None = None
    hicache_size: float = 0.0
    hicache_host_memory_mode: str = "cache"
    hicache_host_memory_fraction: float = 0.8

    def __post_init__(self) -> None:
        if self.tp_size < 1:
            raise ConfigError(f"--tp-size must be >= 1, got {self.tp_size}")
        if self.page_size is not None and self.page_size < 1:
            raise ConfigError(f"--page-size must be >= 1, got {self.page_size}")
        if self.swa_full_tokens_ratio is not None and not 0 < self.swa_full_tokens_ratio <= 1.0:
            # arg_groups/kv_cache_hook.py::handle_cache_compatibility
            raise ConfigError(
                f"--swa-full-tokens-ratio should be in range (0, 1.0], got {self.swa_full_tokens_ratio}"
            )
        if self.mem_fraction_static is not None and not 0 < self.mem_fraction_static <= 1.0:
            raise ConfigError(f"--mem-fraction-static must be in (0, 1], got {self.mem_fraction_static}")
        if self.max_total_tokens is not None and self.max_total_tokens < 1:
            raise ConfigError(f"--max-total-tokens must be >= 1, got {self.max_total_tokens}")
        if self.max_running_requests is not None and self.max_running_requests < 1:
            raise ConfigError(f"--max-running-requests must be >= 1, got {self.max_running_requests}")
        if self.context_length is not None and self.context_length < 1:
            raise ConfigError(f"--context-length must be >= 1, got {self.context_length}")
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ConfigError(
                f"--kv-cache-dtype {self.kv_cache_dtype!r} is not modelled; "
                f"choose from {sorted(KV_CACHE_DTYPES)}"
            )
        if self.hicache_ratio is not None and not (
            self.hicache_ratio > 0 and math.isfinite(self.hicache_ratio)
        ):
            raise ConfigError(f"--hicache-ratio must be a finite number > 0, got {self.hicache_ratio}")
        if not (self.hicache_size >= 0 and math.isfinite(self.hicache_size)):
            raise ConfigError(f"--hicache-size must be a finite number >= 0, got {self.hicache_size}")
        if self.attention_backend is not None and self.attention_backend not in ATTENTION_BACKENDS:
            raise ConfigError(
                f"--attention-backend {self.attention_backend!r} is not an SGLang backend; "
                f"choose from {', '.join(ATTENTION_BACKENDS)}"
            )
        if self.hicache_host_memory_mode not in ("cache", "buffer_only"):
            raise ConfigError(
                "--hicache-host-memory-mode must be 'cache' or 'buffer_only', "
                f"got {self.hicache_host_memory_mode!r}"
            )
        if not 0 < self.hicache_host_memory_fraction <= 1:
            # hicache_hook.py::handle_hicache_ratio_default
            raise ConfigError("--hicache-host-memory-fraction must be in (0, 1].")
        if self.disable_radix_cache and self.hicache_enabled:
            raise ConfigError("--disable-radix-cache and --enable-hierarchical-cache are mutually exclusive")

    @property
    def hicache_enabled(self) -> bool:
        """HiCache is on if enabled explicitly or implied by a host-size flag (kvplan convenience:
        SGLang ignores --hicache-ratio without --enable-hierarchical-cache)."""
        return self.enable_hierarchical_cache or self.hicache_ratio is not None or self.hicache_size > 0


@dataclass(frozen=True, kw_only=True)
class ResolvedServerArgs:
    """Flags after SGLang's default resolution for one model on one GPU."""

    tp_size: int
    page_size: int
    swa_full_tokens_ratio: float
    swa_full_tokens_ratio_explicit: bool
    mem_fraction_static: float | None
    max_total_tokens: int | None
    max_running_requests: int | None
    chunked_prefill_size: int
    context_length: int
    kv_dtype_bytes: int
    hybrid_swa: bool
    disable_radix_cache: bool
    attention_backend: str | None
    hicache_enabled: bool
    hicache_ratio: float
    hicache_size: float
    hicache_auto_size_fraction: float | None
    notes: tuple[str, ...] = field(default=())


# --------------------------------------------------------------------------------------------------
# Attention backend and page size
# --------------------------------------------------------------------------------------------------


def _default_attention_backend(model: ModelSpec, gpu: GpuSpec) -> str:
    """The backend SGLang picks when --attention-backend is unset, for the archs and GPUs kvplan
    knows. Model overrides first (arg_groups/model_overrides/{gpt_oss,llama4,gemma4,mimo_v2}.py,
    overrides.py::_step3p_overrides, deepseek_v4.py), then model_override_base.py::
    get_default_attn_backend for MHA without speculative decoding."""
    arch = model.architecture
    if model.is_dsv4:
        return "dsv4"
    if arch == "GptOssForCausalLM" or arch.startswith("Llama4"):
        if gpu.is_sm100:
            return "trtllm_mha"
        if gpu.is_sm90:
            return "fa3"
        return "triton"
    if arch.startswith("Gemma4") and arch != "DiffusionGemmaForBlockDiffusion":
        return "trtllm_mha" if gpu.is_sm100 else "triton"
    if arch in ("Step3p5ForCausalLM", "Step3p7ForConditionalGeneration"):
        if gpu.is_blackwell:
            return "fa4"
        if gpu.is_sm90:
            return "fa3"
    if arch.startswith("MiMoV2") and gpu.is_sm100:
        return "fa4"
    # get_default_attn_backend, MHA branch.
    if gpu.is_sm90:
        return "fa3"
    if gpu.is_sm100:
        asymmetric = model.head_dim != model.v_head_dim or model.swa_head_dim != model.swa_v_head_dim
        return "fa4" if asymmetric else "trtllm_mha"
    return "triton" if model.has_attention_sinks else "flashinfer"


def _resolve_page_size(
    requested: int | None, backend: str | None, model: ModelSpec, gpu: GpuSpec | None, notes: list[str]
) -> int:
    """overrides.py::_page_size_default (1 on CUDA), then the backend constraints
    (_fa4_page_constraint: FA4 on SM100 non-MLA -> 128; _mla_backend_page_constraints: trtllm_mha
    -> 64 unless in {16, 32, 64, 128}); DeepSeek-V4 is forced to 256 by its model override."""
    if model.is_dsv4:
        was = "" if requested is None else f"{requested} -> "
        notes.append(f"page_size {was}256 (model_overrides/deepseek_v4.py forces 256 on CUDA)")
        return 256
    page = 1 if requested is None else requested
    if requested is None:
        notes.append("page_size 1 (SGLang's CUDA default, overrides.py::_page_size_default)")
    if backend == "fa4" and gpu is not None and gpu.is_sm100:
        if page != 128:
            notes.append(f"page_size {page} -> 128 (FA4 on SM100 supports only 128 for non-MLA models)")
        return 128
    if backend == "trtllm_mha" and page not in (16, 32, 64, 128):
        notes.append(f"page_size {page} -> 64 (trtllm_mha supports 16/32/64/128)")
        return 64
    return page


# --------------------------------------------------------------------------------------------------
# GPU-memory heuristics (arg_groups/memory_hook.py::handle_gpu_memory_settings)
# --------------------------------------------------------------------------------------------------


def _capacity_defaults(gpu_mem_mib: float | None, tp_size: int) -> tuple[int, int]:
    """(chunked_prefill_size, decode CUDA-graph max_bs) by GPU memory tier."""
    if gpu_mem_mib is None:
        return 4096, 160
    if gpu_mem_mib < 20 * 1024:
        return 2048, 8
    if gpu_mem_mib < 35 * 1024:
        return 4096, 48 if tp_size < 4 else 160
    if gpu_mem_mib < 60 * 1024:
        return 4096, 32 if tp_size < 4 else 160
    if gpu_mem_mib < 90 * 1024:
        return 8192, 256 if tp_size < 4 else 512
    if gpu_mem_mib < 160 * 1024:
        return 8192, 256 if tp_size < 4 else 512
    return 16384, 512


def _prefill_graph_sizes(max_bs: int) -> int:
    """How many prefill CUDA-graph token buckets SGLang captures up to ``max_bs``
    (cuda_graph_hook.py::generate_prefill_cuda_graph_batch_sizes)."""
    buckets = (
        list(range(4, 33, 4))
        + list(range(48, 257, 16))
        + list(range(288, 513, 32))
        + list(range(576, 1025, 64))
        + list(range(1280, 4097, 256))
        + list(range(4608, max_bs + 1, 512))
    )
    return sum(1 for b in buckets if b <= max_bs)


def default_mem_fraction_static(
    model: ModelSpec,
    gpu: GpuSpec,
    *,
    tp_size: int,
    chunked_prefill_size: int,
    decode_max_bs: int,
    max_total_tokens: int | None = None,
    max_prefill_tokens: int = DEFAULT_MAX_PREFILL_TOKENS,
    disable_cuda_graph: bool = False,
) -> float:
    """SGLang's default ``--mem-fraction-static`` (memory_hook.py::handle_gpu_memory_settings):
    reserve MB for activations, parallel slack and CUDA graphs, floor the reserve at 10 GiB on GPUs
    over 60 GB, and keep the rest: ``round((gpu_mem - reserved) / gpu_mem, 3)``. VLMs take a
    further cut (adjust_mem_fraction_for_vlm). Not modelled: DP attention, DeepEP, XPU,
    pipeline parallelism, post-capture KV sizing (off by default)."""
    gpu_mem = float(gpu.memory_total_mib)
    activation_tokens = (
        max(chunked_prefill_size, 2048) if chunked_prefill_size > 0 else max(max_prefill_tokens, 2048)
    )
    reserved = 512.0 + activation_tokens * 1.5 + tp_size * 1 / 8 * 1024
    # reserve_for_graph_mb: decode graph 2 MB per max batch; prefill graph 8 MB per token bucket
    # for non-MLA models when the breakable prefill graph stays on (it is turned off for
    # multimodal archs that are not allow-listed, and for DeepSeek-V4;
    # cuda_graph_hook.py::disable_breakable_cudagraph_if_incompatible).
    if not disable_cuda_graph:
        reserved += decode_max_bs * 2
        prefill_graph_on = not model.is_multimodal and not model.is_dsv4
        if prefill_graph_on:
            prefill_max_bs = chunked_prefill_size
            if max_total_tokens is not None:
                prefill_max_bs = min(prefill_max_bs, max_total_tokens)
            reserved += _prefill_graph_sizes(prefill_max_bs) * 8
    if gpu_mem > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    fraction = round((gpu_mem - reserved) / gpu_mem, 3)
    if model.is_multimodal:
        fraction = _adjust_for_vlm(fraction, model)
    return fraction


def _adjust_for_vlm(fraction: float, model: ModelSpec) -> float:
    """memory_hook.py::adjust_mem_fraction_for_vlm: 0.95 times a factor that shrinks by 10% per
    doubling of ViT size over ViT-L/14 (24 layers x 1024), clamped to [0.8, 1.05]. Missing vision
    fields fall back to SGLang's getattr defaults (24, 1024)."""
    layers = model.vision_num_layers or 24
    hidden = model.vision_hidden_size or 1024
    ratio = layers * hidden**2 / (24 * 1024**2)
    factor = max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))
    return fraction * 0.95 * factor


# --------------------------------------------------------------------------------------------------
# Resolution
# --------------------------------------------------------------------------------------------------


def resolve_server_args(model: ModelSpec, gpu: GpuSpec | None, args: ServerArgs) -> ResolvedServerArgs:
    """Apply SGLang's default resolution to ``args`` for ``model`` on ``gpu``.

    ``gpu`` may be None when the KV budget is given directly; then the GPU-dependent defaults
    (mem fraction, attention backend) stay unresolved and the page size defaults to 1.
    The steps run in SGLang's order; each appends its decisions to ``notes``.
    """
    notes: list[str] = []
    hybrid, ratio, explicit_ratio = _resolve_swa_ratio(model, args, notes)
    # KV dtype: auto = model dtype; DeepSeek-V4 forces fp8 (overrides.py::_deepseek_v4_kv_cache_dtype).
    dtype_bytes = KV_CACHE_DTYPES[args.kv_cache_dtype]
    kv_bytes = model.kv_dtype_bytes if dtype_bytes is None else dtype_bytes
    if model.is_dsv4:
        kv_bytes = 1
    backend = args.attention_backend
    if backend is None and gpu is not None:
        backend = _default_attention_backend(model, gpu)
        arch, sm = model.architecture, gpu.compute_capability
        notes.append(f"attention backend {backend} (SGLang default for {arch} on sm{sm})")
    page = _resolve_page_size(args.page_size, backend, model, gpu, notes)
    chunk, mem_fraction = _resolve_memory_settings(model, gpu, args, notes)
    max_running = args.max_running_requests
    if max_running is None and model.is_dsv4:
        # deepseek_v4_hook.py::apply_deepseek_v4_defaults (runs after the mem-fraction heuristic).
        max_running = 256
        notes.append("max_running_requests 256 (DeepSeek-V4 default)")
    context = model.context_length if args.context_length is None else args.context_length
    if args.context_length is not None and args.context_length > model.context_length:
        # model_config.py::_derive_context_length refuses unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN.
        raise ConfigError(
            f"--context-length {args.context_length} is greater than the derived context_length "
            f"{model.context_length} of {model.name}"
        )
    hicache_ratio, auto_fraction = _resolve_hicache(args, notes)
    return ResolvedServerArgs(
        tp_size=args.tp_size,
        page_size=page,
        swa_full_tokens_ratio=ratio,
        swa_full_tokens_ratio_explicit=explicit_ratio,
        mem_fraction_static=mem_fraction,
        max_total_tokens=args.max_total_tokens,
        max_running_requests=max_running,
        chunked_prefill_size=chunk,
        context_length=context,
        kv_dtype_bytes=kv_bytes,
        hybrid_swa=hybrid,
        disable_radix_cache=args.disable_radix_cache,
        attention_backend=backend,
        hicache_enabled=args.hicache_enabled,
        hicache_ratio=hicache_ratio,
        hicache_size=args.hicache_size,
        hicache_auto_size_fraction=auto_fraction,
        notes=tuple(notes),
    )


def _resolve_swa_ratio(model: ModelSpec, args: ServerArgs, notes: list[str]) -> tuple[bool, float, bool]:
    """(hybrid SWA memory on, swa_full_tokens_ratio, whether SGLang counts the ratio as explicit)."""
    arch = model.architecture
    # Model overrides: Step-3.5/3.7 under HiCache force ratio 1.0 and non-hybrid memory
    # (overrides.py::_step3p_overrides); Gemma 2/3 force non-hybrid (gemma2_gemma3.py).
    disable_hybrid = args.disable_hybrid_swa_memory
    ratio = args.swa_full_tokens_ratio
    if arch in ("Step3p5ForCausalLM", "Step3p7ForConditionalGeneration") and args.hicache_enabled:
        notes.append("Step-3.5 with hierarchical cache: swa_full_tokens_ratio -> 1.0, hybrid SWA memory off")
        ratio = 1.0
        disable_hybrid = True
    if model.forced_non_hybrid:
        notes.append(f"{arch}: SGLang disables hybrid SWA memory; every layer is sized as full")
    hybrid = model.uses_hybrid_pools(disable_hybrid)
    if model.is_dsv4 and not hybrid:
        raise ConfigError("DeepSeek-V4 without hybrid SWA memory is not modelled")
    if ratio is not None:
        return hybrid, ratio, True
    if model.is_dsv4:
        # The DSV4 model override declares 0.1 before the cache hook records whether the
        # ratio was set, so SGLang treats it as explicit (ratio sizing, not cap sizing).
        notes.append("swa_full_tokens_ratio 0.1 (DeepSeek-V4 model override)")
        return hybrid, DSV4_DEFAULT_SWA_FULL_TOKENS_RATIO, True
    if hybrid:
        notes.append("swa_full_tokens_ratio 0.8 (SGLang fallback)")
    return hybrid, DEFAULT_SWA_FULL_TOKENS_RATIO, False


def _resolve_memory_settings(
    model: ModelSpec, gpu: GpuSpec | None, args: ServerArgs, notes: list[str]
) -> tuple[int, float | None]:
    """(chunked_prefill_size, mem_fraction_static) as memory_hook.py::handle_gpu_memory_settings
    resolves them; the fraction stays None without a GPU."""
    gpu_mem = None if gpu is None else float(gpu.memory_total_mib)
    default_chunk, decode_max_bs = _capacity_defaults(gpu_mem, args.tp_size)
    chunk = args.chunked_prefill_size if args.chunked_prefill_size is not None else default_chunk
    if args.chunked_prefill_size is None and gpu is not None:
        notes.append(
            f"chunked_prefill_size {chunk} (memory_hook.py default for a {gpu.memory_total_mib} MiB GPU)"
        )
    if args.max_running_requests is not None and decode_max_bs > args.max_running_requests:
        decode_max_bs = args.max_running_requests
    mem_fraction = args.mem_fraction_static
    if mem_fraction is None and gpu is not None:
        mem_fraction = default_mem_fraction_static(
            model,
            gpu,
            tp_size=args.tp_size,
            chunked_prefill_size=chunk,
            decode_max_bs=decode_max_bs,
            max_total_tokens=args.max_total_tokens,
            max_prefill_tokens=args.max_prefill_tokens,
            disable_cuda_graph=args.disable_cuda_graph,
        )
        notes.append(
            f"mem_fraction_static {mem_fraction:.4g} (memory_hook.py::handle_gpu_memory_settings heuristic)"
        )
    return chunk, mem_fraction


def _resolve_hicache(args: ServerArgs, notes: list[str]) -> tuple[float, float | None]:
    """(hicache_ratio, host-memory auto-size fraction) as hicache_hook.py resolves them."""
    hicache_ratio = 0.0
    if args.hicache_enabled:
        if args.hicache_ratio is not None:
            hicache_ratio = args.hicache_ratio
        else:
            hicache_ratio = 1.2 if args.hicache_host_memory_mode == "buffer_only" else 2.0
            if args.hicache_size <= 0:
                notes.append(f"hicache_ratio {hicache_ratio} (hicache_hook.py default)")
    # An explicit --hicache-ratio or --hicache-size turns auto-sizing off (the hook resolves the
    # fraction to None); otherwise hicache_auto_size.py may lower the default ratio.
    auto_fraction = None
    if args.hicache_enabled and args.hicache_ratio is None and args.hicache_size <= 0:
        auto_fraction = args.hicache_host_memory_fraction
    return hicache_ratio, auto_fraction
