"""Cache-only replay: serve requests one at a time through the SWA radix cache.

This is SGLang's scheduler with batch size 1, no chunked prefill and no overlap, exactly as the
oracle drives SGLang's own classes (../shared/oracle): match, lock, allocate the uncached
prompt (evicting through the tree when short), the first output token from prefill, checkpoint
if unfinished else release, then one decode step per further output token (SWA-eviction policy,
then one slot), and release when the last output token is produced.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from policies.eviction_order import EVICTION_ORDERS
from policies.swa_eviction import SWA_EVICTION_INTERVAL, DecodeContext, make_swa_eviction
from policies.tombstone import TOMBSTONING
from simulator.engine.failures import out_of_memory_reason, reason_kind
from simulator.errors import ConfigError
from simulator.invariants import check_invariants
from simulator.kv_allocator import SWAKVAllocator
from simulator.radix.cache import OutOfMemory, make_cache
from simulator.request_kv import ReqKV


@dataclass(frozen=True)
class CacheReplayConfig:
    """Allocator sizes in tokens (SGLang's ``size`` / ``size_swa``) and the policies by name."""

    page_size: int = 1
    full_tokens: int = 4096
    swa_tokens: int = 1024
    window: int = 128
    swa_eviction: str = "interval"
    tombstone: str = "unified"
    eviction_policy: str = "lru"
    swa_eviction_interval: int = SWA_EVICTION_INTERVAL
    check_invariants: bool = False
    # Where ``after_prefill_checkpoint`` is read: the 0.5.23 oracle driver reads it inside the
    # prefill result's free group (frees not yet returned), the 0.5.15 driver after it. None
    # follows the tombstoning generation, so records line up with the matching oracle.
    checkpoint_sizes_in_free_group: bool | None = None
    # Jump over decode steps in which nothing but a counter or a page allocation happens.
    fast_forward: bool = True
    # Record every memory operation with real page ids (ReplayResult.ops; simulator/memory_ops.py).
    record_ops: bool = False

    def __post_init__(self) -> None:
        if self.window <= 0:
            raise ConfigError(f"window must be positive, got {self.window}")
        # validate_swa_pool_size (model_executor/pool_configurator.py)
        if self.window + self.page_size >= self.swa_tokens:
            raise ConfigError(
                f"SWA pool of {self.swa_tokens} tokens cannot hold sliding window {self.window} "
                f"+ page {self.page_size}"
            )


@dataclass(slots=True)
class WorkloadRequest:
    """One request of a cache-only workload: page ids of prompt ++ output, and the lengths."""

    rid: str
    pages: np.ndarray
    prompt_len: int
    output_len: int


@dataclass
class ReplayResult:
    records: list[dict]
    tree_stats: dict
    counters: dict
    evictions: dict
    final_sizes: dict
    summary: dict = field(default_factory=dict)
    ops: object = None  # the MemoryOpExecutor when cfg.record_ops


def _row_hash(rows: np.ndarray) -> np.ndarray:
    """Two independent random linear hashes mod 2**64 per row (a universal family: with token
    ids below 2**31 two distinct rows collide with probability below 2**-66)."""
    gen = np.random.default_rng(0x5EED)  # fixed: ids must not depend on the run
    mults = gen.integers(1, 2**63, size=(rows.shape[1], 2), dtype=np.uint64) | np.uint64(1)
    x = np.ascontiguousarray(rows).view(np.uint64)
    with np.errstate(over="ignore"):
        return x @ mults


def token_pages(seqs: Sequence[np.ndarray], page_size: int) -> list[np.ndarray]:
    """Page ids for raw token sequences: a page's id names its token content.

    The tree compares keys page by page from the root, so content ids along a path are
    equivalent to comparing the tokens themselves. Pages are identified by a 128-bit hash of
    their tokens, numbered densely.
    """
    if page_size == 1:
        return [np.asarray(s, dtype=np.int64) for s in seqs]
    rows = []
    counts = []
    for s in seqs:
        s = np.asarray(s, dtype=np.int64)
        n = len(s) // page_size
        rows.append(s[: n * page_size].reshape(n, page_size))
        counts.append(n)
    if not rows or sum(counts) == 0:
        return [np.empty(0, np.int64) for _ in seqs]
    hashes = np.ascontiguousarray(_row_hash(np.concatenate(rows)))
    _, ids = np.unique(hashes.view(np.dtype((np.void, 16))).ravel(), return_inverse=True)
    ids = ids.reshape(-1).astype(np.int64)
    out, start = [], 0
    for n in counts:
        out.append(ids[start : start + n])
        start += n
    return out


def requests_from_tokens(
    reqs: Iterable[tuple[str, Sequence[int], Sequence[int]]], page_size: int
) -> list[WorkloadRequest]:
    reqs = list(reqs)
    seqs = [np.concatenate([np.asarray(i, np.int64), np.asarray(o, np.int64)]) for _, i, o in reqs]
    pages = token_pages(seqs, page_size)
    return [WorkloadRequest(rid, pg, len(i), len(o)) for (rid, i, o), pg in zip(reqs, pages, strict=True)]


def replay(
    workload: Iterable[WorkloadRequest],
    cfg: CacheReplayConfig,
    on_record: Callable[[dict], None] | None = None,
) -> ReplayResult:
    """Serve ``workload`` in order; return per-request records and the end state.

    ``on_record``: hand each record to this callback instead of keeping it, so that a big
    workload's records do not pile up (``records`` is then empty; the summary is the same).
    """
    run = _ReplayRun(cfg)
    if on_record is None:
        records = [run.serve(w) for w in workload]
        return _result(records, run, cfg, _Tally.of(records))
    tally = _Tally()
    for w in workload:
        rec = run.serve(w)
        tally.add(rec)
        on_record(rec)
    return _result([], run, cfg, tally)


@dataclass
class _Tally:
    """What the summary needs from the records, counted as they come."""

    requests: int = 0
    prompt_total: int = 0
    hit_total: int = 0
    reasons: Counter = field(default_factory=Counter)  # aborted, by reason kind
    examples: dict = field(default_factory=dict)  # kind -> (first full reason, last record seen)

    @classmethod
    def of(cls, records: Iterable[dict]) -> _Tally:
        tally = cls()
        for r in records:
            tally.add(r)
        return tally

    def add(self, r: dict) -> None:
        if r.get("aborted"):
            kind = reason_kind(r["error"])
            self.reasons[kind] += 1
            first = self.examples.get(kind, (r["error"], 0))[0]
            self.examples[kind] = (first, self.requests)
        else:
            self.prompt_total += r["prompt_len"]
            self.hit_total += r["prefix_len"]
        self.requests += 1

    def failure_examples(self) -> dict[str, str]:
        """The first reason of each kind, kinds ordered by their last record, latest first."""
        order = sorted(self.examples.items(), key=lambda kv: -kv[1][1])
        return {kind: first for kind, (first, _) in order}


class _ReplayRun:
    """The cache, its allocator and the SWA-eviction policy of one replay, and the forward
    iteration counter the ``iteration`` policy reads."""

    def __init__(self, cfg: CacheReplayConfig) -> None:
        tomb = TOMBSTONING.create(cfg.tombstone)
        order = EVICTION_ORDERS.create(cfg.eviction_policy)
        self.cfg = cfg
        self.swa_policy = make_swa_eviction(cfg.swa_eviction, interval=cfg.swa_eviction_interval)
        self.allocator = SWAKVAllocator(cfg.full_tokens, cfg.swa_tokens, cfg.page_size)
        self.cache = make_cache(tomb, self.allocator, cfg.window, order)
        in_group = cfg.checkpoint_sizes_in_free_group
        self.sizes_in_free_group = tomb.generation == "unified" if in_group is None else in_group
        self.forward_iter = 0
        self.ops = self.cache.start_recording() if cfg.record_ops else None

    def _begin_step(self) -> None:
        """Tag the memory operations that follow with the forward iteration (when recording)."""
        if self.ops is not None:
            self.cache.begin_step(self.forward_iter)

    def _check(self, running: tuple[ReqKV, ...]) -> None:
        if self.cfg.check_invariants:
            check_invariants(self.cache, running)

    def serve(self, w: WorkloadRequest) -> dict:
        """Match, prefill and decode one request to its end; its record."""
        if w.output_len < 1 or w.prompt_len < 1:
            raise ConfigError(f"request {w.rid}: prompt and output must be non-empty")
        cache = self.cache
        req = ReqKV(rid=w.rid, pages=w.pages, prompt_len=w.prompt_len, output_len=w.output_len)
        ev0 = (cache.evictions.calls, cache.evictions.full_evicted, cache.evictions.swa_evicted)
        cache.match(req)
        rec: dict = dict(
            rid=w.rid, prompt_len=w.prompt_len, prefix_len=req.prefix_len, answer_len=w.output_len
        )
        rec["after_match"] = cache.sizes()
        cache.lock_prefix(req)
        self._check(())
        self._begin_step()
        try:
            cache.alloc_for_extend(req)
        except OutOfMemory as exc:
            # Without chunked prefill the uncached prompt must fit at once; SGLang would chunk
            # it. Count the request as aborted and keep serving (its prefix lock is released).
            cache.tree.unlock(req.lock)
            req.lock = None
            rec.update(aborted=True, error=out_of_memory_reason(str(exc)), after_release=cache.sizes())
            rec.update(evict_calls=0, full_evicted=0, swa_evicted=0, cached_tokens=0)
            return rec
        self._prefill_result(req, rec)
        while req.holds_kv:
            self._decode(req, rec)
        rec["after_release"] = cache.sizes()
        rec["evict_calls"] = cache.evictions.calls - ev0[0]
        rec["full_evicted"] = cache.evictions.full_evicted - ev0[1]
        rec["swa_evicted"] = cache.evictions.swa_evicted - ev0[2]
        rec["cached_tokens"] = req.cached_tokens
        return rec

    def _prefill_result(self, req: ReqKV, rec: dict) -> None:
        """The prefill forward and its result: the first output token, then checkpoint or release
        in one free group (batch_result_processor)."""
        cache, allocator = self.cache, self.allocator
        self.forward_iter += 1
        rec["after_prefill_alloc"] = cache.sizes()
        self._check((req,))
        req.num_outputs = 1
        allocator.free_group_begin()
        if req.num_outputs >= req.output_len:
            cache.release(req)
        else:
            cache.checkpoint(req, req.prompt_len, finished=False)
        if self.sizes_in_free_group:
            rec["after_prefill_checkpoint"] = cache.sizes()
        allocator.free_group_end()
        if not self.sizes_in_free_group:
            rec["after_prefill_checkpoint"] = cache.sizes()
        rec["cache_protected_len_after_checkpoint"] = req.cache_protected_len
        self._check((req,) if req.holds_kv else ())

    def _decode(self, req: ReqKV, rec: dict) -> None:
        """One decode step, or a jump over the quiet steps ahead when fast-forward is on."""
        cfg, cache, allocator = self.cfg, self.cache, self.allocator
        if cfg.fast_forward:
            ctx = DecodeContext(cfg.window, cfg.page_size, allocator, self.forward_iter)
            k = min(
                self.swa_policy.quiet_steps(req, ctx),
                req.output_len - req.num_outputs - 1,
                cache.quiet_decode_steps(req),
            )
            if k > 0:
                self._begin_step()
                cache.fast_forward_decode(req, k)
                self.forward_iter += k
                req.num_outputs += k
                self._check((req,))
                return
        self._begin_step()
        if cache.decode_memory_check:
            cache.check_decode_mem(req)
        self.swa_policy.on_decode(req, DecodeContext(cfg.window, cfg.page_size, allocator, self.forward_iter))
        cache.alloc_for_decode(req)
        self.forward_iter += 1
        req.num_outputs += 1
        if req.num_outputs >= req.output_len:
            allocator.free_group_begin()
            rec["before_release"] = cache.sizes()
            cache.release(req)
            allocator.free_group_end()
        self._check((req,) if req.holds_kv else ())


def _result(records: list[dict], run: _ReplayRun, cfg: CacheReplayConfig, tally: _Tally) -> ReplayResult:
    """The records with the tree's end state and a summary."""
    cache = run.cache
    prompt_total, hit_total = tally.prompt_total, tally.hit_total
    stats = cache.tree.stats()
    counters = dict(vars(cache.tree.counters))
    summary = dict(
        requests=tally.requests,
        aborted=sum(tally.reasons.values()),
        # by reason kind (engine/failures.py), with the first full reason of each kind
        failure_reasons={"aborted": dict(tally.reasons)},
        failure_examples=tally.failure_examples(),
        total_prompt_tokens=prompt_total,
        total_prefix_hit_tokens=hit_total,
        hit_rate=hit_total / prompt_total if prompt_total else 0.0,
        tree=stats,
        counters=counters,
        evictions=dict(vars(cache.evictions)),
        final_sizes=cache.sizes(),
        config=dict(vars(cfg)) if hasattr(cfg, "__dict__") else {},
    )
    return ReplayResult(
        records, stats, counters, dict(vars(cache.evictions)), cache.sizes(), summary, run.ops
    )


def replay_requests(
    requests: Iterable[tuple[str, Sequence[int], Sequence[int]]], cfg: CacheReplayConfig
) -> ReplayResult:
    """Replay raw-token requests ``(rid, input_ids, output_ids)`` (the oracle's JSONL format)."""
    return replay(requests_from_tokens(requests, cfg.page_size), cfg)
