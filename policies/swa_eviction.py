"""Decode-time SWA eviction policies: when a decoding request frees SWA behind its window.

SGLang runs this in ``ScheduleBatch.maybe_evict_swa`` before every decode allocation
(managers/schedule_batch.py). Each policy reproduces one version's trigger and freeing rule.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from policies.registry import Registry
from simulator.swa_window import free_out_of_window_0523, free_out_of_window_legacy

SWA_EVICTION: Registry = Registry("SWA eviction")

SWA_EVICTION_INTERVAL = 128
"""``SGLANG_SWA_EVICTION_INTERVAL``'s default (srt/environ.py), the one definition kvplan uses."""


class DecodeContext:
    """What a policy may read at one decode step of one request. A plain class, not a
    dataclass: the compiled build makes it a typed ``cdef class`` (swa_eviction.pxd), and a
    jump builds one per replayed batch."""

    __slots__ = ("window", "page_size", "allocator", "forward_iter")

    def __init__(self, window: int, page_size: int, allocator: object, forward_iter: int) -> None:
        self.window, self.page_size = window, page_size
        self.allocator, self.forward_iter = allocator, forward_iter

    def __repr__(self) -> str:
        return (
            f"DecodeContext(window={self.window}, page_size={self.page_size}, "
            f"allocator={self.allocator!r}, forward_iter={self.forward_iter})"
        )


class SWAEvictionPolicy(ABC):
    """Protocol: ``on_decode(req, ctx) -> SWA tokens freed``; called before the step's alloc."""

    name = "base"

    @abstractmethod
    def on_decode(self, req, ctx: DecodeContext) -> int:
        """Free the request's out-of-window SWA if the policy triggers at this step."""

    def quiet_steps(self, req, ctx: DecodeContext) -> int:
        """How many upcoming decode steps (this one first) certainly do not trigger.

        Lets the simulator fast-forward decode arithmetically; 0 means "run this step".
        """
        return 0

    def run_steps(self, req, ctx: DecodeContext, steps: int) -> list[tuple[int, int]]:
        """Apply this policy over ``steps`` decode steps of ``req`` at once.

        Visits only the steps where the trigger fires (``quiet_steps`` jumps the rest) and
        returns ``(step, swa_tokens_freed)`` for each. The request's counters are advanced
        temporarily per visited step, exactly as the per-step loop would see them.
        """
        events: list[tuple[int, int]] = []
        outs0, idx0 = req.num_outputs, req.decode_batch_idx
        s = 0
        try:
            while s < steps:
                req.num_outputs, req.decode_batch_idx = outs0 + s, idx0 + s
                at = DecodeContext(ctx.window, ctx.page_size, ctx.allocator, ctx.forward_iter + s)
                k = self.quiet_steps(req, at)
                if k > 0:
                    s += k
                    continue
                freed = self.on_decode(req, at)
                events.append((s, freed))
                s += 1
        finally:
            req.num_outputs, req.decode_batch_idx = outs0, idx0
        return events

    def run_batch(self, reqs: list, ctx: DecodeContext, steps: list[int]) -> list[tuple[int, int]]:
        """:meth:`run_steps` of each request of a batch (request ``i`` runs ``steps[i]`` steps),
        all ``(step, freed)`` events in one list."""
        return [ev for req, n in zip(reqs, steps, strict=True) if n for ev in self.run_steps(req, ctx, n)]


@SWA_EVICTION.register("none", "keep a request's SWA until it finishes (before PR 17220)")
class NoDecodeEviction(SWAEvictionPolicy):
    name = "none"

    def on_decode(self, req, ctx: DecodeContext) -> int:
        return 0

    def quiet_steps(self, req, ctx: DecodeContext) -> int:
        return 1 << 62


@SWA_EVICTION.register("window", "PR 17220 as merged: every W decode steps free down to pre_len - W")
class WindowEviction(SWAEvictionPolicy):
    """0.5.9: trigger ``decode_batch_idx % W == 1``; keep W tokens (page-floored)."""

    name = "window"

    def on_decode(self, req, ctx: DecodeContext) -> int:
        if req.decode_batch_idx % ctx.window != 1:
            return 0
        return free_out_of_window_legacy(req, req.seqlen - 1, ctx.window, ctx.page_size, ctx.allocator)

    def quiet_steps(self, req, ctx: DecodeContext) -> int:
        return (1 - req.decode_batch_idx) % ctx.window


@SWA_EVICTION.register(
    "iteration", "SGLang 0.5.15: every `interval` forward iterations once decode_batch_idx >= 1"
)
class IterationEviction(SWAEvictionPolicy):
    """Batch-synchronous cadence: ``forward_iter % interval == 0``; keep max(W, page)."""

    name = "iteration"

    def __init__(self, interval: int = SWA_EVICTION_INTERVAL) -> None:
        self.interval = max(1, interval)

    def on_decode(self, req, ctx: DecodeContext) -> int:
        if ctx.forward_iter % self.interval != 0 or req.decode_batch_idx < 1:
            return 0
        margin = max(ctx.window, ctx.page_size)
        return free_out_of_window_legacy(req, req.seqlen - 1, margin, ctx.page_size, ctx.allocator)

    def quiet_steps(self, req, ctx: DecodeContext) -> int:
        # the step with forward_iter F + s triggers when (F + s) % interval == 0 (and idx >= 1)
        k = (-ctx.forward_iter) % self.interval
        if req.decode_batch_idx + k < 1:
            k += self.interval
        return k


@SWA_EVICTION.register(
    "interval", "SGLang 0.5.23 (default): free once `interval` tokens slid out of the window"
)
class IntervalEviction(SWAEvictionPolicy):
    """Per request: ``seqlen - 1 - W >= swa_evicted_seqlen + interval`` (``_swa_eviction_trigger``)."""

    name = "interval"

    def __init__(self, interval: int = SWA_EVICTION_INTERVAL) -> None:
        self.interval = max(1, interval)

    def on_decode(self, req, ctx: DecodeContext) -> int:
        if req.decode_batch_idx < 1:
            return 0
        if req.seqlen - 1 - ctx.window < req.swa_evicted_seqlen + self.interval:
            return 0
        return free_out_of_window_0523(
            req, req.seqlen - 1, ctx.window, ctx.page_size, ctx.allocator, eviction_interval=1
        )

    def quiet_steps(self, req, ctx: DecodeContext) -> int:
        # due when seqlen + s - 1 - W >= cursor + interval, and decode_batch_idx + s >= 1
        k = req.swa_evicted_seqlen + self.interval + ctx.window + 1 - req.seqlen
        return max(0, k, 1 - req.decode_batch_idx)

    def run_steps(self, req, ctx: DecodeContext, steps: int) -> list[tuple[int, int]]:
        """The generic loop in closed form: jump from one trigger step to the next
        (:func:`interval_run_steps`)."""
        events: list[tuple[int, int]] = []
        interval_run_steps(req, self.interval, ctx, steps, events)
        return events

    def run_batch(self, reqs: list, ctx: DecodeContext, steps: list[int]) -> list[tuple[int, int]]:
        """:meth:`run_steps` per request (:func:`interval_run_batch`)."""
        return interval_run_batch(reqs, self.interval, ctx, steps)


def interval_run_steps(req, interval: int, ctx: DecodeContext, steps: int, events: list) -> None:
    """:class:`IntervalEviction`'s trigger over ``steps`` decode steps of ``req``, from one
    trigger step to the next: appends ``(step, SWA tokens freed)`` to ``events``."""
    w, p, allocator = ctx.window, ctx.page_size, ctx.allocator
    seq0 = req.prompt_len + req.num_outputs  # seqlen
    s = max(0, 1 - req.decode_batch_idx)
    while True:
        s = max(s, req.swa_evicted_seqlen + interval + w + 1 - seq0)
        if s >= steps:
            return
        freed = free_out_of_window_0523(req, seq0 + s - 1, w, p, allocator, 1)
        events.append((s, freed))
        s += 1


def interval_run_batch(reqs: list, interval: int, ctx: DecodeContext, steps: list) -> list:
    """:func:`interval_run_steps` per request (request ``i`` runs ``steps[i]`` steps), all
    events in one list, skipping a request whose next trigger lies past its steps (most of
    them: a trigger comes once every ``interval`` tokens)."""
    if len(steps) != len(reqs):
        raise ValueError("run_batch: one step count per request")
    events: list[tuple[int, int]] = []
    due = interval + ctx.window + 1
    for i in range(len(reqs)):
        req = reqs[i]
        n = steps[i]
        first = req.swa_evicted_seqlen + due - (req.prompt_len + req.num_outputs)  # seqlen
        if max(first, 1 - req.decode_batch_idx) < n:
            interval_run_steps(req, interval, ctx, n, events)
    return events


def make_swa_eviction(name: str, *, interval: int = SWA_EVICTION_INTERVAL) -> SWAEvictionPolicy:
    """The registered SWA-eviction policy ``name``, given those of the run's policy parameters
    its constructor takes (``interval``: the iteration and interval policies). The one place
    that maps a configuration to policy arguments, so no caller special-cases policy names."""
    import inspect

    offered = {"interval": interval}
    takes = inspect.signature(SWA_EVICTION.factory(name)).parameters
    return SWA_EVICTION.create(name, **{k: v for k, v in offered.items() if k in takes})
