"""``server_state.server_req`` (the per-arrival constructor of the server's request) builds the
same object as ``ServerReq``'s keyword constructor: every field, on whichever build loads."""

from __future__ import annotations

import numpy as np

from simulator.engine.request import SimRequest
from simulator.engine.server_state import ServerReq, server_req
from simulator.request_kv import REQ_KV_FIELDS

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


def test_the_field_lists_cover_the_class():
    slots = getattr(ServerReq, "__slots__", None)  # the pure-Python class (a cdef class has none)
    if isinstance(slots, tuple):
        assert set(slots) == set(SERVER_FIELDS)
