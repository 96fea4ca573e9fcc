"""The scheduler's positional constructors (``server_state.server_req`` per arrival,
``admission.new_prefill_adder`` per scheduling round) build the same objects as the classes'
keyword constructors: every field, on whichever build loads."""

from __future__ import annotations

import numpy as np

from simulator.engine.admission import PrefillAdder, new_prefill_adder
from simulator.engine.request import SimRequest
from simulator.engine.server_state import ServerReq, server_req
from simulator.request_kv import REQ_KV_FIELDS

ADDER_FIELDS = (
    "cache",
    "page_size",
    "window",
    "max_running",
    "num_running",
    "chunked_prefill_size",
    "rem_chunk",
    "rem_input",
    "total_offset",
    "current_offset",
    "swa_offset",
    "batch",
    "swa_events",
)
SERVER_FIELDS = ("sim", "done", "ignore_eos", "max_new_tokens", "retractions", "gen", "stashed")


def test_server_req_equals_the_keyword_constructor():
    sim = SimRequest("r7", np.arange(5, dtype=np.int64), 300, 40, arrival_s=1.5)
    fast = server_req(sim)
    slow = ServerReq(
        rid=sim.rid, pages=sim.pages, prompt_len=sim.prompt_len, output_len=sim.output_len, sim=sim
    )
    assert type(fast) is ServerReq
    for name in REQ_KV_FIELDS + SERVER_FIELDS:
        a, b = getattr(fast, name), getattr(slow, name)
        assert type(a) is type(b) and (a is b or a == b), name
    assert fast.pages is sim.pages and fast.sim is sim


def test_the_field_lists_cover_the_classes():
    for cls, fields in ((ServerReq, SERVER_FIELDS), (PrefillAdder, ADDER_FIELDS)):
        slots = getattr(cls, "__slots__", None)  # the pure-Python class (a cdef class has none)
        if isinstance(slots, tuple):
            assert set(slots) == set(fields)


class _Cache:
    """What the adder reads of the cache at construction."""

    page_size = 16
    window = 128


def test_new_prefill_adder_equals_the_keyword_constructor():
    sim = SimRequest("r", np.arange(5, dtype=np.int64), 300, 40)
    running = [server_req(sim)]
    running[0].max_new_tokens, running[0].num_outputs, running[0].ignore_eos = 40, 3, False
    cache = _Cache()
    for chunk in (0, 512):
        args = dict(max_running=8, chunked_prefill_size=chunk, max_prefill_tokens=16384)
        slow = PrefillAdder(cache, **args, running=running, new_token_ratio=0.7)
        fast = new_prefill_adder(cache, 8, chunk, 16384, running, 0.7)
        assert type(fast) is PrefillAdder
        for name in ADDER_FIELDS:
            a, b = getattr(fast, name), getattr(slow, name)
            if name == "batch":
                a, b = (
                    (a.reqs, a.admitted, a.chunked, a.batch_is_full),
                    (b.reqs, b.admitted, b.chunked, b.batch_is_full),
                )
            assert type(a) is type(b) and (a is b or a == b), name
