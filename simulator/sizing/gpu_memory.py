"""One rank's GPU memory -> the KV byte budget (SGLang's ``_profile_available_bytes``)."""

from __future__ import annotations

from simulator.errors import ConfigError
from simulator.gpus import GpuSpec
from simulator.kv_geometry import GIB
from simulator.models import ModelSpec
from simulator.server_args import ResolvedServerArgs
from simulator.sizing.advice import no_kv_budget_advice
from simulator.sizing.results import GpuMemoryPlan

# env SGLANG_VLM_CACHE_SIZE_MB default (environ.py), reserved out of the KV budget for VLMs.
VLM_CACHE_SIZE_MB = 100


def plan_gpu_memory(model: ModelSpec, gpu: GpuSpec, resolved: ResolvedServerArgs) -> GpuMemoryPlan:
    """kv_cache_configurator.py::_profile_available_bytes, in SGLang's GB-float arithmetic:
    ``rest = available_now - pre_model_load * (1 - mem_fraction_static) - mm_reservation``."""
    if model.weight_bytes is None:
        raise ConfigError(
            f"model {model.name!r} has no weight size; give weight_bytes in the spec, put "
            "model.safetensors.index.json next to config.json, or pass --kv-budget-gib"
        )
    assert resolved.mem_fraction_static is not None  # resolved with a GPU
    fraction = resolved.mem_fraction_static
    pre = gpu.preload_free_bytes
    weights = model.weight_bytes // resolved.tp_size
    free_after = pre - weights
    pre_gb = pre / GIB
    available_gb = free_after / GIB
    slack_gb = pre_gb * (1 - fraction)
    # kv_cache_configurator.py::mm_runtime_reservation_gb (CPU feature transport, the default).
    mm_gb = VLM_CACHE_SIZE_MB / 1024 if model.is_multimodal else 0.0
    rest_gb = available_gb - slack_gb - mm_gb
    if rest_gb <= 0:
        advice = no_kv_budget_advice(
            fraction=fraction,
            tp=resolved.tp_size,
            pre_bytes=pre,
            model_bytes=model.weight_bytes,
            mm_bytes=mm_gb * GIB,
        )
        raise ConfigError(
            f"Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static={fraction:.4g} "
            f"({model.name}, {weights / GIB:.1f} GiB weights per rank on {gpu.name}, tp={resolved.tp_size}). "
            f"{advice}"
        )
    return GpuMemoryPlan(
        gpu=gpu.name,
        tp_size=resolved.tp_size,
        memory_total_bytes=gpu.memory_total_bytes,
        preload_free_bytes=pre,
        weight_bytes_per_rank=weights,
        free_after_weights_bytes=free_after,
        mem_fraction_static=fraction,
        slack_bytes=int(slack_gb * GIB),
        mm_reservation_bytes=int(mm_gb * GIB),
        kv_budget_bytes=int(rest_gb * GIB),
    )
