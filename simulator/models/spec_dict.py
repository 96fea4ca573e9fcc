"""kvplan's own model spec schema (YAML/JSON; documented in docs/pool-sizing.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from simulator.errors import ConfigError
from simulator.kv_geometry import GIB
from simulator.models.spec import Dsv4Geometry, ModelSpec

_SPEC_KEYS = {f.name for f in fields(ModelSpec)} | {"layer_types", "weight_gb", "weight_gib", "dsv4"}


# Optional ModelSpec fields copied as given when present and not null.
_PASSTHROUGH_KEYS = (
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
)


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
    num_layers, full_ids, swa_ids = _layer_ids(d, name, origin)
    weight = _weight_bytes(d)
    dsv4_geom = _dsv4_geometry(d.pop("dsv4", None), origin)
    kwargs: dict[str, Any] = {
        "name": name,
        "architecture": str(d.get("architecture", "custom")),
        "num_layers": num_layers,
        "full_layer_ids": full_ids,
        "swa_layer_ids": swa_ids,
        **_head_fields(d, name, origin),
        "sliding_window": None
        if d.get("sliding_window") is None
        else _as_int(d["sliding_window"], "sliding_window", origin),
        "weight_bytes": None if weight is None else int(weight),
        "dsv4": dsv4_geom,
    }
    for key in _PASSTHROUGH_KEYS:
        if key in d and d[key] is not None:
            kwargs[key] = d[key]
    if "aliases" in d:
        kwargs["aliases"] = tuple(d["aliases"])
    try:
        return ModelSpec(**kwargs)
    except TypeError as exc:  # wrong value types that dataclass construction trips on
        raise ConfigError(f"{origin}: {exc}") from None


def _require_int(d: Mapping[str, Any], key: str, name: str, origin: str) -> int:
    if key not in d:
        raise ConfigError(f"{origin}: model {name!r} is missing {key!r}")
    return _as_int(d[key], key, origin)


def _layer_ids(d: dict[str, Any], name: str, origin: str) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """``(num_layers, full ids, SWA ids)`` from ``layer_types`` (popped from ``d``) or the id
    lists; layers not listed as SWA are full unless ``full_layer_ids`` says otherwise."""
    layer_types = d.pop("layer_types", None)
    if layer_types is not None:
        if not isinstance(layer_types, list) or not layer_types:
            raise ConfigError(f"{origin}: layer_types must be a non-empty list")
        full_list, swa_list = [], []
        for i, t in enumerate(layer_types):
            if t in ("full", "full_attention"):
                full_list.append(i)
            elif t in ("swa", "sliding", "sliding_attention", "chunked_attention"):
                swa_list.append(i)
            else:
                raise ConfigError(f"{origin}: layer_types[{i}] = {t!r}; expected 'full' or 'swa'")
        d.setdefault("num_layers", len(layer_types))
        d["full_layer_ids"], d["swa_layer_ids"] = full_list, swa_list
    num_layers = _require_int(d, "num_layers", name, origin)
    swa_ids = tuple(_as_int(x, "swa_layer_ids", origin) for x in d.get("swa_layer_ids", ()))
    default_full = [i for i in range(num_layers) if i not in set(swa_ids)]
    full_ids = tuple(_as_int(x, "full_layer_ids", origin) for x in d.get("full_layer_ids", default_full))
    return num_layers, full_ids, swa_ids


def _weight_bytes(d: dict[str, Any]) -> Any:
    """``weight_bytes``, or ``weight_gb`` x 1e9, or ``weight_gib`` x 2^30 (the last given wins;
    all three are popped from ``d``)."""
    weight = d.pop("weight_bytes", None)
    if "weight_gb" in d:
        weight = float(d.pop("weight_gb")) * 1e9
    if "weight_gib" in d:
        weight = float(d.pop("weight_gib")) * GIB
    return weight


def _dsv4_geometry(dsv4: Any, origin: str) -> Dsv4Geometry | None:
    if dsv4 is None:
        return None
    if not isinstance(dsv4, Mapping):
        raise ConfigError(f"{origin}: dsv4 must be a mapping")
    return Dsv4Geometry(
        compress_ratios=tuple(int(r) for r in dsv4["compress_ratios"]),
        qk_nope_head_dim=int(dsv4["qk_nope_head_dim"]),
        qk_rope_head_dim=int(dsv4["qk_rope_head_dim"]),
        index_head_dim=int(dsv4["index_head_dim"]),
    )


def _head_fields(d: Mapping[str, Any], name: str, origin: str) -> dict[str, int]:
    """KV heads and K/V head dims of both layer kinds; SWA and V fields default to the full/K ones."""
    head_dim = _require_int(d, "head_dim", name, origin)
    kv_heads = _require_int(d, "num_kv_heads", name, origin)
    v_head_dim = _as_int(d.get("v_head_dim", head_dim), "v_head_dim", origin)
    swa_head_dim = _as_int(d.get("swa_head_dim", head_dim), "swa_head_dim", origin)
    return {
        "num_kv_heads": kv_heads,
        "head_dim": head_dim,
        "v_head_dim": v_head_dim,
        "swa_num_kv_heads": _as_int(d.get("swa_num_kv_heads", kv_heads), "swa_num_kv_heads", origin),
        "swa_head_dim": swa_head_dim,
        "swa_v_head_dim": _as_int(d.get("swa_v_head_dim", swa_head_dim), "swa_v_head_dim", origin),
    }


def _as_int(value: Any, key: str, origin: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise ConfigError(f"{origin}: {key} must be an integer, got {value!r}")
    return int(value)
