"""Seeded multi-turn workloads that put a HiCache host tier under pressure.

Conversations share system prompts and grow turn by turn (prompt = previous prompt + answer +
new user tokens); they are served turn-major, so a conversation's prefix is usually evicted from
the device before its next turn and comes back from the host (load-back), while the host pool
fills and evicts. Every prompt fits the pools without chunked prefill (the oracle serves one
request at a time): the uncached part of a prompt never exceeds the SWA pool minus one window.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class HiPools:
    """Device pools (tokens), window and page of one differential configuration."""

    page_size: int
    full_tokens: int
    swa_tokens: int
    window: int

    @property
    def max_prompt(self) -> int:
        p = self.page_size
        return min(self.full_tokens // 2, self.swa_tokens - self.window - 4 * p) // p * p


def hicache_workload(pools: HiPools, seed: int, max_conv: int = 8) -> list[dict]:
    """Requests ``{rid, input_ids, output_ids}`` in serving order (3 to ``max_conv``
    conversations)."""
    rng = random.Random(seed)
    vocab = rng.choice([5, 1000, 32000])
    cap = pools.max_prompt
    systems = [
        [rng.randrange(vocab) for _ in range(rng.randint(8, cap // 4))] for _ in range(rng.randint(1, 3))
    ]
    n_conv = rng.randint(3, max_conv)
    convs = []
    for c in range(n_conv):
        prompt = list(rng.choice(systems)) if rng.random() < 0.8 else []
        turns = []
        for t in range(rng.randint(2, 6)):
            user = [rng.randrange(vocab) for _ in range(rng.randint(4, max(5, cap // 6)))]
            if len(prompt) + len(user) > cap:
                break
            prompt = prompt + user
            answer_len = rng.randint(1, 40) if rng.random() < 0.85 else rng.randint(60, 220)
            answer = [rng.randrange(vocab) for _ in range(answer_len)]
            turns.append((f"c{c}t{t}", list(prompt), answer))
            if rng.random() < 0.1:  # regenerate: the same prompt again
                turns.append(
                    (f"c{c}t{t}r", list(prompt), [rng.randrange(vocab) for _ in range(rng.randint(1, 20))])
                )
            prompt = prompt + answer
        convs.append(turns)
    order = rng.choice(["turn", "turn", "shuffle", "conv"])
    out: list[tuple] = []
    if order == "conv":
        out = [r for turns in convs for r in turns]
    elif order == "turn":
        depth = max(len(t) for t in convs)
        out = [turns[i] for i in range(depth) for turns in convs if i < len(turns)]
    else:
        cursors = [0] * len(convs)
        while any(cursors[i] < len(convs[i]) for i in range(len(convs))):
            i = rng.choice([i for i in range(len(convs)) if cursors[i] < len(convs[i])])
            out.append(convs[i][cursors[i]])
            cursors[i] += 1
    return [dict(rid=r, input_ids=i, output_ids=o) for r, i, o in out]


def serve_requests(env, server, rec, requests) -> None:
    """Submit each ``(arrival time, SimRequest)`` to a served HiCache ``server``, run the clock to
    the end, and close ``rec`` with the HiCache report and the server's counters (the served
    HiCache tests' shared harness)."""
    from simulator.engine.hicache_report import HiCacheReport

    def client(t: float, req):
        yield env.timeout(t)
        yield server.submit(req)

    for t, req in requests:
        env.process(client(t, req))
    env.run()
    rec.on_hicache(HiCacheReport(server.hicache))
    rec.on_end(env.now, server.counters())
