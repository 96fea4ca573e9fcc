"""Hand-computed admission, chunking and retraction scenarios.

Each scenario is small enough to follow on paper; the comment beside it does the arithmetic.
The rules pinned are SGLang 0.5.23's (``python/sglang/srt/``): ``managers/schedule_policy.py``
``PrefillAdder`` (``add_one_req``, ``add_chunked_req``, ``budget_state``,
``_get_running_request_total_token_offset``) and ``SchedulePolicy.calc_priority`` /
``_determine_active_policy``; ``mem_cache/prefill_budget.py`` ``SWAPrefillBudget``
(``estimate_swa_kv_tokens``, ``_chunk_cap``); ``managers/schedule_batch.py``
``ScheduleBatch.retract_decode`` / ``_get_decode_retraction_order``.
Notation: p = page size, w = window, ceil16(x) = x rounded up to whole pages.
"""

from __future__ import annotations

import numpy as np
import pytest
import simpy
from controller_proxy import strict_controller  # noqa: F401
from test_engine_server import LinearCost

from policies.eviction_order import EVICTION_ORDERS
from policies.tombstone import TOMBSTONING
from simulator.engine.admission import PrefillAdder, calc_priority
from simulator.engine.config import SimConfig
from simulator.engine.observer import ServerObserver
from simulator.engine.request import SimRequest
from simulator.engine.server import ServerModel, ServerPools, ServerReq
from simulator.radix.cache import build_controller
from simulator.radix.protocol import StrictController

P = 16  # page size in every scenario


def _cache(full: int = 1024, swa: int = 1024, window: int = 64) -> StrictController:
    tomb = TOMBSTONING.create("unified")
    return StrictController(build_controller(tomb, full, swa, P, window, EVICTION_ORDERS.create("lru")))


def _req(rid: str, prompt: int, output: int, pages: list[int] | None = None, base: int = 0) -> ServerReq:
    """A request whose page keys are ``pages`` then fresh keys from ``base`` (unique content)."""
    n = (prompt + output) // P
    keys = list(pages or [])
    keys += [base + i for i in range(n - len(keys))]
    sim = SimRequest(rid, np.array(keys[:n], dtype=np.int64), prompt, output)
    return ServerReq(
        rid=rid, pages=sim.pages, prompt_len=prompt, output_len=output, sim=sim, max_new_tokens=output
    )


def _adder(cache, *, cps: int = 0, max_prefill: int = 16384, max_running: int = 8, running=(), ratio=0.7):
    return PrefillAdder(
        cache,
        max_running=max_running,
        chunked_prefill_size=cps,
        max_prefill_tokens=max_prefill,
        running=list(running),
        new_token_ratio=ratio,
    )


# ---------------------------------------------------------------------------- batches
def test_fcfs_batch_stops_at_the_first_request_that_does_not_fit():
    """FULL = SWA = 1024, w = 64, chunking off, nothing running (offsets 0).

    A (100 in, 50 out): 100 + 50 + p = 166 < 1024; SWA need = max(112 - 64, 0) + min(112 + 50, 64)
      + p = 128 < 1024 -> admitted; total offset += 112 + p + 50 = 178, current += 128, SWA += 128.
    B (200 in, 300 out): 516 < 1024 - 178 = 846; SWA 144 + 64 + 16 = 224 < 896 -> admitted;
      total 178 + 208 + 16 + 300 = 702, current 128 + 224 = 352, SWA 128 + 224 = 352.
    C (300 in, 400 out): 716 < 1024 - 702 = 322 fails -> NO_TOKEN, the round stops with C waiting.
    """
    cache = _cache()
    a, b, c = _req("A", 100, 50, base=0), _req("B", 200, 300, base=100), _req("C", 300, 400, base=200)
    adder = _adder(cache)
    batch = adder.add_waiting([a, b, c])
    assert [r.rid for r in batch.reqs] == ["A", "B"] and batch.admitted == batch.reqs
    assert batch.chunked is None and c.lock is None
    assert (a.extend_end, b.extend_end) == (100, 200)
    assert (adder.total_offset, adder.current_offset, adder.swa_offset) == (702, 352, 352)
    assert adder.rem_input == 16384 - 112 - 208


def test_running_decodes_reserve_room_and_max_running_caps_the_batch():
    """A running request (max_new 500, 100 out, not ignore_eos) at ratio 0.5 reserves
    min(500 - 100, 4096) * 0.5 = 200 tokens. A: 166 < 1024 - 200 -> admitted (offset 200 + 178).
    Then 1 admitted + 1 running = max_running 2: B is not considered."""
    cache = _cache()
    running = _req("R", 100, 500, base=900)
    running.ignore_eos, running.num_outputs = False, 100
    adder = _adder(cache, max_running=2, running=[running], ratio=0.5)
    assert adder.total_offset == 200
    batch = adder.add_waiting([_req("A", 100, 50, base=0), _req("B", 10, 10, base=100)])
    assert [r.rid for r in batch.reqs] == ["A"] and adder.total_offset == 378


def test_max_prefill_tokens_stops_a_second_whole_prompt():
    """max_prefill_tokens 300, chunking off: A takes ceil16(100) = 112, leaving 188; B's
    ceil16(200) = 208 >= 188 and the batch is not empty, so B waits (``add_one_req``)."""
    batch = _adder(_cache(), max_prefill=300).add_waiting([_req("A", 100, 50), _req("B", 200, 300, base=100)])
    assert [r.rid for r in batch.reqs] == ["A"]


# ---------------------------------------------------------------------------- chunks
def test_chunked_prefill_truncates_to_whole_pages_then_continues():
    """chunked_prefill_size 256, A: 600 in, 10 out, FULL = SWA = 1024, w = 64.

    Admission: 626 < 1024; SWA need = max(min(608, 256) - 64, 0) + min(618, 64) + p = 272 < 1024;
    ceil16(600) = 608 > 256 -> chunk of 256 // p * p = 256 tokens, A becomes the chunked request.
    Continuations (``add_chunked_req``): min(256, FULL room 768, SWA room - p) = 256 < 344 left ->
    256 (truncated); then 88 left <= 256 -> the last chunk, 88 tokens.
    """
    cache = _cache()
    a = _req("A", 600, 10)
    batch = _adder(cache, cps=256).add_waiting([a])
    assert batch.reqs == [a] and batch.chunked is a and a.extend_end == 256
    chunks = [a.extend_end - a.prefix_len]
    while True:
        cache.alloc_for_extend([a])  # the chunk's forward, then stash_chunked_request
        cache.free_group_begin()
        cache.checkpoint(a, a.extend_end, finished=False)
        cache.free_group_end()
        a.prefix_len = a.extend_end
        adder = _adder(cache, cps=256)
        still = adder.add_chunked_req(a)
        chunks.append(a.extend_end - a.prefix_len)
        if still is None:
            break
    assert chunks == [256, 256, 88]
    assert cache.room_tokens()[0] == 1024 - 512  # the two chunks so far sit locked in the tree


def test_chunk_cap_bounds_a_prompt_whose_swa_need_exceeds_the_pool():
    """FULL 4096, SWA 256, w = 128, chunked_prefill_size 1024; A: 1000 in, 10 out.

    SWA need with the 1024 chunk = max(1008 - 128, 0) + min(1018, 128) + p = 1024 >= 256 (whole
    pool) -> ``_chunk_cap``: headroom = min(0 + 10, 128) + p = 26, cap = (256 - 26) // p * p = 224;
    the chunk is 224 tokens and reserves SWA max(224 - 128, 0) + min(224, 128) + p = 240.
    Without chunking the same request never fits (NO_TOKEN).
    """
    a = _req("A", 1000, 10)
    adder = _adder(_cache(full=4096, swa=256, window=128), cps=1024)
    batch = adder.add_waiting([a])
    assert batch.chunked is a and a.extend_end == 224 and adder.swa_offset == 240
    b = _req("B", 1000, 10)
    assert _adder(_cache(full=4096, swa=256, window=128), cps=0).add_waiting([b]).reqs == []


# ---------------------------------------------------------------------------- order
def _cached_prefix_tree():
    """A tree holding P's first 64 tokens (4 pages, keys 0..3), and three waiting requests:
    A shares nothing, B shares 2 pages, C all 4 (match limit (100 - 1) // 16 = 6 pages)."""
    cache = _cache()
    first = _req("P", 64, 16, base=0)
    cache.match(first)
    first.extend_end = 64
    cache.lock_prefix(first)
    cache.alloc_for_extend([first])
    cache.release(first)
    a = _req("A", 100, 10, base=1000)
    b = _req("B", 100, 10, pages=[0, 1], base=2000)
    c = _req("C", 100, 10, pages=[0, 1, 2, 3], base=3000)
    return cache, [a, b, c]


def test_lpm_orders_by_longest_match_and_fcfs_keeps_arrival_order():
    cache, waiting = _cached_prefix_tree()
    fcfs = list(waiting)
    calc_priority(fcfs, "fcfs", cache)
    assert [r.rid for r in fcfs] == ["A", "B", "C"]
    calc_priority(waiting, "lpm", cache)
    assert [r.rid for r in waiting] == ["C", "B", "A"]  # matched 64, 32, 0 (re-matched at admission)


@pytest.mark.parametrize("queue,sorted_", [(128, True), (129, False)])
def test_lpm_falls_back_to_fcfs_above_128_waiting(queue, sorted_):
    """``_determine_active_policy``: more than 128 waiting turns LPM into FCFS (no matching)."""
    cache, (a, b, c) = _cached_prefix_tree()
    fillers = [_req(f"F{i}", 32, 16, base=10_000 + 10 * i) for i in range(queue - 3)]
    waiting = [a, b, *fillers, c]
    deprioritized = calc_priority(waiting, "lpm", cache)
    head = [r.rid for r in waiting[:2]]
    assert head == (["C", "B"] if sorted_ else ["A", "B"])
    assert (deprioritized is not None) is sorted_  # None: LPM did not run


# ---------------------------------------------------------------------------- retraction
def _server_with_running(pages: int, spec: list[tuple[str, int, int]]) -> ServerModel:
    """A server whose pools (``pages`` pages each, w = 4096: no window frees) are exactly full of
    running requests ``(rid, prompt, outputs so far)``: each holds prompt + outputs - 1 slots."""
    pools = ServerPools(P, pages * P, pages * P, 4096, 8, 0)
    srv = ServerModel(simpy.Environment(), SimConfig(swa_eviction="none"), pools, LinearCost())
    for i, (rid, prompt, outs) in enumerate(spec):
        r = _req(rid, prompt, 100, base=1000 * i)
        r.num_outputs = outs
        srv.cache.match(r)
        r.extend_end = prompt + outs - 1
        srv.cache.lock_prefix(r)
        srv.cache.alloc_for_extend([r])
        srv.running.append(r)
    assert srv.cache.free_pages() == (0, 0)
    return srv


def test_retraction_takes_fewest_outputs_first_until_the_batch_fits():
    """13 pages, all taken: a (60 in, 5 out: 64 slots, 4 pages), b (50, 15: 4 pages), c (55, 10:
    4 pages), d (14, 3: 16 slots, 1 page). Every next token opens a page: 4 pages needed, 0 free.
    Keep-order (outputs, -input) descending: b, c, a, d; pop d (1 page back: 1 free < 3 needed),
    then a (5 free >= 2 needed). New ratio (decoded 25 + 20 * 2 running) / (max_new 200 + 1)."""
    srv = _server_with_running(13, [("a", 60, 5), ("b", 50, 15), ("c", 55, 10), ("d", 14, 3)])
    srv._retract()
    assert [r.rid for r in srv.waiting] == ["d", "a"] and [r.rid for r in srv.running] == ["b", "c"]
    assert srv.retractions == 2 and all(r.retractions == 1 for r in srv.waiting)
    assert srv.ratio.current == pytest.approx(65 / 201)


def test_retraction_breaks_ties_by_the_longer_input():
    """Equal outputs (5): a has the longer input (60 vs 14) and goes first. d holds 18 slots
    (2 pages) and opens none next step; a's 4 pages back cover b's and c's 2."""
    srv = _server_with_running(14, [("a", 60, 5), ("b", 50, 15), ("c", 55, 10), ("d", 14, 5)])
    srv._retract()
    assert [r.rid for r in srv.waiting] == ["a"] and [r.rid for r in srv.running] == ["b", "c", "d"]


# ---------------------------------------------------------------------------- aborts
class _Retractions(ServerObserver):
    def __init__(self) -> None:
        self.count: dict[str, int] = {}
        self.finished: list[SimRequest] = []

    def on_retract(self, t, reqs, ratio_before, ratio_after) -> None:
        for r in reqs:
            self.count[r.rid] = self.count.get(r.rid, 0) + 1

    def on_finish(self, req) -> None:
        self.finished.append(req)


def _serve(
    pools: ServerPools, cfg: SimConfig, reqs: list[tuple[int, int]]
) -> tuple[list[SimRequest], _Retractions]:
    env, obs = simpy.Environment(), _Retractions()
    srv = ServerModel(env, cfg, pools, LinearCost(), obs)
    sims = []
    for i, (prompt, out) in enumerate(reqs):
        sim = SimRequest(
            f"r{i}",
            np.arange((prompt + out) // pools.page_size, dtype=np.int64) + 1000 * (i + 1),
            prompt,
            out,
        )
        sims.append(sim)
        srv.submit(sim)
    env.run()
    return sims, obs


def test_a_prompt_that_can_never_fit_is_aborted_and_the_queue_moves_on():
    """FULL 1024, SWA 256, w = 128, chunking off: r0's max_new_tokens is clipped at arrival to
    1024 - ceil16(1000) - 16 - 1 < 0 -> 0 (``init_req_max_new_tokens``), so the FULL check passes,
    but its unchunked prompt needs 1024 SWA tokens, over the pool: with nothing running the head is
    aborted as unservable, with that arithmetic as its reason; r1 (100 in) runs."""
    pools = ServerPools(P, 1024, 256, 128, 8, 0)
    (r0, r1), _ = _serve(pools, SimConfig(), [(1000, 10), (100, 10)])
    assert r0.aborted and r0.abort_reason == (
        "request does not fit the SWA pool: it needs 1024 SWA tokens (window 128, 0 reserved output "
        "tokens); the SWA pool has 256 tokens for it"
    )
    assert not r1.aborted and r1.finish_s == r1.finish_s


def test_a_prompt_over_the_swa_pool_is_aborted_with_the_swa_reason():
    """FULL 10,000, SWA 256, w = 128, chunking off: r0 fits the FULL pool, but its SWA peak
    (1008 - 128 + 128 + 16 = 1024 tokens) exceeds the SWA pool with no chunk to cap it."""
    pools = ServerPools(P, 10_000, 256, 128, 8, 0)
    (r0, r1), _ = _serve(pools, SimConfig(), [(1000, 10), (100, 10)])
    assert r0.aborted and r0.abort_reason == (
        "request does not fit the SWA pool: it needs 1024 SWA tokens (window 128, 10 reserved "
        "output tokens); the SWA pool has 256 tokens for it"
    )
    assert not r1.aborted and r1.finish_s == r1.finish_s


def test_an_aborted_request_reports_its_retractions():
    """Two requests whose SWA outgrows a 64-token pool (page 1, w = 8, decode-time SWA eviction
    off): decode runs short, r1 is retracted (equal outputs and inputs: the later one); r0, alone,
    then outgrows the pool and is aborted, and so is r1 after readmission. Every completion passes
    through one path, so r1's record carries its retraction (the abort path used to drop it)."""
    pools = ServerPools(1, 10_000, 64, 8, 8, 512)
    sims, obs = _serve(pools, SimConfig(swa_eviction="none"), [(10, 100), (10, 100)])
    assert all(r.aborted for r in sims) and obs.count == {"r1": 1}
    assert [r.retractions for r in sims] == [0, 1]
    assert sorted(r.rid for r in obs.finished) == ["r0", "r1"]
