"""The result store's keys: one run is known by its whole configuration and what it ran on.

A run's key hashes every SimConfig field (the seed included), the trace's content hash, the
kvplan version and source hash, and the cost-model profile's content hash. The profile enters
by its content, not its path: the ``profile`` field is blanked in the hashed configuration. The
*point key* is the same without the seed, so the seeds of one grid point share it.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

from simulator.engine.config import SimConfig
from simulator.provenance import canonical_json, profile_identity, provenance, sha256_text

KEY_CHARS = 32


@dataclass(frozen=True)
class RunIdentity:
    """Everything besides the configuration that a run's results depend on."""

    trace_hash: str
    kvplan_version: str
    kvplan_source_hash: str
    sglang_version: str
    trace_source: str = ""

    @classmethod
    def for_trace(cls, trace: Any, trace_digest: str | None = None) -> RunIdentity:
        prov = provenance(trace, trace_digest=trace_digest)
        return cls(
            trace_hash=prov["trace_hash"],
            kvplan_version=prov["kvplan_version"],
            kvplan_source_hash=prov["kvplan_source_hash"],
            sglang_version=prov["sglang_version"],
            trace_source=prov["trace_source"],
        )

    def provenance(self, cfg: SimConfig) -> dict[str, Any]:
        """The provenance of one run (:func:`simulator.provenance.provenance`'s shape)."""
        name, digest = cached_profile_identity(cfg.profile)
        return {
            "kvplan_version": self.kvplan_version,
            "kvplan_source_hash": self.kvplan_source_hash,
            "sglang_version": self.sglang_version,
            "trace_hash": self.trace_hash,
            "trace_source": self.trace_source,
            "profile": {"name": name, "hash": digest},
        }


@functools.lru_cache(maxsize=64)
def cached_profile_identity(path: str | None) -> tuple[str, str]:
    """The profile's (name, hash), read once per path in a sweep."""
    return profile_identity(path)


def config_dict(cfg: SimConfig) -> dict[str, Any]:
    """Every SimConfig field by name (JSON-ready)."""
    return dataclasses.asdict(cfg)


def _hash(cfg: SimConfig, identity: RunIdentity, *, with_seed: bool) -> str:
    fields = config_dict(cfg)
    fields["profile"] = None  # the profile enters by content, below
    if not with_seed:
        fields.pop("seed")
    payload = {
        "config": fields,
        "trace": identity.trace_hash,
        "kvplan": identity.kvplan_version,
        "source": identity.kvplan_source_hash,
        "sglang": identity.sglang_version,
        "profile": cached_profile_identity(cfg.profile)[1],
    }
    return sha256_text(canonical_json(payload))[:KEY_CHARS]


def run_key(cfg: SimConfig, identity: RunIdentity) -> str:
    """The store key of one run (one grid point at one seed)."""
    return _hash(cfg, identity, with_seed=True)


def point_key(cfg: SimConfig, identity: RunIdentity) -> str:
    """The key shared by a grid point's seeds."""
    return _hash(cfg, identity, with_seed=False)
