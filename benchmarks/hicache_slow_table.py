"""Sum the HiCache slow matrix's report lines (``KVPLAN_HICACHE_SLOW_REPORT``) per L3 setting and
write policy into the markdown table of docs/differential-testing.md. A shard run twice (two
streams meeting) is counted once: lines are keyed by configuration and seed range.

    python benchmarks/hicache_slow_table.py docs/slowruns/hicache-*.jsonl
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict

KEYS = (
    "demoted_nodes", "deleted_nodes", "host_evicted_full_tokens", "load_back_ok", "write_back_deferred",
    "storage_backups", "prefetch_issued", "prefetch_done", "prefetch_tokens",
)  # fmt: skip


def main(paths: list[str]) -> None:
    lines = {}
    for path in paths:
        for raw in open(path):
            d = json.loads(raw)
            lines[(d["config"], tuple(d["seeds"]))] = d
    groups: dict[tuple[str, str], dict] = defaultdict(lambda: dict(cfgs=set(), w=0, c=defaultdict(int)))
    seeds: dict[str, set[int]] = defaultdict(set)
    for (cfg, (first, stop)), d in sorted(lines.items()):
        g = groups[("file" if "-L3" in cfg else "no", cfg.split("-r")[0])]
        g["cfgs"].add(cfg)
        g["w"] += stop - first
        seeds[cfg].update(range(first, stop))
        for k in KEYS:
            g["c"][k] += d["counts"].get(k, 0)
    print("| L3 | policy | configurations | workloads | " + " | ".join(KEYS) + " |")
    print("|---|---|---|---|" + "---|" * len(KEYS))
    for (l3, policy), g in sorted(groups.items()):
        cells = " | ".join(str(g["c"][k]) for k in KEYS)
        print(f"| {l3} | {policy} | {len(g['cfgs'])} | {g['w']} | {cells} |")
    per = [len(s) for s in seeds.values()]
    print(f"\n{sum(per)} workloads, {len(per)} configurations, {min(per)}-{max(per)} each", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
