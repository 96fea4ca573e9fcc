"""Checks and limits every configurator applies after its split: the SWA admission floor, the
"not enough memory" check, ``--max-total-tokens`` and ``--max-running-requests``."""

from __future__ import annotations

from simulator.errors import ConfigError
from simulator.server_args import ResolvedServerArgs


def max_total_tokens_limit(profiled: int, args: ResolvedServerArgs, notes: list[str]) -> int | None:
    """kv_cache_configurator.py::_apply_token_constraints / config_from_budget: the token count
    to re-solve the pools for when ``--max-total-tokens`` lowers the profiled one, else None (a
    larger request is noted and ignored: SGLang keeps the profiled value)."""
    if args.max_total_tokens is None:
        return None
    if args.max_total_tokens > profiled:
        notes.append(
            f"max_total_tokens={args.max_total_tokens} is larger than the profiled value {profiled}; "
            "SGLang uses the profiled value"
        )
    limit = min(profiled, args.max_total_tokens)
    return limit if limit != profiled else None


def validate_swa_pool_size(swa_tokens: int, window: int | None, page: int) -> None:
    """pool_configurator.py::MemoryPoolConfigurator.validate_swa_pool_size: prefill admission
    charges window + page of SWA headroom per request, so a pool at or below that floor could
    never admit anything and SGLang refuses to start."""
    if window is None:
        return
    if window + page >= swa_tokens:
        raise ConfigError(
            f"SWA pool ({swa_tokens} tokens) cannot hold even one request: the prefill admission floor is "
            f"sliding_window_size ({window}) + page_size ({page}). Increase --swa-full-tokens-ratio or the "
            "total KV budget."
        )


def check_positive(max_total: int, args: ResolvedServerArgs) -> None:
    # pool_configurator.py::MemoryPoolConfig.__post_init__
    if max_total <= 0:
        msg = "Not enough memory. Please try to increase --mem-fraction-static."
        if args.mem_fraction_static is not None:
            msg += f" Current value: mem_fraction_static={args.mem_fraction_static:.4g}"
        raise ConfigError(msg)


def resolve_max_num_reqs(tokens: int, args: ResolvedServerArgs, notes: list[str]) -> int:
    """kv_cache_configurator.py::KVCacheConfigurator.resolve_max_num_reqs (one DP worker):
    the 512-per-context estimate clamped to [2048, 4096], never more than half the token pool."""
    estimated = int(tokens / args.context_length * 512)
    estimated = max(min(estimated, 4096), 2048)
    if args.max_running_requests is not None:
        requested = max(1, args.max_running_requests)
        value = min(requested, tokens // 2)
        if value < requested:
            notes.append(
                f"max_running_requests reduced from the requested {requested} to {value} by the KV capacity"
            )
        return value
    return min(estimated, tokens // 2)
