"""``kvplan cache-replay``: serve a workload one request at a time through the SWA radix cache."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from simulator.cache_replay import CacheReplayConfig, WorkloadRequest, replay
from simulator.cli.common import print_json, user_errors_exit
from simulator.cli.failed_runs import MaxAbortFractionOpt, exit_if_failed
from simulator.cli.server_flags import CACHE_POLICY_FLAGS, server_options
from simulator.radix.cache import SIZE_KEYS

_DERIVED = "SGLang's pool sizing for `kvplan run`'s default model and GPU (TP 1) at --page-size"


def workload_from_trace(path: Path, page_size: int, limit: int | None) -> Sequence[WorkloadRequest]:
    """Any trace kvplan reads (the oracle's JSONL included), as page-id requests in file order.

    The requests are made as they are read (a big trace's page ids too), so a million of them
    are never held at once.
    """
    from traces import load_trace

    trace = load_trace(path)
    if limit is not None:
        trace = trace.head(limit)
    return _TraceWorkload(trace, page_size)


class _TraceWorkload(Sequence):
    """The rows of a trace as :class:`WorkloadRequest` s, each made when it is asked for."""

    def __init__(self, trace: Any, page_size: int) -> None:
        from traces.pages import LazyPages

        self.trace = trace  # kept for provenance (its content hash)
        self._lazy, self._rows = LazyPages, trace.row_page_keys(page_size)
        if self._rows is None:
            self._offsets, self._ids = trace.sequence_pages(page_size)
        req = trace.requests
        self._rids = req["rid"].astype(str).to_numpy(dtype=object)
        self._prompt = req["prompt_len"].to_numpy(np.int64)
        self._output = req["output_len"].to_numpy(np.int64)

    def __len__(self) -> int:
        return len(self._prompt)

    def __getitem__(self, i: int) -> WorkloadRequest:  # type: ignore[override]
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        i %= len(self)
        if self._rows is None:
            pages = self._ids[self._offsets[i] : self._offsets[i + 1]]
        else:
            pages = self._lazy(self._rows, i)
        return WorkloadRequest(self._rids[i], pages, int(self._prompt[i]), int(self._output[i]))


@user_errors_exit
@server_options(
    "page_size",
    *CACHE_POLICY_FLAGS,
    "check_invariants",
    "enable_hierarchical_cache",
    "hicache_write_policy",
    "hicache_ratio",
    "hicache_size",
    "hicache_storage_backend",
    "hicache_storage_prefetch_policy",
    "hicache_storage_backend_extra_config",
    "storage_capacity_gb",
)
def cache_replay(
    workload: Annotated[
        Path, typer.Argument(help="JSONL {rid,input_ids,output_ids} or any trace kvplan reads")
    ],
    full_tokens: Annotated[
        int | None,
        typer.Option("--full-tokens", help=f"full pool size (allocator size); default: {_DERIVED}"),
    ] = None,
    swa_tokens: Annotated[
        int | None,
        typer.Option("--swa-tokens", help=f"SWA pool size (allocator size_swa); default: {_DERIVED}"),
    ] = None,
    window: Annotated[
        int | None, typer.Option("--window", help=f"SGLang sliding_window_size; default: {_DERIVED}")
    ] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="replay only the first N requests")] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="one JSON object per request, then a summary")
    ] = False,
    max_abort_fraction: MaxAbortFractionOpt = 0.0,
    layers: Annotated[int, typer.Option("--layers", help="model layers (--hicache-size split)")] = 4,
    full_layers: Annotated[int, typer.Option("--full-layers", help="full-attention layers")] = 1,
    head_num: Annotated[int, typer.Option("--head-num", help="KV heads per layer")] = 1,
    head_dim: Annotated[int, typer.Option("--head-dim", help="head dimension")] = 4,
    dtype: Annotated[
        str, typer.Option("--dtype", help="KV dtype: float32, bfloat16, float16, ...")
    ] = "float32",
    *,
    server: dict[str, Any],
) -> None:
    """Serve WORKLOAD through the hybrid SWA radix cache exactly as SGLang does at batch size 1."""
    page_size = server["page_size"] or 1  # SGLang's CUDA default; no model here to resolve it
    if full_tokens is None or swa_tokens is None or window is None:
        full_d, swa_d, window_d = default_pools(page_size)
        full_tokens = full_d if full_tokens is None else full_tokens
        swa_tokens = swa_d if swa_tokens is None else swa_tokens
        window = window_d if window is None else window
    hi = server.pop("hicache")  # HiCacheArgs: the flags as declared once in server_flags.py
    if hi.enabled:
        from simulator.cli.cache_replay_hicache import run_hicache_replay, storage_fields

        geometry = dict(layers=layers, full_layers=full_layers, head_num=head_num, head_dim=head_dim)
        # SGLang's default ratio when none is given is 2.0 (hicache_hook.py), as the oracle's
        hicache = dict(
            write_policy=hi.hicache_write_policy,
            hicache_ratio=2.0 if hi.hicache_ratio is None else hi.hicache_ratio,
            hicache_size=hi.hicache_size,
            **storage_fields(hi),
        )
        pools = dict(page_size=page_size, full_tokens=full_tokens, swa_tokens=swa_tokens, window=window)
        requests = workload_from_trace(workload, page_size, limit)
        run_hicache_replay(requests, server, pools, hicache, geometry, dtype, as_json, workload)
        return
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
    # records are printed (--json) or dropped as they come: a big trace's never pile up
    result = replay(requests, cfg, _print_record if as_json else _drop_record)
    if as_json:
        from simulator.provenance import provenance

        print_json({"summary": result.summary, "provenance": provenance(requests.trace)})
    else:
        _print_summary(result.summary, workload)
    exit_if_failed(result.summary["aborted"], result.summary["requests"], max_abort_fraction)


def _print_record(rec: dict) -> None:
    line = dict(rid=rec["rid"], prompt_len=rec["prompt_len"], prefix_len=rec["prefix_len"])
    line["output_len"] = rec["answer_len"]
    line.update({k: rec["after_release"][k] for k in SIZE_KEYS})
    line["evict_calls"] = rec["evict_calls"]
    if rec.get("aborted"):
        line.update(aborted=True, abort_reason=rec["error"])
    print_json(line)


def _drop_record(rec: dict) -> None:
    pass


def default_pools(page_size: int) -> tuple[int, int, int]:
    """(full, SWA, window) tokens: SGLang's pool sizing for ``kvplan run``'s default model, GPU
    and TP at this page size, so the defaults serve the bundled trace without aborts."""
    from simulator.engine.config import SimConfig

    sizes = SimConfig(page_size=page_size).pool_sizes()
    return int(sizes.full_tokens), int(sizes.swa_tokens), int(sizes.sliding_window)


def _print_failures(summary: dict) -> None:
    """Aborted requests first: a hit rate over the served ones alone is no result by itself."""
    aborted = summary["aborted"]
    if not aborted:
        return
    typer.echo(
        f"FAILED REQUESTS: {aborted} of {summary['requests']} requests were aborted; the hit rate "
        "below covers only the served ones"
    )
    for kind, n in summary["failure_reasons"]["aborted"].items():
        typer.echo(f"  {n} aborted, e.g. {summary['failure_examples'][kind]}")


def _print_summary(summary: dict, workload: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    _print_failures(summary)
    table = Table(title=f"cache-replay: {workload.name}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("requests", str(summary["requests"]))
    table.add_row("aborted", str(summary["aborted"]))
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
