"""The workload of SGLang's ``benchmark/hicache/bench_multiturn.py``, as a closed-loop trace.

Same flags and defaults as the script. Per client ``c`` with ``t_c`` rounds (``--num-rounds``, or
``randint(min, max)`` from Python's ``random`` when ``--min-rounds``/``--max-rounds`` differ):

* round 0 prompt ``Q0`` = ``--request-length`` tokens (``randint(int(L * range_ratio), L + 1)`` from
  numpy's legacy global generator, as ``compute_random_lens`` does), output length drawn the same way;
* round ``r`` prompt = prompt of round ``r - 1`` ++ its output ++ a sub-question of
  ``--sub-question-input-length`` tokens (0: request length) with its own output length, taken from
  a pool of ``sum(t_c - 1)`` samples by ``pop()`` (from the end). The script pops in completion
  order; here the pool is consumed in (round, client) order, which is the same when lengths are
  fixed (``--range-ratio 1``) and the same distribution otherwise;
* outputs (``max_new_tokens`` = the drawn length, ``ignore_eos``) are unique per request and reused
  verbatim by the next round;
* with ``--disable-random-sample`` prompt ``i`` is the token sequence ``(offset_i + i + j) % vocab``
  (``offset`` drawn with numpy after the lengths): two round-0 prompts with the same start value share
  their common prefix, and this generator keeps exactly that sharing. Without it, the script tokenizes
  ShareGPT first turns; those prompts are modelled as unique content of the same lengths;
* with ``--enable-round-barrier`` a heartbeat request (100 tokens of id 1, 100 output tokens) follows
  every round, then a 10 s sleep; heartbeats share their prompt with each other.

Every arrival is NaN: even round-0 sends are paced by the sender loop (Exp or uniform sleeps, the
``max_parallel`` cap and random ready-queue picks share one random stream), which the simulator runs
from ``trace.closed_loop`` (:class:`~traces.closed_loop.BenchMultiturnLoop`). The script's rate sweep
without ``--disable-auto-run`` is one run per rate with a cache flush between: generate one trace
per rate.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from traces.closed_loop import BenchMultiturnLoop
from traces.continuation import build_sequences
from traces.schema import Trace, make_requests

HEARTBEAT_TOKEN = 1


@dataclass(frozen=True, kw_only=True)
class BenchMultiturnArgs:
    """bench_multiturn.py's workload flags (names with ``_`` for ``-``), with the script's defaults."""

    num_clients: int = 256
    max_parallel: int = 128
    request_length: int = 512
    output_length: int = 64
    num_rounds: int = 5
    min_rounds: int = 0
    max_rounds: int = 0
    distribution: str = "poisson"
    request_rate: float = 1.0
    sub_question_input_length: int = 0
    ready_queue_policy: str = "random"
    range_ratio: float = 1.0
    enable_round_barrier: bool = False
    flush_between_rounds: bool = False
    disable_random_sample: bool = False
    seed: int = 1
    vocab_size: int = 128000  # tokenizer.vocab_size of the script's default model (Llama-3.1-8B)

    def resolved_rounds(self) -> tuple[int, int]:
        """(min, max) rounds per client, resolved and checked exactly as the script does."""
        lo, hi = self.min_rounds, self.max_rounds
        if lo == 0 and hi == 0:
            lo = hi = self.num_rounds
        elif lo == 0:
            lo = hi
        elif hi == 0:
            hi = lo
        if lo < 1:
            raise ValueError(f"--min-rounds must be >= 1, got {lo}")
        if lo > hi:
            raise ValueError(f"--min-rounds ({lo}) must be <= --max-rounds ({hi})")
        return lo, hi

    def validate(self) -> None:
        if self.num_clients < 1:
            raise ValueError(f"--num-clients must be >= 1, got {self.num_clients}")
        if self.max_parallel < 1:
            raise ValueError(f"--max-parallel must be >= 1, got {self.max_parallel}")
        if self.request_length < 1 or self.output_length < 0 or self.sub_question_input_length < 0:
            raise ValueError("--request-length must be >= 1 and the other lengths >= 0")
        if self.distribution not in ("poisson", "uniform"):
            raise ValueError(f"--distribution must be poisson or uniform, got {self.distribution!r}")
        if self.ready_queue_policy not in ("random", "fifo"):
            raise ValueError(f"--ready-queue-policy must be random or fifo, got {self.ready_queue_policy!r}")
        if not 0.0 < self.range_ratio <= 1.0:
            raise ValueError(f"--range-ratio must be in (0, 1], got {self.range_ratio}")
        if not self.request_rate > 0:  # inf: no pacing (SGLang's benchmarks); nan refused
            raise ValueError(f"--request-rate must be > 0 (inf: no pacing), got {self.request_rate}")
        if self.flush_between_rounds and not self.enable_round_barrier:
            raise ValueError("--flush-between-rounds requires --enable-round-barrier")
        self.resolved_rounds()


def _random_lens(rs: np.random.RandomState, full_len: int, range_ratio: float, num: int) -> np.ndarray:
    """sglang.benchmark.datasets.common.compute_random_lens, drawing from the same generator."""
    if full_len <= 0:
        return np.zeros(num, dtype=np.int64)
    return rs.randint(max(int(full_len * range_ratio), 1), full_len + 1, size=num).astype(np.int64)


def _sample(rs: np.random.RandomState, args: BenchMultiturnArgs, in_len: int, num: int):
    """sample_random_requests(return_text=False): lengths, then token offsets when synthetic."""
    ins = _random_lens(rs, in_len, args.range_ratio, num)
    outs = _random_lens(rs, args.output_length, args.range_ratio, num)
    starts = None
    if args.disable_random_sample:
        starts = (
            rs.randint(0, args.vocab_size, size=num).astype(np.int64) + np.arange(num)
        ) % args.vocab_size
    return ins, outs, starts


def _round0_blocks(
    lengths: np.ndarray, starts: np.ndarray | None
) -> tuple[list[list[int]], list[list[int]], int]:
    """Prompt blocks of round 0: prompts with the same start token share the common prefix exactly."""
    n = len(lengths)
    if starts is None:
        return [[i] for i in range(n)], [[int(x)] for x in lengths], n
    cuts: dict[int, list[int]] = {}
    for s, length in zip(starts.tolist(), lengths.tolist(), strict=True):
        cuts.setdefault(s, []).append(length)
    ids: dict[tuple[int, int], int] = {}
    chains, lens = [], []
    for s, length in zip(starts.tolist(), lengths.tolist(), strict=True):
        ends = sorted({x for x in cuts[s] if x <= length})  # ends[-1] == length
        chains.append([ids.setdefault((s, e), len(ids)) for e in ends])
        lens.append(np.diff([0, *ends]).tolist())
    return chains, lens, len(ids)


def generate_bench_multiturn(args: BenchMultiturnArgs | None = None) -> Trace:
    """Build the closed-loop trace bench_multiturn.py would send (see the module docstring)."""
    args = args or BenchMultiturnArgs()
    args.validate()
    lo, hi = args.resolved_rounds()
    py = random.Random(args.seed)
    rs = np.random.RandomState(args.seed)
    c_n = args.num_clients
    rounds = [lo] * c_n if lo == hi else [py.randint(lo, hi) for _ in range(c_n)]
    clients_per_round = tuple(sum(1 for t in rounds if t > r) for r in range(hi))
    q0_len, o0_len, q0_start = _sample(rs, args, args.request_length, c_n)
    sub_len = args.sub_question_input_length or args.request_length
    n_sub = sum(max(t - 1, 0) for t in rounds)
    sq_len, so_len, _ = _sample(rs, args, sub_len, max(n_sub, 1))
    q0_chains, q0_lens, n_q0 = _round0_blocks(q0_len, q0_start)
    heartbeat_chain = n_q0

    rid, session, turn, parent, prompt_len, output_len, chains, lens = [], [], [], [], [], [], [], []
    last_row = [-1] * c_n
    pool = len(sq_len)
    for r in range(hi):
        for c in range(c_n):
            if rounds[c] <= r:
                continue
            if r == 0:
                p_len, o_len, blk_c, blk_l = int(q0_len[c]), int(o0_len[c]), q0_chains[c], q0_lens[c]
            else:
                pool -= 1
                prev = last_row[c]
                p_len = prompt_len[prev] + output_len[prev] + int(sq_len[pool])
                o_len, blk_c, blk_l = int(so_len[pool]), [], []
            last_row[c] = len(rid)
            rid.append(f"client-{c}-round-{r}")
            session.append(f"client-{c}")
            turn.append(r)
            parent.append(-1 if r == 0 else prev)
            prompt_len.append(p_len)
            output_len.append(o_len)
            chains.append(blk_c)
            lens.append(blk_l)
        if args.enable_round_barrier:
            rid.append(f"heartbeat-{r}")
            session.append(None)
            turn.append(r)
            parent.append(-1)
            prompt_len.append(100)
            output_len.append(100)
            chains.append([heartbeat_chain])
            lens.append([100])
    n = len(rid)
    counts = np.array([len(x) for x in chains], dtype=np.int64)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    flat_c = np.array([x for blk in chains for x in blk], dtype=np.int64)
    flat_l = np.array([x for blk in lens for x in blk], dtype=np.int64)
    parent_a = np.array(parent, dtype=np.int64)
    p_a, o_a = np.array(prompt_len, dtype=np.int64), np.array(output_len, dtype=np.int64)
    content = build_sequences(offsets, flat_c, flat_l, n_q0 + 1, p_a, o_a, parent_a, parent_a >= 0)
    requests = make_requests(
        rid, np.full(n, np.nan), p_a, o_a, session_id=session, turn=np.array(turn), parent=parent_a
    )
    spec = BenchMultiturnLoop(
        num_clients=c_n,
        max_parallel=args.max_parallel,
        request_rate=args.request_rate,
        distribution=args.distribution,
        ready_queue_policy=args.ready_queue_policy,
        enable_round_barrier=args.enable_round_barrier,
        clients_per_round=clients_per_round,
        seed=args.seed,
        python_rng_draws=0 if lo == hi else c_n,
        min_rounds=lo,
        max_rounds=hi,
        flush_between_rounds=args.flush_between_rounds,
    )
    return Trace(requests, content, source=f"bench_multiturn({args})", closed_loop=spec)
