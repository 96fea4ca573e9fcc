"""Requests the server refused or gave up on: why, and how a run reports them.

Two outcomes besides success. A request is *rejected* when SGLang refuses it on arrival, before
it is queued (its prompt does not fit the model's context or the KV pool); it is *aborted* when
it was queued but the scheduler gave up on it (it can never be admitted, or memory ran out even
after retracting everything else). Each reason is ``"<kind>: <detail>"``: the kind is a fixed
label the summary counts by (``failure_reasons``), the detail has the request's own numbers.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from simulator.engine.admission import estimate_swa_tokens
from simulator.engine.server_state import CLIP_MAX_NEW_TOKENS

# reason kinds (the summary's ``failure_reasons`` keys)
CONTEXT_EXCEEDED = "prompt exceeds the model's context length"
INPUT_TOO_LONG = "prompt exceeds the maximum allowed input length"
TOTAL_EXCEEDED = "prompt + max_new_tokens exceed the model's context length"
NO_PREFILL_BUDGET = "--max-prefill-tokens leaves no prefill budget"
NO_RUNNING_SLOT = "--max-running-requests allows no running request"
CHUNK_BELOW_PAGE = "--chunked-prefill-size is smaller than a page"
PAGE_OVER_POOL = "page size is larger than the pools"
FULL_TOO_SMALL = "request does not fit the FULL pool"
SWA_TOO_SMALL = "request does not fit the SWA pool"
NOT_ADMITTED = "request cannot be admitted on an idle server"
OUT_OF_MEMORY = "out of memory"

# SGLang 0.5.23 tp_worker.py: get_worker_info: max_req_len = min(context_len - 1, kv_capacity - 1),
# max_req_input_len = max_req_len - 5
_INPUT_MARGIN = 6


def reason(kind: str, detail: str) -> str:
    return f"{kind}: {detail}"


def reason_kind(text: str) -> str:
    """The fixed label of a reason (its text up to the first ``": "``)."""
    return text.split(": ", 1)[0] if text else ""


def reject_reason(
    prompt_len: int, max_new_tokens: int | None, context_length: int | None, kv_tokens: int
) -> str | None:
    """Why SGLang refuses this request on arrival, or None.

    ``tokenizer_manager.py: TokenizerManager._validate_one_request``: the prompt must be shorter
    than the context length, and prompt + ``max_new_tokens`` (when the request sets it) at most
    the context length. ``managers/utils.py: validate_input_length`` (called from
    ``Scheduler.handle_generate_request``): the prompt must be shorter than
    ``max_req_input_len``, which also bounds it by the KV pool (``tp_worker.get_worker_info``).
    ``context_length`` None: not checked (test servers without a model).
    """
    if context_length is None:
        return None
    if prompt_len >= context_length:
        return reason(
            CONTEXT_EXCEEDED,
            f"the prompt has {prompt_len} tokens, the model's context length is {context_length}",
        )
    if max_new_tokens is not None and prompt_len + max_new_tokens > context_length:
        return reason(
            TOTAL_EXCEEDED,
            f"{prompt_len} prompt tokens + {max_new_tokens} max_new_tokens = "
            f"{prompt_len + max_new_tokens} > {context_length}",
        )
    limit = min(context_length, kv_tokens) - _INPUT_MARGIN
    if prompt_len >= limit:
        return reason(
            INPUT_TOO_LONG,
            f"the prompt has {prompt_len} tokens, the limit is {limit} "
            f"(min(context length {context_length}, KV pool {kv_tokens} tokens) - {_INPUT_MARGIN})",
        )
    return None


def unservable_reason(req: Any, cache: Any, pools: Any, max_prefill_tokens: int) -> str:
    """Why ``req`` (the head of the queue) can never be admitted while nothing else runs.

    The first of the admission conditions (``admission.PrefillAdder``) that fails on an idle
    server, with the request's own numbers.
    """
    return (
        _limit_reason(cache, pools, max_prefill_tokens)
        or _full_reason(req, cache, pools)
        or _swa_reason(req, cache, pools)
        or _room_reason(req, cache)
    )


def _limit_reason(cache: Any, pools: Any, max_prefill_tokens: int) -> str | None:
    """A scheduler limit that admits nothing at all."""
    p = pools.page_size
    full_cap, swa_cap = cache.capacity()
    if max_prefill_tokens <= 0:
        return reason(NO_PREFILL_BUDGET, f"--max-prefill-tokens is {max_prefill_tokens}")
    if pools.max_running_requests < 1:
        return reason(NO_RUNNING_SLOT, f"--max-running-requests is {pools.max_running_requests}")
    if p >= full_cap or (pools.hybrid and p >= swa_cap):
        pools_text = f"FULL {full_cap} tokens" + (f", SWA {swa_cap} tokens" if pools.hybrid else "")
        return reason(PAGE_OVER_POOL, f"page size {p}, pools: {pools_text}")
    if 0 < pools.chunked_prefill_size < p:
        return reason(CHUNK_BELOW_PAGE, f"--chunked-prefill-size {pools.chunked_prefill_size}, page {p}")
    return None


def _locked(req: Any, cache: Any) -> tuple[int, int]:
    """The request's matched prefix that admission keeps locked (none if never matched)."""
    return (0, 0) if req.last_node is None else cache.lock_footprint(req)


def _max_new(req: Any) -> int:
    return min(max(req.max_new_tokens - req.num_outputs, 0), CLIP_MAX_NEW_TOKENS)


def _full_reason(req: Any, cache: Any, pools: Any) -> str | None:
    """``add_one_req``'s FULL check on an empty server: the matched prefix stays locked, so it
    counts against the pool too."""
    p, full_cap = pools.page_size, cache.capacity()[0]
    extend, max_new = req.fill_len - req.prefix_len, _max_new(req)
    locked = _locked(req, cache)[0]
    need = locked + extend + max_new + p
    if need < full_cap:
        return None
    prefix = f"{locked} locked prefix tokens + " if locked else ""
    return reason(
        FULL_TOO_SMALL,
        f"{prefix}{extend} new prompt tokens + {max_new} reserved output tokens + one page ({p}) = "
        f"{need} tokens; the FULL pool holds {full_cap}",
    )


def _swa_reason(req: Any, cache: Any, pools: Any) -> str | None:
    """``SWAPrefillBudget`` on an empty server: the request's SWA footprint (bounded by a smaller
    chunk when chunked prefill is on) must fit the SWA pool."""
    if not pools.hybrid:
        return None
    p, w, swa_cap = pools.page_size, pools.window, cache.capacity()[1]
    chunk = pools.chunked_prefill_size if pools.chunked_prefill_size > 0 else None
    extend, max_new = req.fill_len - req.prefix_len, _max_new(req)
    rem = swa_cap - _locked(req, cache)[1]
    need = estimate_swa_tokens(-(-extend // p) * p, max_new, chunk, w, p)
    if need < rem:
        return None
    if chunk is not None and (rem - estimate_swa_tokens(0, max_new, None, w, p)) // p > 0:
        return None  # a smaller chunk fits
    return reason(
        SWA_TOO_SMALL,
        f"it needs {need} SWA tokens (window {w}, {max_new} reserved output tokens); "
        f"the SWA pool has {rem} tokens for it",
    )


def _room_reason(req: Any, cache: Any) -> str:
    full_room, swa_room = cache.room_tokens()
    return reason(
        NOT_ADMITTED,
        f"{req.fill_len - req.prefix_len} new prompt tokens, {_max_new(req)} reserved output "
        f"tokens; room: FULL {full_room}, SWA {swa_room} tokens",
    )


def out_of_memory_reason(detail: str) -> str:
    return reason(OUT_OF_MEMORY, detail)


def failure_report(columns: dict[str, Any]) -> dict[str, Any]:
    """``rejected``, ``failed`` and ``failure_reasons`` from the requests columns (heartbeats
    aside): the counts by outcome and, per outcome, by reason kind."""
    real = ~np.asarray(columns["heartbeat"], dtype=bool)
    aborted = np.asarray(columns["aborted"], dtype=bool) & real
    rejected = np.asarray(columns["rejected"], dtype=bool) & real
    reasons = columns["abort_reason"]
    by: dict[str, dict[str, int]] = {"aborted": {}, "rejected": {}}
    for name, mask in (("aborted", aborted), ("rejected", rejected)):
        for i in np.flatnonzero(mask):
            kind = reason_kind(reasons[i]) or "unknown"
            by[name][kind] = by[name].get(kind, 0) + 1
    n_rej = int(rejected.sum())
    truncated = columns.get("truncated")
    return {
        "rejected": n_rej,
        # cut to fit (--allow-auto-truncate): served, so not among the failures
        "truncated": 0 if truncated is None else int((np.asarray(truncated, dtype=bool) & real).sum()),
        "failed": int(aborted.sum()) + n_rej,
        "failure_reasons": by,
        "failure_examples": _examples(reasons, aborted | rejected),
    }


def _examples(reasons: list[str], mask: np.ndarray) -> dict[str, str]:
    """The first full reason text of each kind, for the report."""
    out: dict[str, str] = {}
    for i in np.flatnonzero(mask):
        out.setdefault(reason_kind(reasons[i]) or "unknown", reasons[i])
    return out
