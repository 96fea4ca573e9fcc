"""One request as the serving simulator sees it."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(eq=False, slots=True)
class SimRequest:
    """A request: its content as page ids and lengths, and what the server did with it.

    ``pages`` are the keys of the full pages of prompt ++ output (``Trace.page_keys``: equal
    exactly for equal pages).
    Times are simulated seconds. ``arrival_s`` is when the client sends it (bench_multiturn's
    POST); ``first_token_s`` when the first output token is produced (end of its last prefill
    chunk); ``finish_s`` when the last output token is produced.
    """

    rid: str
    pages: np.ndarray
    prompt_len: int
    output_len: int
    arrival_s: float = math.nan
    session: str | None = None
    round: int = 0
    heartbeat: bool = False
    index: int = -1  # row in the trace
    # What SGLang's admission sees: bench_multiturn sends ignore_eos with max_new_tokens equal to
    # the output length; a production request stops at EOS before its max_new_tokens.
    ignore_eos: bool = True
    max_new_tokens: int | None = None  # None: the output length
    eos_stated: bool = False  # the trace records this request's ignore_eos: no flag overrides it
    # --- filled by the server -------------------------------------------------------------
    first_token_s: float = math.nan
    finish_s: float = math.nan
    cached_tokens: int = 0
    retractions: int = 0
    aborted: bool = False
    rejected: bool = False  # refused on arrival (engine/failures.py), never queued
    truncated: bool = False  # cut to fit (--allow-auto-truncate; lengths above are the cut ones)
    abort_reason: str = ""

    @property
    def ttft(self) -> float:
        return self.first_token_s - self.arrival_s

    @property
    def latency(self) -> float:
        return self.finish_s - self.arrival_s
