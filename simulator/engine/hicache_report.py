"""What a served HiCache run reports: the ``hicache`` summary object, its text block and its
frames (``hicache_transfers``, ``hicache_host_usage``, and the requests frame's per-tier cached
tokens). Only runs with HiCache have any of them, so other runs' outputs are unchanged.

Bytes are per TP rank (each rank moves its own KV shard over its own host link), from the
per-rank pool geometry the transfer model prices (``simulator.cost.hicache_transfer``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from simulator.engine.hicache_steps import HiCacheSteps

TRANSFER_COLUMNS = (
    "direction",
    "submit_s",
    "start_s",
    "done_s",
    "ack_s",
    "full_tokens",
    "swa_tokens",
    "bytes",
)
USAGE_COLUMNS = ("time_s", "host_full_used", "host_swa_used", "host_full_usage", "host_swa_usage")


class HiCacheReport:
    """A finished run's HiCache figures (plain data: it pickles with a sweep's results)."""

    def __init__(self, steps: HiCacheSteps) -> None:
        cache, geo = steps.cache, steps.geometry
        self.full_bpt = geo.full.bytes_per_token
        self.swa_bpt = geo.swa.bytes_per_token if geo.swa is not None else 0
        self.capacity = cache.host_capacity()
        self.counts = dict(cache.counts)
        self.records = [
            (r.direction, r.submit_s, r.start_s, r.done_s, r.ack_s, r.full_tokens, r.swa_tokens)
            for r in steps.records
        ]
        self.usage = list(steps.usage)
        self.tiers = dict(steps.tiers)
        self.exposed_load_s = steps.exposed_load_s
        s = steps.setup.resolved
        self.flags = dict(write_policy=s.write_policy, io_backend=s.io_backend, mem_layout=s.mem_layout)
        self.l3 = None  # the L3 tier's figures (simulator.engine.hicache_l3_report)
        if steps.l3 is not None:
            from simulator.engine.hicache_l3_report import L3Report

            self.l3 = L3Report(steps)

    def _bytes(self, full: int, swa: int) -> int:
        return int(full) * self.full_bpt + int(swa) * self.swa_bpt

    def summary(self) -> dict[str, Any]:
        """The ``hicache`` object of ``--json`` and ``summary.json``."""
        out = self._summary()
        if self.l3 is not None:
            out.update(self.l3.summary())
        return out

    def _summary(self) -> dict[str, Any]:
        c = self.counts
        usage = np.array([u[1:] for u in self.usage], dtype=np.int64).reshape(-1, 2)
        dev = sum(t[0] for t in self.tiers.values())
        host = sum(t[1] for t in self.tiers.values())
        return {
            **self.flags,
            "host_full_capacity": self.capacity[0],
            "host_swa_capacity": self.capacity[1],
            "host_full_used_max": int(usage[:, 0].max()) if len(usage) else 0,
            "host_swa_used_max": int(usage[:, 1].max()) if len(usage) else 0,
            "host_full_used_end": int(usage[-1, 0]) if len(usage) else 0,
            "host_swa_used_end": int(usage[-1, 1]) if len(usage) else 0,
            "cached_tokens_device": int(dev),
            "cached_tokens_host": int(host),
            "d2h_bytes": self._bytes(c.get("d2h_full_tokens", 0), c.get("d2h_swa_tokens", 0)),
            "h2d_bytes": self._bytes(c.get("h2d_full_tokens", 0), c.get("h2d_swa_tokens", 0)),
            "d2h_full_tokens": c.get("d2h_full_tokens", 0),
            "d2h_swa_tokens": c.get("d2h_swa_tokens", 0),
            "h2d_full_tokens": c.get("h2d_full_tokens", 0),
            "h2d_swa_tokens": c.get("h2d_swa_tokens", 0),
            "backups": c.get("backup_nodes", 0),
            "backup_ops": c.get("d2h_ops", 0),
            "write_acks": c.get("write_acks", 0),
            "load_backs": c.get("load_back_ok", 0),
            "load_back_calls": c.get("load_back_calls", 0),
            "load_ops": c.get("h2d_ops", 0),
            "load_acks": c.get("load_acks", 0),
            "load_exposed_s": self.exposed_load_s,
            "demoted_full_tokens": c.get("demoted_full_tokens", 0),
            # evicted from the device without a host copy: deleted unbacked leaves
            # (write_through[_selective]) and write_back subtrees dropped for want of host room
            "dropped_unbacked_full_tokens": c.get("deleted_full_tokens", 0) + c.get("dropped_full_tokens", 0),
            "dropped_tokens_write_through_unbacked": c.get("dropped_tokens_write_through_unbacked", 0),
            "host_evicted_full_tokens": c.get("host_evicted_full_tokens", 0),
            "host_evicted_swa_tokens": c.get("host_evicted_swa_tokens", 0),
            "counts": {k: v for k, v in sorted(c.items()) if v},
        }

    def frames(self) -> dict[str, pd.DataFrame]:
        """``hicache_transfers`` (one row per copy operation) and ``hicache_host_usage`` (host
        pool use whenever it changed, at step starts and ends)."""
        rows = [(*r, self._bytes(r[5], r[6])) for r in self.records]
        if self.l3 is not None:
            rows += self.l3.transfer_rows()
        transfers = pd.DataFrame(rows, columns=list(TRANSFER_COLUMNS))
        usage = pd.DataFrame(self.usage, columns=list(USAGE_COLUMNS[:3]))
        full_cap, swa_cap = self.capacity
        usage["host_full_usage"] = usage["host_full_used"] / full_cap if full_cap else 0.0
        usage["host_swa_usage"] = usage["host_swa_used"] / swa_cap if swa_cap else 0.0
        out = {"hicache_transfers": transfers, "hicache_host_usage": usage}
        if self.l3 is not None:
            out.update(self.l3.frames())
        return out

    def add_request_columns(self, requests: pd.DataFrame, reqs: list) -> None:
        """``cached_tokens_device`` / ``cached_tokens_host`` after ``cached_tokens`` (SGLang's
        ``cached_tokens_details``; 0 for requests never admitted)."""
        tiers = self.tiers
        dev = np.array([tiers.get(r, (0, 0))[0] for r in reqs], dtype=np.int64)
        host = np.array([tiers.get(r, (0, 0))[1] for r in reqs], dtype=np.int64)
        at = requests.columns.get_loc("cached_tokens") + 1
        requests.insert(at, "cached_tokens_device", dev)
        requests.insert(at + 1, "cached_tokens_host", host)
        if self.l3 is not None:
            stored = np.array([tiers.get(r, (0, 0, 0))[2] for r in reqs], dtype=np.int64)
            requests.insert(at + 2, "cached_tokens_storage", stored)


def format_hicache(h: dict[str, Any]) -> str:
    """The text report's HiCache block."""
    gib = 1 << 30
    lines = [
        f"HiCache (kvplan; {h['write_policy']}, io {h['io_backend']}, layout {h['mem_layout']}):",
        f"  Host pools: full {h['host_full_used_max']}/{h['host_full_capacity']} tokens at peak, "
        f"swa {h['host_swa_used_max']}/{h['host_swa_capacity']}",
        f"  Cached tokens by tier: device {h['cached_tokens_device']}, host {h['cached_tokens_host']}",
        f"  D->H: {h['d2h_bytes'] / gib:.2f} GiB per rank ({h['backups']} backups in "
        f"{h['backup_ops']} operations); H->D: {h['h2d_bytes'] / gib:.2f} GiB per rank "
        f"({h['load_backs']} load-backs, {h['load_exposed_s']:.3f} s added to prefills)",
        f"  Dropped without a host copy: {h['dropped_unbacked_full_tokens']} full tokens; "
        f"host evictions: full {h['host_evicted_full_tokens']}, "
        f"swa {h['host_evicted_swa_tokens']} tokens",
    ]
    if "storage_backend" in h:
        from simulator.engine.hicache_l3_report import format_l3

        lines += format_l3(h)
    return "\n".join(lines)
