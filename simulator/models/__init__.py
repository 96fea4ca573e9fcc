"""Model geometry that decides KV-cache size: the preset registry and ``--model`` loading.

Only what SGLang 0.5.23 reads when it sizes KV pools is modelled: which layers are full-attention
and which are sliding-window (SWA), KV heads and K/V head dims per layer type, the window as SGLang
uses it, the KV dtype, the weight bytes (for the GPU memory model) and the context length.

* :mod:`~simulator.models.spec` - :class:`ModelSpec` and :class:`Dsv4Geometry`;
* :mod:`~simulator.models.archs` - SGLang's per-architecture lists;
* :mod:`~simulator.models.hf_config` - Hugging Face ``config.json`` by SGLang's ``ModelConfig``
  rules (``sglang/srt/configs/model_config.py``; each rule names the function it mirrors);
* :mod:`~simulator.models.spec_dict` - kvplan's own YAML/JSON spec schema.

KV bytes per token are computed in one place, :mod:`simulator.kv_geometry`.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from simulator.errors import ConfigError
from simulator.models.archs import (
    DEFAULT_MULTIMODAL_ARCHS,
    DSV4_ARCHS,
    FORCED_NON_HYBRID_ARCHS,
    HYBRID_SWA_ARCHS,
    HYBRID_SWA_COMPRESS_ARCHS,
    INCLUSIVE_WINDOW_ARCHS,
)
from simulator.models.spec import Dsv4Geometry, ModelSpec
from simulator.models.spec_dict import model_from_spec_dict
from simulator.preset_registry import PresetRegistry

__all__ = [
    "DEFAULT_MULTIMODAL_ARCHS",
    "DSV4_ARCHS",
    "FORCED_NON_HYBRID_ARCHS",
    "HYBRID_SWA_ARCHS",
    "HYBRID_SWA_COMPRESS_ARCHS",
    "INCLUSIVE_WINDOW_ARCHS",
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
# Registry (the only list of preset names)
# --------------------------------------------------------------------------------------------------


def __getattr__(name: str) -> Any:
    """``model_from_hf_config`` loads on first use: a preset run never reads a config.json (issue 14)."""
    if name == "model_from_hf_config":
        from simulator.models.hf_config import model_from_hf_config

        return model_from_hf_config
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
        from simulator.models.hf_config import model_from_hf_config  # config.json only (issue 14)

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
