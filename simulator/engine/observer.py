"""What the server model reports while it runs (implemented by ``metrics.Recorder``).

The server calls these hooks; it never reads anything back, so data flows one way.
Token counts follow SGLang's log definitions (``pool_stats_observer._get_swa_token_info``):
``#full token = full_capacity - (full_available + full_evictable)``, same for SWA.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.engine.decode_jump import DecodeJump
from simulator.engine.request import SimRequest


@dataclass(frozen=True)
class PoolCapacity:
    full_tokens: int
    swa_tokens: int


class ServerObserver:
    """No-op base: subclass and override what you need."""

    def on_start(self, capacity: PoolCapacity, config: dict) -> None:
        """Before the first event; ``config`` is the resolved server configuration."""

    def on_arrival(self, req: SimRequest) -> None:
        """``req`` reached the server's waiting queue at ``req.arrival_s``."""

    def on_prefill_batch(
        self,
        t_start: float,
        t_end: float,
        reqs: list[SimRequest],
        extend_tokens: int,
        cached_tokens: int,
        full_used: int,
        swa_used: int,
        running: int,
        queue: int,
    ) -> None:
        """One prefill forward: ``reqs`` admitted (or continued as the chunked request)."""

    def on_decode_steps(
        self,
        step_end_s: np.ndarray,
        batch: list[SimRequest],
        full_used: np.ndarray,
        swa_used: np.ndarray,
        queue: int,
    ) -> None:
        """``len(step_end_s)`` consecutive decode forwards of the same batch.

        ``full_used[i]`` / ``swa_used[i]`` are ``#full token`` / ``#swa token`` as SGLang's
        decode log would print them at step i (read when step i is scheduled). The server may
        report many steps at once when it fast-forwards. The server hands the arrays over and
        never writes to them again, so an observer may keep them without copying.
        """

    def on_decode_jump(self, jump: DecodeJump) -> None:
        """A fast-forwarded jump, in closed form (its finishes were reported before it).

        The default hands it on as :meth:`on_decode_steps` calls, one per batch segment; an
        observer may instead keep the record and build its arrays later
        (:func:`~simulator.engine.decode_jump.materialize`).
        """
        for ends, batch, full, swa, queue in jump.step_calls():
            self.on_decode_steps(ends, batch, full, swa, queue)

    def on_first_token(self, req: SimRequest) -> None:
        """``req.first_token_s`` was just set."""

    def on_finish(self, req: SimRequest) -> None:
        """``req`` finished (or was aborted: ``req.aborted``)."""

    def on_retract(self, t: float, reqs: list[SimRequest], ratio_before: float, ratio_after: float) -> None:
        """Decode retraction: ``reqs`` went back to the waiting queue."""

    def on_hicache(self, report) -> None:
        """HiCache runs only, before :meth:`on_end`: the run's
        :class:`~simulator.engine.hicache_report.HiCacheReport`."""

    def on_end(self, t: float, counters: dict) -> None:
        """After the last event; ``counters`` holds tree/eviction totals."""
