"""Configurations on which SGLang 0.5.23 itself misbehaves, and the warning kvplan prints.

The scheduler oracle found one (../shared/oracle/SCHEDULER.md, Finding 1): on a hybrid SWA model
whose SWA pool holds no more than ``chunked_prefill_size`` plus one page, ``SWAPrefillBudget``
caps a chunk below the chunk budget (``mem_cache/allocator/prefill_budget.py:
SWAPrefillBudget.check_prefill``), so ``PrefillAdder.budget_state`` lets the admission loop go on
and a second request is truncated in the same batch (``schedule_policy.py:
PrefillAdder._commit_prefill_admission`` keeps only the last one as ``new_chunked_req``). The
first then decodes on a partial prompt, and later SWA frees overrun the pool: the allocator's
assert (``allocator/swa.py: SWATokenToKVPoolAllocator.free_group_end``) stops the scheduler.
kvplan reproduces both (``kvplan step-replay`` reports the crash at SGLang's step); a capacity
plan for such a configuration describes a server that does not work.
"""

from __future__ import annotations

import warnings

from simulator.errors import KvplanError


class SGLangCrash(KvplanError):
    """The simulated server stopped where SGLang 0.5.23's own scheduler stops (its bug)."""


class PoolLeakError(ValueError):
    """The idle pool-conservation check failed (``SchedulerInvariantChecker._report_leak``):
    SGLang raises ValueError there (``raise_error_or_warn``, strict by default)."""


def swa_double_chunk_condition(
    swa_tokens: int, chunked_prefill_size: int | None, page_size: int, hybrid: bool
) -> bool:
    """True where SGLang 0.5.23's SWA double-truncation bug can trigger: a hybrid SWA model,
    chunked prefill on, and ``swa_tokens <= chunked_prefill_size + page_size``."""
    if not hybrid or not swa_tokens or chunked_prefill_size is None or chunked_prefill_size <= 0:
        return False
    return swa_tokens <= chunked_prefill_size + page_size


def swa_double_chunk_message(swa_tokens: int, chunked_prefill_size: int, page_size: int) -> str:
    condition = _condition(swa_tokens, chunked_prefill_size, page_size)
    return (
        f"SGLang 0.5.23 misbehaves with this configuration: {condition}"
        ", so a second request can be truncated in one prefill batch and decode on a partial "
        "prompt, and the SWA allocator's assert can stop the server (SGLang's bug, reproduced "
        "by kvplan; `kvplan step-replay` shows the step). Raise the SWA pool or lower "
        "--chunked-prefill-size"
    )


def _condition(swa_tokens: int, chunked_prefill_size: int, page_size: int) -> str:
    return (
        f"the SWA pool ({swa_tokens:,} tokens) is no larger than chunked_prefill_size + page_size "
        f"({chunked_prefill_size:,} + {page_size})"
    )


def warn_if_sglang_misbehaves(
    swa_tokens: int, chunked_prefill_size: int | None, page_size: int, hybrid: bool
) -> None:
    """A Python warning (the CLI prints it as ``kvplan: warning: ...``) for such a configuration."""
    if swa_double_chunk_condition(swa_tokens, chunked_prefill_size, page_size, hybrid):
        assert chunked_prefill_size is not None
        warnings.warn(swa_double_chunk_message(swa_tokens, chunked_prefill_size, page_size), stacklevel=2)


def raise_if_sglang_crash(exc: AssertionError | PoolLeakError, pools, now: float) -> None:
    """A pool-conservation assert, or the idle leak check, on a configuration of the bug is
    SGLang's crash, reproduced: raise it as :class:`SGLangCrash` (one line, exit status 1).
    Elsewhere it is kvplan's own bug, and the caller re-raises it."""
    if swa_double_chunk_condition(
        pools.swa_tokens, pools.chunked_prefill_size, pools.page_size, pools.hybrid
    ):
        where = (
            "SGLang 0.5.23's idle leak check raises too"
            if isinstance(exc, PoolLeakError)
            else "SGLang 0.5.23's SWA allocator asserts too"
        )
        raise SGLangCrash(
            f"the simulated server stopped at t={now:.3f} s ({type(exc).__name__}: {exc}) where "
            f"{where} (its double-truncation bug): "
            + _condition(pools.swa_tokens, pools.chunked_prefill_size, pools.page_size)
        ) from exc
