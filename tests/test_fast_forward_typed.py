"""The decode jump's typed loops (fast_forward.pxd, issue 14) give what the numpy code they
replaced gave, in the compiled build and in pure Python alike; the jump records and the decode
context keep their Python interface; the recorder's lazily built decode columns equal the eager
ones, also when read after later records."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from policies.swa_eviction import DecodeContext
from simulator.engine.decode_clock import DecodeClock
from simulator.engine.decode_jump import DecodeJump, JumpSegment
from simulator.engine.fast_forward import finishing_steps, jump_inputs, page_opens, replay_short_steps
from simulator.engine.metrics import Recorder, jump_constants, majority_round
from simulator.engine.observer import PoolCapacity
from simulator.engine.overlap_jump import one_step_record
from simulator.engine.server_state import ServerReq
from simulator.radix.cache import OutOfMemory


def _numpy_opens(seqs: list[int], ran: list[int], p: int, m: int) -> np.ndarray:
    """Pages opened per step, as the replaced ``opens[f::p] += 1`` loop counted them."""
    opens = np.zeros(m, dtype=np.int64)
    for x, n in zip(seqs, ran, strict=True):
        f = (-x) % p
        if f < n:
            opens[f:n:p] += 1
    return opens


@pytest.mark.parametrize("seed", range(20))
def test_page_opens_are_the_numpy_counts(seed: int) -> None:
    rng = np.random.default_rng(seed)
    p = int(rng.choice([1, 4, 16, 64]))
    m = int(rng.integers(1, 300))
    seqs = [int(x) for x in rng.integers(0, 5000, size=int(rng.integers(0, 8)))]
    ran = [int(x) for x in rng.integers(0, m + 1, size=len(seqs))]
    opens = page_opens(seqs, ran, p)
    assert sorted(opens) == np.repeat(np.arange(m), _numpy_opens(seqs, ran, p, m)).tolist()
    with pytest.raises(ValueError):
        page_opens(seqs, ran + [1], p)


class _Pools:
    """Free FULL / SWA pages and a log of the calls a replay makes."""

    def __init__(self, full: int, swa: int, evictable: int) -> None:
        self.full, self.swa, self.evictable = full, swa, evictable
        self.calls: list[tuple] = []

    def free_pages(self) -> tuple[int, int]:
        return self.full, self.swa

    def alloc_pages_and_free_swa(self, alloc: int, freed: int) -> None:
        self.calls.append(("bulk", alloc, freed))
        self.full -= alloc
        self.swa += freed - alloc

    def evict_to_free_tokens(self, tokens: int) -> None:
        self.calls.append(("evict", tokens))
        self.full += self.evictable
        self.swa += self.evictable
        self.evictable = 0

    def free_swa_pages(self, n: int) -> None:
        self.calls.append(("free", n))
        self.swa += n

    def can_alloc_pages(self, n: int) -> bool:
        return min(self.full, self.swa) >= n

    def alloc_pages(self, n: int) -> None:
        self.calls.append(("alloc", n))
        self.full -= n
        self.swa -= n


def _numpy_short_steps(cache: _Pools, opens: np.ndarray, frees: np.ndarray, bs: int, p: int) -> None:
    """The replaced numpy version of ``replay_short_steps``, for reference."""
    pages_through = opens.cumsum()
    m, s = len(opens), 0
    while s < m:
        cons_before = pages_through[s:] - opens[s:] - (pages_through[s - 1] if s else 0)
        frees_before = np.cumsum(frees[s:]) - frees[s:]
        full_free, swa_free = cache.free_pages()
        ff = full_free - cons_before
        sf = swa_free - cons_before + frees_before
        need = opens[s:]
        hit = np.flatnonzero((ff < need) | (sf < need) | (ff < bs) | (sf + frees[s:] < bs))
        t = s + int(hit[0]) if len(hit) else m
        if t > s:
            cache.alloc_pages_and_free_swa(int(opens[s:t].sum()), int(frees[s:t].sum()))
        if t == m:
            break
        cache.evict_to_free_tokens(int(opens[t]) * p)
        cache.free_swa_pages(int(frees[t]))
        cache.evict_to_free_tokens(bs * p)
        if not cache.can_alloc_pages(int(opens[t])):
            raise OutOfMemory("short")
        cache.alloc_pages(int(opens[t]))
        s = t + 1


@pytest.mark.parametrize("seed", range(40))
def test_short_step_replay_makes_the_numpy_calls(seed: int) -> None:
    rng = np.random.default_rng(seed)
    m, bs, p = int(rng.integers(1, 200)), int(rng.integers(1, 6)), int(rng.choice([1, 16, 64]))
    opens = rng.integers(0, bs + 1, size=m) * (rng.random(m) < 0.3)
    frees = rng.integers(0, 3, size=m) * (rng.random(m) < 0.1)
    start = (int(rng.integers(0, 40)), int(rng.integers(0, 40)), int(rng.integers(0, 500)))
    typed, ref = _Pools(*start), _Pools(*start)
    try:
        replay_short_steps(typed, [int(x) for x in opens], [int(x) for x in frees], bs, p)
    except OutOfMemory:
        typed.calls.append(("out of memory",))
    try:
        _numpy_short_steps(ref, opens.astype(np.int64), frees.astype(np.int64), bs, p)
    except OutOfMemory:
        ref.calls.append(("out of memory",))
    assert typed.calls == ref.calls
    assert all(type(v) is int for call in typed.calls for v in call[1:])


def _Req(allocated: int, output_len: int, outputs: int) -> ServerReq:
    """A request with these lengths (the typed loops take ReqKV / ServerReq, not look-alikes)."""
    return ServerReq(
        "r", np.zeros(0, np.int64), 1, output_len, kv_allocated_len=allocated, num_outputs=outputs
    )


def test_jump_inputs_and_finishing_order() -> None:
    batch = [_Req(100, 10, 4), _Req(7, 50, 0), _Req(64, 5, 2)]
    seqs, last = jump_inputs(batch, 8)
    assert seqs == [100, 7, 64] and last == [5, 7, 2]
    # requests 2 (3 left) and 0 (6 left) finish within 6 steps, ordered by their last step
    assert finishing_steps(batch, last, 6) == [(2, 2), (5, 0)]
    assert finishing_steps(batch, last, 2) == []


def test_jump_records_and_context_keep_their_python_interface() -> None:
    seg = JumpSegment(3, 9, [], 1000, 500)
    assert (seg.full_released, seg.swa_released) == (0, 0)
    seg.full_released = -64
    assert seg.full_released == -64 and "first=3" in repr(seg)
    jump = DecodeJump(DecodeClock(0.0, [], 1e-9, 1e-9, 1e-9, 1e-9), 0, 64, [], [], [seg], 2)
    assert jump.segments[0] is seg and jump.queue == 2
    ctx = DecodeContext(128, 64, None, 7)
    assert (ctx.window, ctx.page_size, ctx.allocator, ctx.forward_iter) == (128, 64, None, 7)
    assert repr(ctx).startswith("DecodeContext(window=128")


def _recorder_with_steps(n: int) -> Recorder:
    rec = Recorder()
    rec.on_start(PoolCapacity(10**6, 10**5), {})
    for i in range(n):
        rec.on_decode_jump(one_step_record(0.5 * (i + 1), [], 1000 + i, 100 + i, 64, i % 2))
    return rec


def test_lazy_decode_columns_equal_eager_ones_after_later_records() -> None:
    early = _recorder_with_steps(5)
    cols = early._decode_columns()
    assert list(cols) == list(Recorder()._decode_columns())  # the frame's columns, in order
    more = early  # the recorder moves on: the columns owed are built first
    more.on_decode_jump(one_step_record(10.0, [], 5000, 500, 64, 0))
    want = _recorder_with_steps(5)._decode_columns()
    for name in want:
        np.testing.assert_array_equal(cols[name], want[name], err_msg=name)
        assert cols[name].dtype == want[name].dtype, name
    assert len(more._decode_columns()["time_s"]) == 6
    plain = pickle.loads(pickle.dumps(_recorder_with_steps(3)._decode_columns()))
    assert type(plain) is dict and list(plain) == list(want)


class _Sim:
    def __init__(self, rnd: int, heartbeat: bool) -> None:
        self.round, self.heartbeat = rnd, heartbeat


@pytest.mark.parametrize("seed", range(30))
def test_jump_constants_count_each_segment_as_majority_round(seed: int) -> None:
    """Segments whose batch shrinks (or is any other list) get ``majority_round``'s answer."""
    rng = np.random.default_rng(seed)
    rounds = int(rng.integers(1, 3))
    sims = [_Sim(int(rng.integers(0, rounds)), bool(rng.random() < 0.2)) for _ in range(8)]
    segments, a = [], 0
    batch = sims
    for _ in range(int(rng.integers(1, 5))):
        if rng.random() < 0.2:  # now and then a batch that is not a subsequence
            batch = [sims[int(i)] for i in rng.permutation(len(sims))[: len(batch)]]
        segments.append(JumpSegment(a, a + 2, batch, 0, 0))
        batch = [s for s in batch if rng.random() < 0.7]
        a += 2
    jump = DecodeJump(DecodeClock(0.0, [], 1e-9, 1e-9, 1e-9, 1e-9), a, 64, [], [], segments, 0)
    got: list = []
    jump_constants(got, jump)
    assert got == [(2, len(s.batch), 0, *majority_round(s.batch)) for s in segments]


def test_lazy_decode_columns_do_not_keep_the_recorder_alive() -> None:
    """The columns owed read the recorder's decode records, not the recorder: no reference cycle
    (a run's frames would otherwise keep the whole recorder, and its requests, until a collection)."""
    import gc
    import weakref

    rec = _recorder_with_steps(4)
    cols = rec._decode_columns()
    gone = weakref.ref(rec)
    gc.disable()
    try:
        del rec
        assert gone() is None
    finally:
        gc.enable()
    assert len(cols["time_s"]) == 4
