"""Memory operations as records: a recorded cache replay, its op log, replay and stats."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from typer.testing import CliRunner

import simulator.cache_replay as cache_replay_mod
from simulator.cache_replay import CacheReplayConfig, replay_requests
from simulator.cli.main import app
from simulator.errors import ConfigError
from simulator.kv_allocator import SWAKVAllocator
from simulator.memory_ops import MemoryOp, MemoryOpExecutor, OpKind, check_op_stream
from simulator.oplog import OpLogError, PoolState, read_op_log, replay_op_log, write_recording
from simulator.oplog_stats import op_log_stats


def _sessions(seed: int, n_sessions: int = 6, turns: int = 4) -> list[tuple[str, list[int], list[int]]]:
    """Multi-turn sessions over a shared system prompt: prefix hits, growth, evictions."""
    rng = random.Random(seed)
    system = [rng.randrange(1, 50_000) for _ in range(40)]
    history = {s: list(system) for s in range(n_sessions)}
    reqs = []
    for t in range(turns):
        for s in rng.sample(range(n_sessions), n_sessions):
            prompt = history[s] + [rng.randrange(1, 50_000) for _ in range(rng.randint(5, 60))]
            out = [rng.randrange(1, 50_000) for _ in range(rng.randint(1, 90))]
            reqs.append((f"s{s}t{t}", prompt, out))
            history[s] = prompt + out
    return reqs


class _Spy:
    """Snapshots the live pools at every step boundary (before the next step's records)."""

    def __init__(self, monkeypatch) -> None:
        self.states: dict[int, PoolState] = {}
        self.allocators: list[SWAKVAllocator] = []
        spy = self
        orig = MemoryOpExecutor.begin_step

        def begin_step(ex, step, start_s=0.0, duration_s=0.0):
            spy.snap(ex)
            orig(ex, step, start_s, duration_s)

        class Alloc(SWAKVAllocator):
            def __post_init__(self) -> None:
                super().__post_init__()
                spy.allocators.append(self)

        self.caches: list = []
        make_cache = cache_replay_mod.make_cache

        def make(*args):
            self.caches.append(make_cache(*args))
            return self.caches[-1]

        monkeypatch.setattr(MemoryOpExecutor, "begin_step", begin_step)
        monkeypatch.setattr(cache_replay_mod, "SWAKVAllocator", Alloc)
        monkeypatch.setattr(cache_replay_mod, "make_cache", make)

    def snap(self, ex: MemoryOpExecutor) -> None:
        if ex.ops and ex.ops[-1].step == ex.step:
            self.states[ex.step] = PoolState.of(ex.step, ex.pages)
        a = self.allocators[-1]
        # the counters and the page ids never disagree
        assert (a.full_free, a.swa_free) == ex.pages.free_counts()


CONFIGS = [
    CacheReplayConfig(page_size=4, full_tokens=1600, swa_tokens=400, window=32, swa_eviction_interval=16),
    CacheReplayConfig(page_size=1, full_tokens=900, swa_tokens=260, window=24, swa_eviction_interval=8),
    CacheReplayConfig(page_size=4, full_tokens=1600, swa_tokens=400, window=32, fast_forward=False),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=["p4", "p1", "p4-noff"])
def test_recorded_run_replays_to_the_same_pools(cfg, tmp_path, monkeypatch) -> None:
    spy = _Spy(monkeypatch)
    rec_cfg = CacheReplayConfig(**{**vars(cfg), "record_ops": True, "check_invariants": True})
    reqs = _sessions(1)
    res = replay_requests(reqs, rec_cfg)
    ex = res.ops
    spy.snap(ex)
    # recording changes nothing the run reports
    plain = replay_requests(reqs, cfg)
    assert res.records == plain.records and res.counters == plain.counters
    kinds = {op.kind for op in ex.ops}
    assert {OpKind.ALLOC, OpKind.FREE, OpKind.EVICT, OpKind.SWA_WINDOW_FREE, OpKind.GROUP_BEGIN} <= kinds
    assert OpKind.TOMBSTONE in kinds or OpKind.FREE_FULL in kinds
    assert res.counters["full_evicted"] > 0 and res.counters["swa_evicted"] > 0
    assert check_op_stream(ex.ops, ex.pages.full.num_pages, ex.pages.swa.num_pages, cfg.page_size) == []

    # every page in use is a tree node's (all requests finished): FULL by value, SWA by mapping
    tree = spy.caches[0].tree
    nodes = list(tree.iter_nodes())
    held = np.concatenate([x.value for x in nodes])
    assert len(np.unique(held)) == len(held) == ex.pages.full.num_pages - ex.pages.full.available()
    assert set(held.tolist()).isdisjoint(ex.pages.full.all_free().tolist())
    swa_held = np.concatenate([ex.pages.full_to_swa[x.value] for x in nodes if x.swa])
    assert (swa_held > 0).all() and len(np.unique(swa_held)) == len(swa_held)
    assert len(swa_held) == ex.pages.swa.num_pages - ex.pages.swa.available()
    assert all((ex.pages.full_to_swa[x.value] == 0).all() for x in nodes if not x.swa)

    path = write_recording(tmp_path / "run.ops.npz", ex, window=cfg.window, source=dict(kind="cache-replay"))
    replayed = {s.step: s for s in replay_op_log(path)}
    assert set(replayed) == set(spy.states)
    for step, live in spy.states.items():
        got = replayed[step]
        assert (got.full_free, got.swa_free) == (live.full_free, live.swa_free), step
        assert np.array_equal(got.full_free_ids, live.full_free_ids), step
        assert np.array_equal(got.swa_free_ids, live.swa_free_ids), step

    # ops stats totals are the allocator's own counters
    a = spy.allocators[0]
    stats = op_log_stats(read_op_log(path))
    for key in ("full_pages_allocated", "swa_pages_allocated", "full_pages_freed", "swa_pages_freed"):
        assert stats[key] == getattr(a.stats, key), key
    assert stats["final_full_free"] == a.full_free and stats["final_swa_free"] == a.swa_free
    assert stats["full_pages_by_kind"]["EVICT"] * cfg.page_size == res.counters["full_evicted"]
    swa_evicted = stats["swa_pages_by_kind"]["EVICT"] + stats["swa_pages_by_kind"].get("TOMBSTONE", 0)
    assert swa_evicted * cfg.page_size == res.counters["swa_evicted"]
    out = CliRunner().invoke(app, ["ops", "stats", str(path), "--json"])
    assert out.exit_code == 0, out.output
    printed = json.loads(out.output)
    assert printed.pop("provenance")["sglang_version"]  # every --json output carries it
    assert printed == json.loads(json.dumps(stats))


def test_fast_forward_emits_one_record_per_jump(monkeypatch) -> None:
    reqs = _sessions(2)
    on = replay_requests(reqs, CacheReplayConfig(**{**vars(CONFIGS[0]), "record_ops": True})).ops
    off = replay_requests(
        reqs, CacheReplayConfig(**{**vars(CONFIGS[0]), "record_ops": True, "fast_forward": False})
    ).ops
    jumps = [op for op in on.ops if op.page_steps is not None]
    assert jumps and all(len(op.page_steps) == len(op.full) for op in jumps)
    assert len(on.ops) < len(off.ops)
    # the same pages, whether a jump allocated them in bulk or step by step
    pages_on = np.concatenate([op.full for op in on.ops if op.kind == OpKind.ALLOC])
    pages_off = np.concatenate([op.full for op in off.ops if op.kind == OpKind.ALLOC])
    assert np.array_equal(pages_on, pages_off)
    steps_off = np.concatenate([np.full(len(op.full), op.step) for op in off.ops if op.kind == OpKind.ALLOC])
    steps_on = np.concatenate(
        [
            op.page_steps if op.page_steps is not None else np.full(len(op.full), op.step)
            for op in on.ops
            if op.kind == OpKind.ALLOC
        ]
    )
    assert np.array_equal(steps_on, steps_off)


def test_check_op_stream_finds_a_double_free() -> None:
    ex = MemoryOpExecutor.__new__(MemoryOpExecutor)
    a = SWAKVAllocator(64, 32, 4)
    ex = a.start_recording()
    op = a.apply_op(OpKind.ALLOC, "r", count=3)
    a.apply_op(OpKind.FREE, "r", op.full[:2])
    ops = list(ex.ops) + [MemoryOp(OpKind.FREE_FULL, 0, "r", op.full[:1])]
    errors = check_op_stream(ops, 16, 8, 4)
    assert errors and "not allocated" in errors[0]
    assert check_op_stream(ex.ops, 16, 8, 4) == []


def test_recording_must_start_on_empty_pools_and_not_on_legacy() -> None:
    a = SWAKVAllocator(64, 32, 4)
    a.alloc_pages(1)
    with pytest.raises(ConfigError, match="before the first allocation"):
        a.start_recording()
    with pytest.raises(ConfigError, match="unified tree"):
        replay_requests(
            _sessions(0, 1, 1),
            CacheReplayConfig(tombstone="legacy", record_ops=True, swa_eviction="iteration"),
        )


def test_reader_names_file_and_field(tmp_path) -> None:
    a = SWAKVAllocator(64, 32, 4)
    ex = a.start_recording()
    a.apply_op(OpKind.ALLOC, "r", count=2)
    path = write_recording(tmp_path / "x.npz", ex)
    assert [p.name for p in tmp_path.iterdir()] == ["x.npz"]  # no temporary left behind
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["full_offsets"] = arrays["full_offsets"][:-1]
    bad = tmp_path / "bad.npz"
    np.savez(bad, **arrays)
    with pytest.raises(OpLogError, match=r"bad\.npz.*'full_offsets'"):
        read_op_log(bad)
    header = json.loads(str(arrays["header"]))
    arrays["header"] = np.array(json.dumps({**header, "version": 99}))
    np.savez(bad, **arrays)
    with pytest.raises(OpLogError, match=r"'header\.version'"):
        read_op_log(bad)
    with pytest.raises(OpLogError, match="no such file"):
        read_op_log(tmp_path / "missing.npz")
    out = CliRunner().invoke(app, ["ops", "stats", str(bad)])
    assert out.exit_code != 0 and "header.version" in out.output


class _NoFrees:
    def free_swa_pages(self, n: int) -> None:
        pass


@pytest.mark.parametrize("policy", ["interval", "window", "iteration"])
def test_decode_jump_records_equal_step_by_step(policy) -> None:
    """A jump's bulk records hand out and free exactly the pages of SGLang's per-step loop."""
    from policies.eviction_order import EVICTION_ORDERS
    from policies.swa_eviction import SWA_EVICTION, DecodeContext
    from policies.tombstone import TOMBSTONING
    from simulator.radix.cache import make_cache
    from simulator.request_kv import REQ_KV_FIELDS, ReqKV

    p, window = 4, 16
    kwargs = {"interval": 8} if policy != "window" else {}
    ran = [40, 25, 33]

    def run(jump: bool):
        a = SWAKVAllocator(4096, 1024, p)
        cache = make_cache(TOMBSTONING.create("unified"), a, window, EVICTION_ORDERS.create("lru"))
        ex = cache.start_recording()
        pol = SWA_EVICTION.create(policy, **kwargs)
        reqs = []
        for i, n in enumerate((30, 17, 52)):
            r = ReqKV(rid=f"r{i}", pages=np.arange(100 * i, 100 * i + 40), prompt_len=n, output_len=100)
            cache.match(r)
            cache.lock_prefix(r)
            cache.alloc_for_extend(r)
            r.num_outputs = 1
            reqs.append(r)
        cache.begin_step(5)
        if jump:
            # the same (step, pages) frees as the count path's run_batch (a fresh copy of reqs)
            twins = [ReqKV(**{f: getattr(r, f) for f in REQ_KV_FIELDS} | {"kv_pages": None}) for r in reqs]
            counted = SWA_EVICTION.create(policy, **kwargs).run_batch(
                twins, DecodeContext(window, p, _NoFrees(), 5), ran
            )
            got = cache.record_decode_jump(reqs, ran, pol, DecodeContext(window, p, a, 5))
            assert got == [(s, freed // p) for s, freed in counted] and got
            for r, n in zip(reqs, ran, strict=True):
                r.kv_allocated_len += n
                r.decode_batch_idx += n
                r.num_outputs += n
        else:
            for s in range(max(ran)):
                cache.begin_step(5 + s)
                batch = [r for r, n in zip(reqs, ran, strict=True) if n > s]
                for r in batch:
                    pol.on_decode(r, DecodeContext(window, p, a, 5 + s))
                cache.alloc_for_decode(batch)
                for r in batch:
                    r.num_outputs += 1
        return ex, reqs

    (bulk, reqs_b), (step, reqs_s) = run(True), run(False)
    frees_b = [op for op in bulk.ops if op.kind == OpKind.SWA_WINDOW_FREE]
    frees_s = [op for op in step.ops if op.kind == OpKind.SWA_WINDOW_FREE]
    assert frees_s and len(frees_b) == len(frees_s)
    for x, y in zip(frees_b, frees_s, strict=True):
        assert np.array_equal(x.full, y.full) and np.array_equal(x.swa, y.swa)
    alloc_b = [op for op in bulk.ops if op.kind == OpKind.ALLOC]
    alloc_s = [op for op in step.ops if op.kind == OpKind.ALLOC]
    assert len(alloc_b) < len(alloc_s)
    for f in ("full", "swa"):
        assert np.array_equal(
            np.concatenate([getattr(o, f) for o in alloc_b]), np.concatenate([getattr(o, f) for o in alloc_s])
        )
    assert np.array_equal(
        np.concatenate([o.page_steps for o in alloc_b if o.page_steps is not None]),
        np.concatenate([np.full(len(o.full), o.step) for o in alloc_s if o.step >= 5]),
    )
    assert np.array_equal(bulk.pages.swa.all_free(), step.pages.swa.all_free())
    for rb, rs in zip(reqs_b, reqs_s, strict=True):
        assert np.array_equal(rb.kv_pages, rs.kv_pages) and rb.swa_evicted_seqlen == rs.swa_evicted_seqlen


def test_heal_of_a_locked_tombstone_remaps_swa() -> None:
    """RecoverSWAWithLockedFull: B heals a tombstone whose FULL A holds locked; the node keeps
    A's FULL pages, takes B's SWA pages (REMAP_SWA) and B's duplicate FULL pages are freed."""
    from policies.eviction_order import EVICTION_ORDERS
    from policies.tombstone import TOMBSTONING
    from simulator.radix.cache import make_cache
    from simulator.request_kv import ReqKV

    p = 4
    a = SWAKVAllocator(4096, 1024, p)
    cache = make_cache(TOMBSTONING.create("unified"), a, 8, EVICTION_ORDERS.create("lru"))
    ex = cache.start_recording()
    req_a = ReqKV(rid="A", pages=np.arange(10), prompt_len=40, output_len=10)
    req_b = ReqKV(
        rid="B", pages=np.array([0, 1, 2, 3, 4, 5, 6, 100, 101, 102, 103]), prompt_len=44, output_len=10
    )
    for r in (req_a, req_b):
        cache.match(r)
        cache.lock_prefix(r)
        cache.alloc_for_extend(r)
        cache.checkpoint(r, r.prompt_len, finished=False)
    remaps = [op for op in ex.ops if op.kind == OpKind.REMAP_SWA]
    assert len(remaps) == 1 and remaps[0].reason == "B"
    # the healed span [16, 28): A's FULL pages, now mapped to B's SWA pages
    healed = [x for x in cache.tree.iter_nodes() if x.swa and np.array_equal(x.value, req_a.kv_pages[4:7])]
    assert healed and (ex.pages.full_to_swa[healed[0].value] > 0).all()
    for r in (req_a, req_b):
        a.free_group_begin()
        cache.release(r)
        a.free_group_end()
    assert check_op_stream(ex.ops, a.full_pages, a.swa_pages, p) == []
    nodes = list(cache.tree.iter_nodes())
    held = np.concatenate([x.value for x in nodes])
    assert len(np.unique(held)) == len(held) == a.full_pages - a.full_free
    swa_held = np.concatenate([ex.pages.full_to_swa[x.value] for x in nodes if x.swa])
    assert len(np.unique(swa_held)) == len(swa_held) == a.swa_pages - a.swa_free


def test_op_log_mode_follows_the_umask(tmp_path) -> None:
    """The log is created by a rename of a mkstemp file (0600); it must get the mode any output
    file gets from the umask, as kvplan's other outputs do."""
    import os
    import stat

    ex = SWAKVAllocator(64, 64, 1).start_recording()
    old = os.umask(0o022)
    try:
        path = write_recording(tmp_path / "m.npz", ex)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
