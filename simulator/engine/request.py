"""One request as the serving simulator sees it."""

from __future__ import annotations

import math

import numpy as np


class SimRequest:
    """A request: its content as page ids and lengths, and what the server did with it.

    ``pages`` are the keys of the full pages of prompt ++ output (``Trace.page_keys``: equal
    exactly for equal pages).
    Times are simulated seconds. ``arrival_s`` is when the client sends it (bench_multiturn's
    POST); ``first_token_s`` when the first output token is produced (end of its last prefill
    chunk); ``finish_s`` when the last output token is produced.
    ``ignore_eos``/``max_new_tokens`` are what SGLang's admission sees: bench_multiturn sends
    ignore_eos with max_new_tokens equal to the output length; a production request stops at
    EOS before its max_new_tokens (None: the output length). ``eos_stated``: the trace records
    this request's ignore_eos, so no flag overrides it.

    A plain class with an explicit ``__init__`` (the keywords and defaults of the former
    dataclass): request.pxd makes it a ``cdef class`` in the compiled build, so building one
    per trace row runs no interpreted code. Equality is identity.
    """

    __slots__ = (
        "rid",
        "pages",
        "prompt_len",
        "output_len",
        "arrival_s",
        "session",
        "round",
        "heartbeat",
        "index",
        "ignore_eos",
        "max_new_tokens",
        "eos_stated",
        "first_token_s",
        "finish_s",
        "cached_tokens",
        "retractions",
        "aborted",
        "rejected",
        "truncated",
        "abort_reason",
    )

    def __init__(
        self,
        rid: str,
        pages: np.ndarray,
        prompt_len: int,
        output_len: int,
        arrival_s: float = math.nan,
        session: str | None = None,
        round: int = 0,  # noqa: A002 - the trace's column name
        heartbeat: bool = False,
        index: int = -1,
        ignore_eos: bool = True,
        max_new_tokens: int | None = None,
        eos_stated: bool = False,
        first_token_s: float = math.nan,
        finish_s: float = math.nan,
        cached_tokens: int = 0,
        retractions: int = 0,
        aborted: bool = False,
        rejected: bool = False,
        truncated: bool = False,
        abort_reason: str = "",
    ) -> None:
        self.rid = rid
        self.pages = pages
        self.prompt_len = prompt_len
        self.output_len = output_len
        self.arrival_s = arrival_s
        self.session = session
        self.round = round
        self.heartbeat = heartbeat
        self.index = index  # row in the trace
        self.ignore_eos = ignore_eos
        self.max_new_tokens = max_new_tokens
        self.eos_stated = eos_stated
        # --- filled by the server ---------------------------------------------------------
        self.first_token_s = first_token_s
        self.finish_s = finish_s
        self.cached_tokens = cached_tokens
        self.retractions = retractions
        self.aborted = aborted
        self.rejected = rejected  # refused on arrival (engine/failures.py), never queued
        self.truncated = truncated  # cut to fit (--allow-auto-truncate; lengths above are the cut ones)
        self.abort_reason = abort_reason

    def __repr__(self) -> str:
        return (
            f"SimRequest(rid={self.rid!r}, prompt_len={self.prompt_len}, output_len={self.output_len}, "
            f"arrival_s={self.arrival_s}, finish_s={self.finish_s})"
        )

    @property
    def ttft(self) -> float:
        return self.first_token_s - self.arrival_s

    @property
    def latency(self) -> float:
        return self.finish_s - self.arrival_s
