"""``kvplan cache-replay --enable-hierarchical-cache``: the HiCache replay's output.

With ``--json``: one line per request with the oracle's short-form keys (``drive_hicache.py``:
``rid``, ``prompt_len``, ``device_prefix_len``, ``host_hit_len``, ``swa_host_hit_len``,
``host_loaded_len``, ``prefix_len``, ``after`` {device/host used tokens after the acks},
``backed_up_nodes``) plus the cached tokens per tier, then ``{"summary": ...}`` with the
oracle's ``counts``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from simulator.cli.common import print_json
from simulator.errors import ConfigError
from simulator.radix.hicache_replay import HiCacheReplayConfig, replay_hicache

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1, "uint8": 1}


def storage_fields(hi) -> dict[str, Any]:
    """The L3 fields of :class:`HiCacheReplayConfig` from the HiCache flags
    (``--hicache-storage-backend``, ``--hicache-storage-prefetch-policy``, the extra config's
    prefetch knobs, kvplan's ``--storage-*`` speed and capacity), resolved as SGLang does."""
    if hi.hicache_storage_backend is None:
        return {}
    from simulator.hicache_args import resolve_hicache_args

    r = resolve_hicache_args(hi)
    return dict(
        storage_backend=r.storage.backend,
        prefetch_policy=r.prefetch_policy,
        prefetch_threshold=r.prefetch_threshold,
        prefetch_timeout_base=r.prefetch_timeout_base,
        prefetch_timeout_per_ki_token=r.prefetch_timeout_per_ki_token,
        storage_capacity_bytes=r.storage.capacity_bytes,
        storage_read_gbps=r.storage.read_gbps,
        storage_write_gbps=r.storage.write_gbps,
        storage_op_latency_s=r.storage.op_latency_s,
    )


def run_hicache_replay(
    requests,
    server: dict[str, Any],
    pools: dict,
    hicache: dict,
    geometry: dict,
    dtype: str,
    as_json: bool,
    path: Path,
) -> None:
    if dtype not in DTYPE_BYTES:
        raise ConfigError(f"unknown --dtype {dtype!r}; choose one of: {', '.join(DTYPE_BYTES)}")
    cfg = HiCacheReplayConfig(
        **pools,
        **hicache,
        **geometry,
        dtype_bytes=DTYPE_BYTES[dtype],
        eviction_policy=server["radix_eviction_policy"],
        swa_eviction=server["swa_eviction"],
        check_invariants=server["check_invariants"],
    )
    result = replay_hicache(requests, cfg)
    summary = summarize(result)
    if as_json:
        for rec in result["requests"]:
            print_json(rec)
        from simulator.provenance import provenance

        print_json({"summary": summary, "provenance": provenance(getattr(requests, "trace", None))})
        return
    typer.echo(f"cache-replay (HiCache {cfg.write_policy}): {path.name}")
    for key, value in summary.items():
        if key != "counts":
            typer.echo(f"  {key}: {value}")
    for key, value in summary["counts"].items():
        typer.echo(f"  counts.{key}: {value}")


def summarize(result: dict) -> dict:
    """Totals as the oracle reports them, the host capacities and the non-zero counts."""
    recs = result["requests"]
    prompt = sum(r["prompt_len"] for r in recs)
    total = {
        k: sum(r[k] for r in recs)
        for k in ("device_prefix_len", "host_hit_len", "host_loaded_len", "prefix_len")
    }
    return dict(
        requests=len(recs),
        total_prompt_tokens=prompt,
        total_device_hit_tokens=total["device_prefix_len"],
        total_host_hit_tokens=total["host_hit_len"],
        total_host_loaded_tokens=total["host_loaded_len"],
        total_prefix_tokens=total["prefix_len"],
        hit_rate=round(total["prefix_len"] / max(1, prompt), 4),
        device_hit_rate=round(total["device_prefix_len"] / max(1, prompt), 4),
        requests_with_host_hit=sum(r["host_hit_len"] > 0 for r in recs),
        requests_loaded=sum(r["host_loaded_len"] > 0 for r in recs),
        cached_tokens_device=sum(r["cached_tokens_device"] for r in recs),
        cached_tokens_host=sum(r["cached_tokens_host"] for r in recs),
        cached_tokens_storage=sum(r.get("cached_tokens_storage", 0) for r in recs),
        host_full_capacity=result["hicache"]["host_full_capacity"],
        host_swa_capacity=result["hicache"]["host_swa_capacity"],
        counts={k: v for k, v in result["counts"].items() if v},
        final_sizes=result["final_sizes"],
        tree=result["tree"],
    )
