"""Calibration profiles: the JSON schema (docs/cost-model.md), its validation and loading, and
the notes a profile made for another GPU, model or TP size earns.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from simulator.cost.coefficients import CostCoefficients
from simulator.cost.geometry import INT_GEOMETRY_FIELDS, ModelCostGeometry
from simulator.errors import ConfigError
from simulator.gpus import GpuSpec
from simulator.models import ModelSpec

#: Schema version of calibration profiles this module reads and writes.
PROFILE_VERSION = 1

COEFFICIENT_KEYS = tuple(f.name for f in fields(CostCoefficients))
GEOMETRY_KEYS = tuple(f.name for f in fields(ModelCostGeometry))
_TOP_KEYS = ("version", "name", "description", "provenance", "coefficients", "model", "hicache_transfer")
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
    _reject_unknown("coefficient", coeffs, COEFFICIENT_KEYS, origin)
    try:
        CostCoefficients(**dict(coeffs))
    except ConfigError as exc:
        raise ConfigError(f"{origin}: {exc}") from None
    out["coefficients"] = dict(coeffs)

    model = profile.get("model", {})
    if not isinstance(model, Mapping):
        raise ConfigError(f"{origin}: model must be an object")
    _reject_unknown("model", model, GEOMETRY_KEYS, origin)
    for key, v in model.items():
        if key == "sliding_window" and v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ConfigError(f"{origin}: model.{key} must be a finite number >= 0, got {v!r}")
        if key in INT_GEOMETRY_FIELDS and int(v) != v:
            raise ConfigError(f"{origin}: model.{key} must be an integer, got {v!r}")
    out["model"] = dict(model)
    if "hicache_transfer" in profile:
        out["hicache_transfer"] = _validate_transfer(profile["hicache_transfer"], origin)
    return out


def _validate_transfer(section: Any, origin: str) -> dict[str, Any]:
    """The ``hicache_transfer`` section: keys of :class:`TransferCoefficients` (host-link rates
    and overheads of HiCache's transfers, docs/cost-model.md)."""
    # HiCache's transfer model loads with a profile that has this section (issue 14: start-up)
    from simulator.cost.hicache_transfer import TRANSFER_KEYS, TransferCoefficients

    if not isinstance(section, Mapping):
        raise ConfigError(f"{origin}: hicache_transfer must be an object")
    _reject_unknown("hicache_transfer", section, TRANSFER_KEYS, origin)
    try:
        TransferCoefficients(**dict(section))
    except ConfigError as exc:
        raise ConfigError(f"{origin}: {exc}") from None
    return dict(section)


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


def profile_mismatches(provenance: Mapping[str, Any], model: ModelSpec, gpu: GpuSpec, tp: int) -> list[str]:
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
