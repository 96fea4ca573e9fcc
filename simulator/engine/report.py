"""The text a run prints: bench_multiturn's summary layout, then kvplan's server-side numbers.

The first two blocks reproduce ``benchmark/hicache/bench_multiturn.py``'s output line for line as
the seed PR 17220 shows it (../shared/seeds/000_*.txt), so a simulated run can be diffed against a
real one; the third block ("Server metrics (kvplan):") is ours and comes after them.
"""

from __future__ import annotations

from typing import Any


def format_bench_summary(summary: dict[str, Any], *, per_round: bool = True) -> str:
    """``Performance metrics summary:`` (and ``Per-round metrics:``) exactly as bench_multiturn."""
    s = summary
    # every request sent counts, the failed ones too (the served ones when the total is unknown)
    total = s.get("requests_submitted", s["requests"])
    head = f"  Total requests: {total} {_offered(s, total)}"
    t, lat = s["ttft"], s["latency"]
    failed = total - s["requests"]
    lines = [
        "All requests completed" if not failed else f"Not all requests completed: {failed} failed",
        "Performance metrics summary:",
        head,
    ]
    if failed:
        lines.append(
            f"  Served requests: {s['requests']} (the lengths, TTFT, latency, throughputs and hit "
            "rate below cover only these)"
        )
    lines += [
        f"  Average Prompt Length: {s['average_prompt_len']:.2f} tokens",
        f"  Average Output Length: {s['average_output_len']:.2f} tokens",
        f"  Average TTFT: {t['mean']:.2f}",
        f"  P90 TTFT: {t['p90']:.2f}",
        f"  P99 TTFT: {t['p99']:.2f}",
        f"  Median TTFT: {t['p50']:.2f}",
        f"  Max TTFT: {t['max']:.2f}",
        f"  Average latency: {lat['mean']:.2f}",
        f"  P90 latency: {lat['p90']:.2f}",
        f"  P99 latency: {lat['p99']:.2f}",
        f"  Median latency: {lat['p50']:.2f}",
        f"  Max latency: {lat['max']:.2f}",
        f"  Input token throughput: {s['input_throughput']:.2f} tokens per second",
        f"  Output token throughput: {s['output_throughput']:.2f} tokens per second",
        f"  Request Throughput: {s['request_throughput']:.2f} requests per second",
        f"  Cache Hit Rate: {s['cache_hit_rate']:.6f}",
    ]
    if per_round:
        lines.append("Per-round metrics:")
        for r in s.get("per_round", []):
            lines.append(
                f"  Round {r['round']}: Average TTFT = {r['ttft_mean']:.2f}s, "
                f"Cache Hit Rate = {r['cache_hit_rate']:.6f} ({r['requests']} requests)"
            )
    return "\n".join(lines)


def _offered(s: dict[str, Any], total: int) -> str:
    """How the requests were sent: bench_multiturn's "at R requests per second" when there is a
    rate; else a sequential replay, or an open loop whose arrivals span no time (one request,
    a burst, ``--time-scale 0``)."""
    rate = s.get("request_rate")
    if rate is not None:
        return f"at {rate} requests per second"
    if s.get("client_mode") == "bench_multiturn":  # --request-rate inf (JSON keeps no inf: None)
        return "at inf requests per second"
    if s.get("client_mode", "sequential") == "sequential":
        return "(sequential replay)"
    return "(open loop, one request)" if total == 1 else "(open loop, all sent at the same time)"


def _usage(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def format_server_metrics(summary: dict[str, Any], *, per_round: bool = True) -> str:
    """kvplan's block: decode token usage (SGLang's log definition), retractions, tree counters."""
    s = summary
    lines = ["Server metrics (kvplan):"]
    cap = s.get("capacity")
    if cap:
        lines.append(f"  Pool capacity: full {cap['full_tokens']} tokens, swa {cap['swa_tokens']} tokens")
    lines.append(
        f"  Decode steps: {s['decode_steps']}, prefill batches: {s['prefill_batches']}, "
        f"simulated time: {_seconds(s.get('sim_end_s'))}"
    )
    lines.append(
        f"  Decode full token usage: mean {_usage(s['decode_full_token_usage'])}, "
        f"max {_usage(s['decode_full_token_usage_max'])}"
    )
    lines.append(
        f"  Decode swa token usage: mean {_usage(s['decode_swa_token_usage'])}, "
        f"max {_usage(s['decode_swa_token_usage_max'])}"
    )
    lines.append(
        f"  Retractions: {s['retractions']} ({s['retracted_requests']} requests), "
        f"aborted: {s['aborted']}, unfinished: {s['unfinished']}, heartbeats: {s['heartbeats']}"
    )
    for k, v in s.get("counters", {}).items():
        lines.append(f"  {k.replace('_', ' ')}: {_counter(v)}")
    if per_round and s.get("per_round"):
        for r in s["per_round"]:
            lines.append(
                f"  Round {r['round']}: decode full token usage = {_usage(r['decode_full_token_usage'])}, "
                f"swa token usage = {_usage(r['decode_swa_token_usage'])} ({r['decode_steps']} steps)"
            )
    return "\n".join(lines)


def _counter(v: Any) -> str:
    """A counter value; nested groups (e.g. ``evictions``) print as ``key=value`` pairs."""
    if isinstance(v, dict):
        return ", ".join(f"{k}={_counter(x)}" for k, x in v.items())
    return str(v)


def _seconds(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f} s"


def format_failures(summary: dict[str, Any]) -> str:
    """The failed requests, by outcome and reason; empty when every request was served."""
    s = summary
    total = s.get("requests_submitted", s["requests"])
    aborted, rejected = s.get("aborted", 0), s.get("rejected", 0)
    unfinished = s.get("unfinished", 0)
    if not (aborted or rejected or unfinished):
        return ""
    lines = [
        f"FAILED REQUESTS: {aborted + rejected + unfinished} of {total} requests were not served "
        f"({rejected} rejected on arrival, {aborted} aborted, {unfinished} unfinished)"
    ]
    examples = s.get("failure_examples", {})
    for outcome, by_kind in s.get("failure_reasons", {}).items():
        for kind, n in by_kind.items():
            example = examples.get(kind, kind)
            lines.append(f"  {n} {outcome}, e.g. {example}" if n > 1 else f"  1 {outcome}: {example}")
    return "\n".join(lines)


def format_report(summary: dict[str, Any], *, per_round: bool = True, server_metrics: bool = True) -> str:
    """The whole stdout of a run: the failed requests first (if any), bench_multiturn's blocks,
    then (optionally) kvplan's."""
    failures = format_failures(summary)
    parts = [failures] if failures else []
    if summary.get("truncated"):
        parts.append(
            f"TRUNCATED REQUESTS: {summary['truncated']} prompts were cut to fit "
            "(--allow-auto-truncate); their lengths below are the cut ones"
        )
    parts.append(format_bench_summary(summary, per_round=per_round))
    if server_metrics:
        parts.append(format_server_metrics(summary, per_round=per_round))
    if summary.get("hicache"):
        from simulator.engine.hicache_report import format_hicache

        parts.append(format_hicache(summary["hicache"]))
    return "\n".join(parts)
