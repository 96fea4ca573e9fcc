"""What happens to a request as it arrives, before it queues: the sampling parameters a client
sends (``max_new_tokens``, ``ignore_eos``), auto-truncation, and decoding past the EOS.

Split from :mod:`simulator.engine.server` so that the scheduler loop stays one screenful of
concerns; the server mixes :class:`IntakeMixin` in.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from simulator.engine.request import SimRequest
from simulator.engine.server_state import ServerReq


def client_sampling(sim: SimRequest, flag_ignore_eos: bool | None, mode: Any) -> tuple[bool, int, bool]:
    """(ignore_eos, max_new_tokens, stated) of one request as its client sends them.

    ``--ignore-eos``/``--no-ignore-eos`` is the default of requests that do not send their own;
    ``mode`` is ``--max-new-tokens``: ``"trace"`` (the trace's own value, or its output length),
    ``"context"`` (none sent: ``init_req_max_new_tokens`` takes what the context leaves) or a
    number. ``stated``: the sampling params carry the value (bench_multiturn sends its output
    length with ignore_eos; a trace's own column).
    """
    ignore_eos = sim.ignore_eos if flag_ignore_eos is None or sim.eos_stated else flag_ignore_eos
    if mode == "trace":
        stated = sim.ignore_eos or sim.max_new_tokens is not None
        return ignore_eos, sim.max_new_tokens or sim.output_len, stated
    if mode == "context":
        return ignore_eos, 1 << 30, False
    return ignore_eos, mode, True


class IntakeMixin:
    """Request intake of :class:`~simulator.engine.server.ServerModel` (uses its ``page_size``,
    ``pools`` and ``_fresh_key``)."""

    def _run_past_eos(self, req: ServerReq) -> None:
        """``ignore_eos`` with ``max_new_tokens`` above the output: SGLang decodes on to
        ``max_new_tokens`` (``Req.check_finished`` ignores the EOS). The extra tokens are the
        request's own, so their pages get fresh keys; the client receives them all."""
        p = self.page_size
        pages = np.asarray(req.pages, dtype=np.int64)
        extra = (req.prompt_len + req.max_new_tokens) // p - len(pages)
        req.pages = np.concatenate([pages, np.arange(self._fresh_key, self._fresh_key - extra, -1)])
        self._fresh_key -= extra
        req.output_len = req.sim.output_len = req.max_new_tokens

    def _truncate(self, req: ServerReq, max_new: int | None) -> None:
        """Cut ``req`` to fit as SGLang does (:mod:`simulator.engine.truncation`)."""
        from simulator.engine.truncation import auto_truncate, truncated_pages  # loads on use (issue 14)

        cut = auto_truncate(
            req.prompt_len, req.output_len, max_new, self.pools.context_length, self.pools.full_tokens
        )
        req.pages = truncated_pages(req.pages, cut, self.page_size, self._fresh_key)
        self._fresh_key -= len(req.pages)
        req.prompt_len, req.output_len = cut.prompt_len, cut.output_len
        req.max_new_tokens = cut.max_new_tokens
        sim = req.sim
        sim.prompt_len, sim.output_len, sim.truncated = cut.prompt_len, cut.output_len, True
