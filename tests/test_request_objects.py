"""The request objects keep the dataclass interface they had when they became ``cdef class``es
in the compiled build (request_kv.pxd, server_state.pxd, request.pxd): the same keywords and
defaults, every attribute readable and writable from Python, identity equality, no attribute
outside the declared ones, and pickling. Runs on whichever build this process loads;
tests/test_compiled_engine.py runs the simulations on both."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest

from simulator.engine.admission import PrefillBatch
from simulator.engine.request import SimRequest
from simulator.engine.server_state import NewTokenRatio, ServerReq
from simulator.request_kv import REQ_KV_FIELDS, LockReceipt, ReqKV


def test_server_req_takes_every_req_kv_keyword_and_keeps_the_defaults():
    sim = SimRequest("a", np.arange(4, dtype=np.int64), 100, 20)
    req = ServerReq(rid="a", pages=sim.pages, prompt_len=100, output_len=20, sim=sim, kv_allocated_len=64)
    assert isinstance(req, ReqKV) and req.sim is sim and req.kv_allocated_len == 64
    assert (req.ignore_eos, req.max_new_tokens, req.gen, req.stashed, req.lock) == (True, 0, 0, None, None)
    assert req.swa_branching_seqlen is None and req.holds_kv is False and req.seqlen == 100
    for i, name in enumerate(REQ_KV_FIELDS[4:]):  # each writable, and read back as written
        value = None if name in ("last_node", "lock", "kv_pages", "best_match_node") else 7 + i
        if name in ("retracted_stain", "holds_kv"):
            value = True
        setattr(req, name, value)
        assert getattr(req, name) == value, name
    with pytest.raises(AttributeError):
        req.not_a_field = 1


def test_requests_compare_by_identity_and_pickle():
    a = ReqKV(rid="r", pages=np.zeros(0, np.int64), prompt_len=10, output_len=2, num_outputs=1)
    b = ReqKV(rid="r", pages=np.zeros(0, np.int64), prompt_len=10, output_len=2, num_outputs=1)
    assert a != b and a == a and len({a, b}) == 2
    a.lock = LockReceipt("node", 5)
    back = pickle.loads(pickle.dumps(a))
    assert (back.rid, back.num_outputs, back.lock.node, back.lock.swa_uuid) == ("r", 1, "node", 5)
    assert back.private_full_tokens(16) == 0 and back.private_swa_tokens(16) == 0


def test_sim_request_keeps_its_defaults_and_the_types_it_was_given():
    sim = SimRequest("x", [1, 2], 10, 2, arrival_s=0)
    assert sim.arrival_s == 0 and type(sim.arrival_s) is int  # a time is stored as given
    assert math.isnan(sim.first_token_s) and sim.max_new_tokens is None and sim.index == -1
    sim.first_token_s, sim.finish_s = 1.5, 3.0
    assert (sim.ttft, sim.latency) == (1.5, 3.0)
    with pytest.raises(AttributeError):
        sim.not_a_field = 1


def test_new_token_ratio_and_an_empty_batch():
    ratio = NewTokenRatio(0.5)
    assert ratio.current == 0.35 and ratio.minimum == 0.35 * 0.14
    ratio.on_decode_steps(10**6)
    assert ratio.current == ratio.minimum
    ratio.reset()
    assert ratio.current == 0.35
    batch = PrefillBatch()
    assert (batch.reqs, batch.admitted, batch.chunked, batch.batch_is_full) == ([], [], None, False)
