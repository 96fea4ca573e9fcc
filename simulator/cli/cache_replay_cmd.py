"""``kvplan cache-replay``: serve a workload one request at a time through the SWA radix cache."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from simulator.cache_replay import CacheReplayConfig, WorkloadRequest, replay
from simulator.cli.common import print_json, user_errors_exit
from simulator.cli.server_flags import CACHE_POLICY_FLAGS, server_options
from simulator.radix.cache import SIZE_KEYS


def workload_from_trace(path: Path, page_size: int, limit: int | None) -> list[WorkloadRequest]:
    """Any trace kvplan reads (the oracle's JSONL included), as page-id requests in file order."""
    from traces import load_trace

    trace = load_trace(path)
    if limit is not None:
        trace = trace.head(limit)
    offsets, ids = trace.sequence_pages(page_size)
    req = trace.requests
    rids = req["rid"].astype(str).tolist()
    prompt = req["prompt_len"].to_numpy(np.int64)
    output = req["output_len"].to_numpy(np.int64)
    return [
        WorkloadRequest(rids[i], ids[offsets[i] : offsets[i + 1]], int(prompt[i]), int(output[i]))
        for i in range(len(rids))
    ]


@user_errors_exit
@server_options("page_size", *CACHE_POLICY_FLAGS, "check_invariants")
def cache_replay(
    workload: Annotated[
        Path, typer.Argument(help="JSONL {rid,input_ids,output_ids} or any trace kvplan reads")
    ],
    full_tokens: Annotated[int, typer.Option("--full-tokens", help="full pool size (allocator size)")] = 4096,
    swa_tokens: Annotated[
        int, typer.Option("--swa-tokens", help="SWA pool size (allocator size_swa)")
    ] = 1024,
    window: Annotated[int, typer.Option("--window", help="SGLang sliding_window_size")] = 128,
    limit: Annotated[int | None, typer.Option("--limit", help="replay only the first N requests")] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="one JSON object per request, then a summary")
    ] = False,
    *,
    server: dict[str, Any],
) -> None:
    """Serve WORKLOAD through the hybrid SWA radix cache exactly as SGLang does at batch size 1."""
    page_size = server["page_size"] or 1  # SGLang's CUDA default; no model here to resolve it
    cfg = CacheReplayConfig(
        page_size=page_size,
        full_tokens=full_tokens,
        swa_tokens=swa_tokens,
        window=window,
        swa_eviction=server["swa_eviction"],
        swa_eviction_interval=server["swa_eviction_interval"],
        tombstone=server["tombstone"],
        eviction_policy=server["radix_eviction_policy"],
        check_invariants=server["check_invariants"],
    )
    requests = workload_from_trace(workload, page_size, limit)
    result = replay(requests, cfg)
    if as_json:
        for rec in result.records:
            line = dict(rid=rec["rid"], prompt_len=rec["prompt_len"], prefix_len=rec["prefix_len"])
            line["output_len"] = rec["answer_len"]
            line.update({k: rec["after_release"][k] for k in SIZE_KEYS})
            line["evict_calls"] = rec["evict_calls"]
            print_json(line)
        print_json({"summary": result.summary})
        return
    _print_summary(result.summary, workload)


def _print_summary(summary: dict, workload: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"cache-replay: {workload.name}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("requests", str(summary["requests"]))
    table.add_row("prompt tokens", str(summary["total_prompt_tokens"]))
    table.add_row("prefix-hit tokens", str(summary["total_prefix_hit_tokens"]))
    table.add_row("token hit rate", f"{summary['hit_rate']:.4f}")
    for k, v in summary["tree"].items():
        table.add_row(f"tree {k}", str(v))
    for k in ("tombstones_created", "tombstones_healed", "leaves_deleted"):
        table.add_row(k.replace("_", " "), str(summary["counters"][k]))
    ev = summary["evictions"]
    table.add_row(
        "evictions (calls / full / swa tokens)", f"{ev['calls']} / {ev['full_evicted']} / {ev['swa_evicted']}"
    )
    Console().print(table)
