"""Where a result came from: kvplan's version and sources, the SGLang version modelled, the
trace's content and the cost-model profile.

:func:`provenance` is the one function every ``--json`` output, the sweep's result store and the
reports call, so they all say the same thing. The hashes are of *content*, not of file names:
the same requests read from JSONL or from canonical parquet hash alike, and a profile copied to
another path keeps its hash, while one edited in place does not.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

#: The SGLang release whose behaviour kvplan models (pool sizing, radix cache, scheduler).
SGLANG_VERSION = "0.5.23"
#: The profile name of the built-in roofline coefficients (no ``--profile`` given).
DEFAULT_PROFILE_NAME = "roofline-defaults"

_ROOT = Path(__file__).resolve().parents[1]
_SOURCE_DIRS = ("simulator", "policies", "traces")
_SOURCE_SUFFIXES = (".py", ".json")


def canonical_json(obj: Any) -> str:
    """One spelling of a JSON-able object (sorted keys, no spaces), the input of every hash."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str, allow_nan=True)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def kvplan_version() -> str:
    from simulator import __version__

    return __version__


@functools.lru_cache(maxsize=1)
def source_hash() -> str:
    """A hash of kvplan's own sources (simulator, policies, traces: .py and presets), so that a
    development checkout whose code changed without a version bump never reuses old results."""
    digest = hashlib.sha256()
    for top in _SOURCE_DIRS:
        for path in sorted((_ROOT / top).rglob("*")):
            if path.suffix in _SOURCE_SUFFIXES and path.is_file() and "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(_ROOT)).encode() + b"\0")
                digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def trace_hash(trace: Any) -> str:
    """SHA-256 of a loaded trace's content: the canonical request table, the token or block
    content and the closed-loop rules (not its file name or format)."""
    digest = hashlib.sha256()
    columns, rows = trace.row_hashes()  # pandas' row hash; numpy alone for numpy columns (issue 14)
    digest.update(canonical_json(columns).encode())
    digest.update(rows.tobytes())
    content = trace.content
    digest.update(type(content).__name__.encode())
    for f in dataclasses.fields(content):
        arr = np.ascontiguousarray(getattr(content, f.name))
        digest.update(f"{f.name}:{arr.dtype.str}:{arr.shape}".encode())
        digest.update(arr.data if arr.dtype != object else arr.tobytes())  # no copy of the content
    loop = trace.closed_loop
    digest.update(canonical_json(None if loop is None else dataclasses.asdict(loop)).encode())
    return digest.hexdigest()


def profile_identity(profile_path: str | Path | None) -> tuple[str, str]:
    """(name, hash) of the cost-model profile a run uses: the validated profile's content, or
    the built-in roofline defaults when there is none (so a change of defaults changes it)."""
    if profile_path is None:
        from simulator.cost.coefficients import CostCoefficients

        content: Any = {"defaults": dataclasses.asdict(CostCoefficients())}
        return DEFAULT_PROFILE_NAME, sha256_text(canonical_json(content))
    from simulator.cost import load_profile

    profile = load_profile(profile_path)
    name = profile.get("name") or Path(profile_path).stem
    return str(name), sha256_text(canonical_json(profile))


def provenance(
    trace: Any = None, profile_path: str | Path | None = None, *, trace_digest: str | None = None
) -> dict[str, Any]:
    """What every output carries: kvplan's version and source hash, the SGLang version
    modelled, the trace's content hash (``trace_digest`` when already computed) and source,
    and the cost-model profile's name and hash (None if the profile cannot be read)."""
    from simulator.errors import ConfigError

    try:
        name, digest = profile_identity(profile_path)
    except ConfigError:
        # Reporting, not validating: a run that used the profile has validated it already;
        # one that did not (a stand-in server) gets no hash rather than a failed report.
        name, digest = str(profile_path), None
    out: dict[str, Any] = {
        "kvplan_version": kvplan_version(),
        "kvplan_source_hash": source_hash(),
        "sglang_version": SGLANG_VERSION,
    }
    if trace is not None or trace_digest is not None:
        out["trace_hash"] = trace_digest if trace_digest is not None else trace_hash(trace)
        out["trace_source"] = getattr(trace, "source", "") if trace is not None else ""
    out["profile"] = {"name": name, "hash": digest}
    return out
