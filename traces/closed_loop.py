"""How the simulator times requests whose ``arrival_s`` is NaN (closed-loop workloads).

A trace carries at most one of these in ``Trace.closed_loop``. They are plain frozen data; the
simulator implements the behaviour they describe.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, kw_only=True)
class SequentialReplay:
    """Serve rows one at a time in row order; each is sent when the previous one finishes.

    This is what SGLang's cache oracle driver does with ``--batch 1`` on a JSONL workload.
    """

    kind: str = "sequential"


@dataclass(frozen=True, kw_only=True)
class BenchMultiturnLoop:
    """The client loop of SGLang's ``benchmark/hicache/bench_multiturn.py``.

    Requests of client ``c`` are the rows with ``session_id == f"client-{c}"`` in turn order; a turn
    becomes *ready* when the previous turn of its client completes (or, with the round barrier, when
    all of ``clients_per_round[r]`` turns of round ``r`` completed, a heartbeat request was served
    synchronously and ``barrier_sleep_s`` passed). Heartbeat rows have ``session_id`` NA and rid
    ``heartbeat-<round>``. The sender loop: while ``sent - completed < max_parallel`` pop one ready
    request (``ready_queue_policy`` "random": uniform random index; "fifo": oldest) and send it, then
    sleep ``Exp(request_rate)`` ("poisson") or ``U(0, 2 / request_rate)`` ("uniform") even when the
    queue was empty; when the parallel limit is hit, sleep ``poll_interval_s`` and retry.
    """

    num_clients: int
    max_parallel: int
    request_rate: float
    distribution: str  # "poisson" | "uniform"
    ready_queue_policy: str  # "random" | "fifo"
    enable_round_barrier: bool
    clients_per_round: tuple[int, ...]
    seed: int
    python_rng_draws: int  # random.randint calls made before sending (per-client round counts)
    min_rounds: int
    max_rounds: int
    heartbeat_input_len: int = 100
    heartbeat_output_len: int = 100
    barrier_sleep_s: float = 10.0
    flush_between_rounds: bool = False
    poll_interval_s: float = 0.05
    kind: str = "bench_multiturn"

    def sender_rng(self) -> random.Random:
        """A ``random.Random`` in the state bench_multiturn's sender starts from (same seed, same draws).

        The sender's ready-queue picks and sleeps use Python's ``random`` module, seeded with
        ``--seed`` and advanced by the per-client round draws; replaying with this generator
        reproduces the script's choices given the same completion order.
        """
        rng = random.Random(self.seed)
        for _ in range(self.python_rng_draws):
            rng.randint(self.min_rounds, self.max_rounds)
        return rng


ClosedLoop = SequentialReplay | BenchMultiturnLoop

_KINDS: dict[str, type] = {"sequential": SequentialReplay, "bench_multiturn": BenchMultiturnLoop}


def closed_loop_to_dict(spec: ClosedLoop | None) -> dict[str, Any] | None:
    return None if spec is None else asdict(spec)


def closed_loop_from_dict(data: dict[str, Any] | None) -> ClosedLoop | None:
    """Inverse of :func:`closed_loop_to_dict` (used by the parquet reader)."""
    if data is None:
        return None
    cls = _KINDS[data["kind"]]
    fields = dict(data)
    if "clients_per_round" in fields:
        fields["clients_per_round"] = tuple(fields["clients_per_round"])
    return cls(**fields)
