"""``--allow-auto-truncate``: a prompt too long for the server is cut to fit instead of refused.

SGLang 0.5.23 cuts in two places, in this order:

1. ``tokenizer_manager.py: TokenizerManager._validate_one_request``: a prompt of at least
   ``context_len`` tokens keeps its first ``context_len``; then, when the request states
   ``max_new_tokens`` and prompt + ``max_new_tokens`` exceeds ``context_len``, ``max_new_tokens``
   becomes ``max(0, context_len - prompt)``.
2. ``scheduler.py: Scheduler.handle_generate_request``: ``init_req_max_new_tokens`` bounds
   ``max_new_tokens`` (``1 << 30`` when unset) by ``max_req_len - prompt - 1``, then
   ``managers/utils.py: validate_input_length`` keeps the first ``max_req_input_len`` tokens of a
   prompt of at least that many (``tp_worker.get_worker_info``: ``max_req_len = min(context_len
   - 1, kv_capacity - 1)``, ``max_req_input_len = max_req_len - 5``).

A request whose ``max_new_tokens`` ends at 0 is prefill-only in SGLang (no output token);
kvplan serves it with one output token, which the prefill produces (the same KV: the last
output token's KV is never computed), so it reserves one token more at admission than SGLang.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.engine.failures import _INPUT_MARGIN

_UNSET_MAX_NEW = 1 << 30  # init_req_max_new_tokens: no max_new_tokens in the sampling params


@dataclass(frozen=True)
class Truncation:
    """A request's lengths after SGLang's cuts (``output_len``: the tokens it then produces)."""

    prompt_len: int
    output_len: int
    max_new_tokens: int


def auto_truncate(
    prompt_len: int, output_len: int, max_new_tokens: int | None, context_length: int, kv_tokens: int
) -> Truncation:
    """The lengths SGLang serves a request with under ``--allow-auto-truncate``.

    ``max_new_tokens``: what the request states (None: unset; it then stops at its own
    ``output_len``).
    """
    prompt = min(prompt_len, context_length)  # tokenizer: del input_ids[context_len:]
    max_new = max_new_tokens
    if max_new is not None and prompt + max_new > context_length:
        max_new = max(0, context_length - prompt)
    max_req_len = min(context_length - 1, kv_tokens - 1)
    # init_req_max_new_tokens runs before validate_input_length, on the tokenizer's prompt
    bound = max(0, min(_UNSET_MAX_NEW if max_new is None else max_new, max_req_len - prompt - 1))
    prompt = min(prompt, max_req_len - (_INPUT_MARGIN - 1))  # validate_input_length
    output = max(1, min(output_len, bound))  # prefill-only (0) served as one token
    # unset: kvplan's admission reads the request's own output length, as for every request
    return Truncation(prompt, output, output if max_new is None else max(1, bound))


def truncated_pages(pages, truncation: Truncation, page_size: int, fresh: int) -> np.ndarray:
    """Page keys of the truncated sequence: the prompt's whole pages keep their keys (a prefix of
    the original prompt), every later page (the cut prompt's tail and the outputs) gets a key
    of its own, ``fresh``, ``fresh - 1``, ... (negative: no trace key is negative)."""
    keep = truncation.prompt_len // page_size
    total = (truncation.prompt_len + truncation.output_len) // page_size
    head = np.asarray(pages[:keep], dtype=np.int64)
    tail = np.arange(fresh, fresh - (total - keep), -1, dtype=np.int64)
    return np.concatenate([head, tail])
