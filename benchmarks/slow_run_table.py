"""Sum the scheduler slow run's report lines (``KVPLAN_SCHED_SLOW_REPORT``) per configuration
into the markdown table of docs/differential-testing.md.

    python benchmarks/slow_run_table.py docs/slowruns/sched-*.jsonl
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict

KEYS = (
    "steps", "chunked_steps", "retractions", "refreshes", "lpm_deprioritized", "batch_full_passes",
    "stops", "ratio_resets", "swa_chunk_capped", "anomalies", "crashes",
)  # fmt: skip


def main(paths: list[str]) -> None:
    rows: dict[str, dict] = defaultdict(lambda: dict(workloads=0, seeds=[], diffs=0, counts=defaultdict(int)))
    for path in paths:
        for line in open(path):
            d = json.loads(line)
            r = rows[d["config"]]
            r["workloads"] += d["workloads"]
            r["diffs"] += d["differences"]
            r["seeds"].append(f"{d['first']}-{d['first'] + d['workloads'] - 1}")
            for k, v in d["counts"].items():
                r["counts"][k] += v
    print("| configuration | workloads (seeds) | differences | " + " | ".join(KEYS) + " |")
    print("|---|---|---|" + "---|" * len(KEYS))
    for name, r in rows.items():
        cells = " | ".join(str(r["counts"].get(k, 0)) for k in KEYS)
        print(f"| {name} | {r['workloads']} ({', '.join(sorted(r['seeds']))}) | {r['diffs']} | {cells} |")
    print(f"\n{sum(r['workloads'] for r in rows.values())} workloads in all", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
