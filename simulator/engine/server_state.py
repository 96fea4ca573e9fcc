"""The scheduler's own state types: a request inside the server, the pools it runs with, the
admission headroom ratio, and the scheduler constants SGLang defines in several places."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import simpy

from simulator.engine.request import SimRequest
from simulator.errors import KvplanError
from simulator.request_kv import ReqKV

CLIP_MAX_NEW_TOKENS = 4096  # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION
LPM_FALLBACK_QUEUE_LEN = 128  # schedule_policy: LPM -> FCFS above this many waiting requests
WAITING_PREFIX_REFRESH_INTERVAL = 32  # schedule_policy: passes between waiting-prefix refreshes
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14
NEW_TOKEN_RATIO_DECAY_STEPS = 600


def init_req_max_new_tokens(
    max_new_tokens: int, prompt_len: int, context_length: int | None, full_tokens: int, page_size: int
) -> int:
    """``Scheduler.init_req_max_new_tokens`` (managers/scheduler.py): clip at arrival to what the
    context leaves (``max_req_len - input - 1``, ``max_req_len = min(context - 1, pool - 1)`` as
    ``TpModelWorker.get_worker_info``) and to the empty-pool budget
    (``max_new_tokens_for_memory``, mem_cache/allocator/base.py)."""
    max_req_len = full_tokens - 1 if context_length is None else min(context_length - 1, full_tokens - 1)
    max_new = max(0, min(max_new_tokens, max_req_len - prompt_len - 1))
    paged_input = -(-prompt_len // page_size) * page_size
    return max(0, min(max_new, full_tokens - paged_input - page_size - 1))


class StuckSimulation(KvplanError):
    """The server stopped making progress; the message says what it was waiting for."""


class ServerReq(ReqKV):
    """A request inside the server: the cache's ``ReqKV`` plus scheduler state.

    A plain class (server_state.pxd makes it a ``cdef class`` deriving from the compiled
    ``ReqKV``): the four leading arguments and every ``ReqKV`` keyword are the cache's, the rest
    the scheduler's. Equality is identity.
    """

    __slots__ = ("sim", "done", "ignore_eos", "max_new_tokens", "retractions", "gen", "stashed")

    def __init__(
        self,
        rid: str,
        pages: np.ndarray,
        prompt_len: int,
        output_len: int,
        *,
        sim: SimRequest | None = None,
        done: simpy.Event | None = None,
        ignore_eos: bool = True,
        max_new_tokens: int = 0,
        retractions: int = 0,
        gen: int = 0,
        stashed: object = None,
        **kv: object,
    ) -> None:
        ReqKV.__init__(self, rid, pages, prompt_len, output_len, **kv)
        self.sim = sim
        self.done = done
        self.ignore_eos = ignore_eos
        self.max_new_tokens = max_new_tokens  # sampling_params.max_new_tokens (>= output_len)
        self.retractions = retractions
        self.gen = gen  # bumped at each retraction: in-flight results of an older generation are void
        self.stashed = stashed  # overlap mode: the launched batch whose chunk was last checkpointed


def server_req(sim: SimRequest) -> ServerReq:
    """``ServerReq(sim.rid, sim.pages, sim.prompt_len, sim.output_len, sim=sim)``, every other
    field at its default: one is built per submitted request, and this skips the keyword
    parsing of two ``__init__``s (tests/test_request_objects.py checks the two agree)."""
    req = ServerReq.__new__(ServerReq)
    req.rid = sim.rid
    req.pages = sim.pages
    req.prompt_len = sim.prompt_len
    req.output_len = sim.output_len
    req.kv_allocated_len = 0
    req.cache_protected_len = 0
    req.swa_evicted_seqlen = 0
    req.cache_inserted_len = 0
    req.prefix_len = 0
    req.cached_tokens = 0
    req.num_outputs = 0
    req.fill_len = 0
    req.extend_end = 0
    req.already_computed = 0
    req.retracted_stain = False
    req.decode_batch_idx = 0
    req.swa_branching_seqlen = None
    req.last_node = None
    req.lock = None
    req.holds_kv = False
    req.kv_pages = None
    req.best_match_node = None
    req.host_hit_length = 0
    req.swa_host_hit_length = 0
    req.host_loaded_length = 0
    req.sim = sim
    req.done = None
    req.ignore_eos = True
    req.max_new_tokens = 0
    req.retractions = 0
    req.gen = 0
    req.stashed = None
    return req


@dataclass(frozen=True)
class ServerPools:
    """Resolved pool geometry (from ``simulator.pool_sizing``) the server runs with."""

    page_size: int
    full_tokens: int
    swa_tokens: int
    window: int
    max_running_requests: int
    chunked_prefill_size: int
    hybrid: bool = True
    context_length: int | None = None  # the model's; None: prompts are not checked against it


class NewTokenRatio:
    """``scheduler_components/new_token_ratio_tracker.py``: admission headroom for decodes.
    A plain class (a ``cdef class`` with C doubles in the compiled build, server_state.pxd)."""

    __slots__ = ("conservativeness", "current", "minimum", "decay")

    def __init__(self, conservativeness: float = 1.0) -> None:
        self.conservativeness = conservativeness
        init = min(INIT_NEW_TOKEN_RATIO * conservativeness, 1.0)
        self.current = init
        self.minimum = init * MIN_NEW_TOKEN_RATIO_FACTOR
        self.decay = (init - self.minimum) / NEW_TOKEN_RATIO_DECAY_STEPS

    def reset(self) -> None:
        """``NewTokenRatioTracker.reset``: back to the initial ratio (an idle server)."""
        self.current = min(INIT_NEW_TOKEN_RATIO * self.conservativeness, 1.0)

    def on_decode_steps(self, steps: int) -> None:
        self.current = max(self.current - self.decay * steps, self.minimum)
