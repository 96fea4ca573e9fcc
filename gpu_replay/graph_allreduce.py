"""The decode all-reduce as a CUDA graph replays it, and the profile options that carry it
(issue 13). CPU only: reads benchmarks/device_allreduce_graph.sh's records.

kvplan's profiles price every TP all-reduce at ``allreduce_latency_s + bytes term``, with the
latency fitted on eager NCCL calls after a barrier (72.6 us on 4 GPUs). SGLang replays its decode
step from a CUDA graph, where the same NCCL all-reduce of a decode batch's hidden states costs a
fraction of that. :func:`graph_latency` fits the latency a graph-replayed all-reduce pays: the
median over decode batches 1-64 of the graph time less the profile's bytes term (its
``allreduce_bus_gbps`` kept). :func:`option_profiles` writes the session-8 measured-bytes options
with that latency (4 GPUs, MiMo's hidden 4,096; 2 GPUs, gpt-oss's 2,880). The cost model has one
all-reduce latency for prefill and decode, so these options also price prefill's all-reduces at
the graph latency (SGLang runs prefill eagerly): an underestimate of at most 2 x layers x (eager -
graph) a prefill step, 5.7 ms for MiMo's 48 layers.

    python -m gpu_replay.graph_allreduce [--write-profiles] [--check]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "gpu_replay" / "results" / "allreduce-graph-2026-11-27-h100x4"
PROFILES = ROOT / "gpu_replay" / "profiles"
#: (option name, the profile it extends, GPUs, hidden size of the model)
OPTIONS = (
    (
        "transferred-mimo-v2-flash-tp4-fp8-measured-graph-ar",
        "transferred-mimo-v2-flash-tp4-fp8-measured",
        4,
        4096,
    ),
    (
        "h100-gpt-oss-120b-tp2-fitted-mxfp4-measured-graph-ar",
        "h100-gpt-oss-120b-tp2-fitted-mxfp4-measured",
        2,
        2880,
    ),
)
MAX_BATCH = 64


def _rows(gpus: int, hidden: int) -> list[dict]:
    data = json.loads((RUN / f"allreduce_graph-{gpus}.json").read_text())
    return [r for r in data["rows"] if r["hidden"] == hidden and r["batch"] <= MAX_BATCH]


def graph_latency(gpus: int, hidden: int, bus_gbps: float, key: str = "graph_s") -> float:
    """Median over decode batches <= 64 of ``key`` less the bytes term 2 (n-1)/n bytes / bus."""
    rows = _rows(gpus, hidden)
    if not all(r["eager_sum_ok"] and r["graph_sum_ok"] for r in rows):
        raise ValueError("a measured all-reduce summed wrong")
    return statistics.median(r[key] - 2 * (gpus - 1) / gpus * r["bytes"] / (bus_gbps * 1e9) for r in rows)


def option_profiles() -> dict[str, dict]:
    from simulator.cost.profile import validate_profile

    out = {}
    for name, base, gpus, hidden in OPTIONS:
        prof = json.loads((PROFILES / f"{base}.json").read_text())
        c = prof["coefficients"]
        lat = float(f"{graph_latency(gpus, hidden, c['allreduce_bus_gbps']):.4g}")
        eager = graph_latency(gpus, hidden, c["allreduce_bus_gbps"], "eager_barrier_s")
        old = c["allreduce_latency_s"]
        c["allreduce_latency_s"] = lat
        prof["name"] = name
        prof["description"] = f"{base} with the all-reduce latency of a CUDA graph replay (issue 13)."
        prof["provenance"]["tool"] += "; python -m gpu_replay.graph_allreduce --write-profiles"
        prof["provenance"]["notes"] = (
            f"{base} with allreduce_latency_s = {lat * 1e6:.2f} us (was {old * 1e6:.2f} us): NCCL "
            f"all-reduces of decode batches 1-{MAX_BATCH} x hidden {hidden} on {gpus} H100s "
            f"(NVLink, multicast off) captured 16 to a CUDA graph and replayed ({RUN.name}), "
            f"the median less the bytes term at the kept {c['allreduce_bus_gbps']} GB/s; the same "
            f"calls eager after a barrier: {eager * 1e6:.2f} us. Prefill's all-reduces (eager in "
            "SGLang) are priced at the graph latency too. " + prof["provenance"]["notes"]
        )
        validate_profile(prof, origin=name)
        out[name] = prof
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail if a committed option differs")
    ap.add_argument("--write-profiles", action="store_true")
    a = ap.parse_args()
    for name, prof in option_profiles().items():
        path = PROFILES / f"{name}.json"
        print(name, prof["coefficients"]["allreduce_latency_s"])
        if a.check and json.loads(path.read_text()) != prof:
            sys.exit(f"stale: {path.relative_to(ROOT)} (rerun with --write-profiles)")
        if a.write_profiles:
            path.write_text(json.dumps(prof, indent=2) + "\n")


if __name__ == "__main__":
    main()
