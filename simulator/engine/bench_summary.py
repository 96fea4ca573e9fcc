"""bench_multiturn's summary of a run, from the recorder's request and decode-step columns.

``benchmark/hicache/bench_multiturn.py``: only successful, non-heartbeat requests count; cache
hit rate = sum(cached_tokens) / sum(prompt_len); percentiles are ``sorted[min(int(q * n), n - 1)]``;
throughputs divide by ``finished_time - start_time`` (first send to the last return, failed
requests included). kvplan's server-side figures (capacity, retractions, counters) follow.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from simulator.engine.observer import PoolCapacity
from simulator.engine.record_pack import group_by_key


def bench_percentile(sorted_values: np.ndarray | list[float], q: float) -> float:
    """bench_multiturn's percentile: ``sorted[min(int(q * n), n - 1)]``, 0.0 when empty."""
    n = len(sorted_values)
    if n == 0:
        return 0.0
    return float(sorted_values[min(int(q * n), n - 1)])


def latency_stats(values: np.ndarray) -> dict[str, float]:
    """mean / p50 / p90 / p99 / max as bench_multiturn prints them (all 0.0 when there are none)."""
    s = np.sort(np.asarray(values, dtype=np.float64))
    return {
        "mean": float(s.mean()) if len(s) else 0.0,
        "p50": bench_percentile(s, 0.5),
        "p90": bench_percentile(s, 0.9),
        "p99": bench_percentile(s, 0.99),
        "max": float(s[-1]) if len(s) else 0.0,
    }


def bench_summary(
    req: dict[str, Any],
    dec: dict[str, np.ndarray],
    *,
    prefill_batches: int,
    retractions: list[tuple],
    capacity: PoolCapacity | None,
    counters: dict,
    end_s: float,
    request_rate: float | None,
) -> dict[str, Any]:
    """The summary, JSON-ready (NaN -> None): ``req`` / ``dec`` are the requests and decode-steps
    frames' columns, ``retractions`` the ``(time, requests, ratio before, ratio after)`` records."""
    real = ~req["heartbeat"]
    finish = req["finish_s"]
    aborted = req["aborted"]
    returned = real & np.isfinite(finish)
    ok = returned & ~aborted
    if "rejected" in req:  # refused on arrival: failed, like an abort, but counted apart
        ok &= ~req["rejected"]
    prompt = int(req["prompt_len"][ok].sum())
    cached = int(req["cached_tokens"][ok].sum())
    output = int(req["output_len"][ok].sum())
    arrival = req["arrival_s"]
    start = float(np.nanmin(arrival)) if np.isfinite(arrival).any() else 0.0
    finished = float(finish[returned].max()) if returned.any() else start
    duration = finished - start
    n_ok = int(ok.sum())
    full_usage = dec["full_token_usage"].astype(np.float64, copy=False)
    swa_usage = dec["swa_token_usage"].astype(np.float64, copy=False)

    def per_s(x: float) -> float:
        return x / duration if duration > 0 else 0.0

    out: dict[str, Any] = {
        "requests": n_ok,
        "request_rate": request_rate,
        "requests_submitted": int(real.sum()),
        "aborted": int((real & aborted).sum()),
        "unfinished": int((real & ~np.isfinite(finish)).sum()),
        "heartbeats": int((~real).sum()),
        "average_prompt_len": prompt / n_ok if n_ok else 0.0,
        "average_output_len": output / n_ok if n_ok else 0.0,
        "total_prompt_tokens": prompt,
        "total_cached_tokens": cached,
        "total_output_tokens": output,
        "cache_hit_rate": cached / prompt if prompt else 0.0,
        "ttft": latency_stats(req["ttft_s"][ok]),
        "latency": latency_stats(req["latency_s"][ok]),
        "start_s": start,
        "finished_s": finished,
        "duration_s": duration,
        "input_throughput": per_s(prompt),
        "output_throughput": per_s(output),
        "request_throughput": per_s(n_ok),
        "decode_steps": len(dec["round"]),  # "step" is built only for the frames
        "prefill_batches": prefill_batches,
        "decode_full_token_usage": _mean(full_usage),
        "decode_swa_token_usage": _mean(swa_usage),
        "decode_full_token_usage_max": _max(full_usage),
        "decode_swa_token_usage_max": _max(swa_usage),
    }
    out.update(_server_side(capacity, retractions, counters, end_s))
    out["per_round"] = per_round(req, ok, real, dec)
    return _json_ready(out)


def _server_side(
    capacity: PoolCapacity | None, retractions: list[tuple], counters: dict, end_s: float
) -> dict:
    return {
        "capacity": (
            {"full_tokens": capacity.full_tokens, "swa_tokens": capacity.swa_tokens} if capacity else None
        ),
        "retractions": len(retractions),
        "retracted_requests": int(sum(r[1] for r in retractions)),
        "counters": dict(counters),
        "sim_end_s": end_s,
    }


def per_round(
    req: dict[str, Any], ok: np.ndarray, real: np.ndarray, dec: dict[str, np.ndarray]
) -> list[dict]:
    """One entry per round 0..max round seen (bench_multiturn lists every round, empty ones too)."""
    rounds = req["round"]
    if not real.any():
        return []
    prompt, cached = req["prompt_len"], req["cached_tokens"]
    ttft, latency = req["ttft_s"], req["latency_s"]
    # decode steps grouped by round; a stable sort keeps each round's steps in step order
    dec_round = dec["round"]
    full_usage = dec["full_token_usage"].astype(np.float64, copy=False)
    swa_usage = dec["swa_token_usage"].astype(np.float64, copy=False)
    sorted_round = dec_round
    if len(dec_round) > 1 and bool((dec_round[1:] < dec_round[:-1]).any()):  # else the sort is the identity
        sorted_round, full_usage, swa_usage = group_by_key(dec_round, full_usage, swa_usage)
    result = []
    for r in range(int(rounds[real].max()) + 1):
        sel = ok & (rounds == r)
        n = int(sel.sum())
        p = int(prompt[sel].sum())
        c = int(cached[sel].sum())
        lo, hi = np.searchsorted(sorted_round, [r, r + 1])
        result.append(
            {
                "round": r,
                "requests": n,
                "ttft_mean": float(ttft[sel].mean()) if n else 0.0,
                "latency_mean": float(latency[sel].mean()) if n else 0.0,
                "prompt_tokens": p,
                "cached_tokens": c,
                "cache_hit_rate": c / p if p else 0.0,
                "decode_steps": int(hi - lo),
                "decode_full_token_usage": _mean(full_usage[lo:hi]),
                "decode_swa_token_usage": _mean(swa_usage[lo:hi]),
            }
        )
    return result


def _finite(v: np.ndarray) -> np.ndarray:
    """``v``'s finite values: ``v`` itself when all are (no copy of a million-step column; the
    mean of the same values in the same order is the same bit for bit)."""
    finite = np.isfinite(v)
    return v if finite.all() else v[finite]


def _mean(v: np.ndarray) -> float | None:
    v = _finite(v)
    return float(v.mean()) if len(v) else None


def _max(v: np.ndarray) -> float | None:
    v = _finite(v)
    return float(v.max()) if len(v) else None


def _json_ready(obj: Any) -> Any:
    """Plain Python types only; NaN and infinities become None (JSON has no NaN)."""
    if isinstance(obj, dict):
        return {str(k): _json_ready(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_json_ready(v) for v in obj]
    if isinstance(obj, np.integer | bool | np.bool_):
        return bool(obj) if isinstance(obj, bool | np.bool_) else int(obj)
    if isinstance(obj, float | np.floating):
        f = float(obj)
        return f if math.isfinite(f) else None
    return obj
