"""What a served run with the L3 storage tier adds to its HiCache report: the ``storage``
figures of the ``hicache`` summary object, their text lines, the ``hicache_storage_usage``
and ``hicache_prefetches`` frames, and the L3 rows of ``hicache_transfers`` (``h2l3`` backups,
``l32h`` prefetch reads). Bytes are per TP rank, as the host transfers'.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from simulator.radix.hicache_l3_timing import OUTCOMES

PREFETCH_COLUMNS = (
    "rid",
    "issue_s",
    "requested_tokens",
    "hit_tokens",
    "host_tokens",
    "completed_tokens",
    "loaded_tokens",
    "wait_start_s",
    "end_s",
    "released_s",
    "outcome",
)
STORAGE_USAGE_COLUMNS = ("time_s", "storage_used_bytes", "storage_pages")


class L3Report:
    """The L3 tier's figures of a finished run (plain data: it pickles with a sweep)."""

    def __init__(self, steps: Any) -> None:
        st = steps.l3
        params = st.store.params
        p = st.page_size
        self.page_size = p
        self.backend = params.backend
        self.policy = st.policy.name
        self.threshold = st.prefetch_threshold
        self.capacity_bytes = params.capacity_bytes
        self.speed = dict(
            storage_read_gbps=params.read_gbps,
            storage_write_gbps=params.write_gbps,
            storage_op_latency_us=params.op_latency_s * 1e6,
        )
        self.kv_page_bytes, self.swa_page_bytes = params.kv_page_bytes, params.swa_page_bytes
        self.io = [
            (r.direction, r.submit_s, r.start_s, r.done_s, r.ack_s, r.kv_pages * p, r.swa_pages * p)
            for r in st.io
        ]
        self.io_bytes = [
            r.kv_pages * params.kv_page_bytes + r.swa_pages * params.swa_page_bytes for r in st.io
        ]
        self.prefetches = [tuple(getattr(r, c) for c in PREFETCH_COLUMNS) for r in st.prefetches]
        self.declined = dict(st.declined)
        self.store_counts = dict(st.store.counts)
        self.usage = list(steps.storage_usage)
        self.storage_tokens = sum(t[2] for t in steps.tiers.values() if len(t) > 2)

    def summary(self) -> dict[str, Any]:
        """The L3 keys of the ``hicache`` object."""
        outcome = {k: 0 for k in OUTCOMES}
        outcome["running"] = 0
        waits: list[float] = []
        loaded = 0
        for row in self.prefetches:
            rec = dict(zip(PREFETCH_COLUMNS, row, strict=True))
            outcome[rec["outcome"] or "running"] += 1
            loaded += rec["loaded_tokens"]
            if not math.isnan(rec["wait_start_s"]) and not math.isnan(rec["end_s"]):
                # admission held back by the prefetch: first blocked poll -> its end
                waits.append(max(0.0, rec["end_s"] - rec["wait_start_s"]))
        nbytes = {"h2l3": 0, "l32h": 0}
        ops = {"h2l3": 0, "l32h": 0}
        for r, b in zip(self.io, self.io_bytes, strict=True):
            nbytes[r[0]] += b
            ops[r[0]] += 1
        used = np.array([u[1] for u in self.usage], dtype=np.int64)
        return {
            "storage_backend": self.backend,
            "prefetch_policy": self.policy,
            "prefetch_threshold": self.threshold,
            "storage_capacity_bytes": self.capacity_bytes,
            **self.speed,
            "storage_used_bytes_max": int(used.max()) if len(used) else 0,
            "storage_used_bytes_end": int(used[-1]) if len(used) else 0,
            "storage_pages_end": int(self.usage[-1][2]) if self.usage else 0,
            "cached_tokens_storage": int(self.storage_tokens),
            "h2l3_bytes": nbytes["h2l3"],
            "l32h_bytes": nbytes["l32h"],
            "h2l3_ops": ops["h2l3"],
            "l32h_ops": ops["l32h"],
            "prefetch_issued": len(self.prefetches),
            "prefetch_declined": dict(sorted(self.declined.items())),
            "prefetch_outcomes": outcome,
            "prefetch_loaded_tokens": int(loaded),
            "prefetch_wait_s_total": float(sum(waits)),
            "prefetch_wait_s_max": float(max(waits)) if waits else 0.0,
            "storage_counts": {k: v for k, v in sorted(self.store_counts.items()) if v},
        }

    def transfer_rows(self) -> list[tuple]:
        """Rows for ``hicache_transfers`` (its columns, bytes last)."""
        return [(*r, b) for r, b in zip(self.io, self.io_bytes, strict=True)]

    def frames(self) -> dict[str, pd.DataFrame]:
        usage = pd.DataFrame(self.usage, columns=list(STORAGE_USAGE_COLUMNS))
        prefetches = pd.DataFrame(self.prefetches, columns=list(PREFETCH_COLUMNS))
        # NaN: the hit query never returned; "running": still in flight when the run ended
        prefetches["hit_tokens"] = pd.to_numeric(prefetches["hit_tokens"]).astype(float)
        prefetches["outcome"] = prefetches["outcome"].fillna("running").astype(str)
        return {"hicache_storage_usage": usage, "hicache_prefetches": prefetches}


def format_l3(h: dict[str, Any]) -> list[str]:
    """The text report's L3 lines (under the HiCache block)."""
    gib = 1 << 30
    o = h["prefetch_outcomes"]
    cap = h["storage_capacity_bytes"]
    cap_text = f"{cap / gib:.2f} GiB" if cap else "unbounded"
    declined = ", ".join(f"{k} {v}" for k, v in h["prefetch_declined"].items()) or "none"
    return [
        f"  L3 ({h['storage_backend']}, prefetch {h['prefetch_policy']}, threshold "
        f"{h['prefetch_threshold']}): {h['storage_used_bytes_max'] / gib:.2f} GiB per rank at peak "
        f"({cap_text}), {h['cached_tokens_storage']} cached tokens from storage; timed at "
        f"{h['storage_read_gbps']:g} GB/s read, {h['storage_write_gbps']:g} GB/s write, "
        f"{h['storage_op_latency_us']:g} us per call (0 GB/s: unlimited)",
        f"  H->L3: {h['h2l3_bytes'] / gib:.2f} GiB per rank ({h['h2l3_ops']} backups); "
        f"L3->H: {h['l32h_bytes'] / gib:.2f} GiB per rank ({h['l32h_ops']} reads)",
        f"  Prefetches: {h['prefetch_issued']} issued (complete {o['complete']}, partial "
        f"{o['partial']}, timed out {o['timed_out']}, revoked {o['revoked']}), "
        f"{h['prefetch_loaded_tokens']} tokens loaded, {h['prefetch_wait_s_total']:.3f} s waited "
        f"(max {h['prefetch_wait_s_max']:.3f} s); declined: {declined}",
    ]
