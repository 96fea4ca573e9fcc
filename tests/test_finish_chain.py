"""The decode jump's finish chain (``fast_forward._FinishChain``) is its own simpy event: it must
put the same entries in the queue, at the same moments, as an URGENT ``Timeout`` per finishing
step did, and tell the clients of each finish at its exact time."""

from __future__ import annotations

import simpy

from simulator.engine.decode_clock import DecodeClock
from simulator.engine.fast_forward import _FinishChain


class _Server:
    """What the chain reads of the server: its environment and ``_complete``."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.heard: list[tuple[str, float, float]] = []

    def _complete(self, r, t, release=True) -> None:
        assert release is False  # the cache side is replayed after the jump
        self.heard.append((r, t, self.env.now))


def _clock() -> DecodeClock:
    return DecodeClock(0.0, [(6, 1.0, 2, 0, 0, 0)], 0.0, 0.0, 0.0, 0.0)  # step s ends at s + 1


def test_one_urgent_entry_per_finishing_step_at_its_end():
    env = simpy.Environment()
    server = _Server(env)
    clock = _clock()
    chain = _FinishChain(server, ["a", "b", "c"], [(1, 0), (1, 2), (4, 1)], clock)
    assert [(t, p) for t, p, _, _ in env._queue] == [(clock.end(1), simpy.events.URGENT)]
    order: list[str] = []
    # an ordinary event of the same instant, scheduled first, still comes after the finishes
    env.timeout(clock.end(1)).callbacks.append(lambda _ev: order.append(f"normal {server.heard}"))
    env.step()  # the chain's first entry
    assert server.heard == [("a", 2.0, 2.0), ("c", 2.0, 2.0)]
    queued = sorted((t, p) for t, p, _, _ in env._queue)
    assert queued == [(2.0, simpy.events.NORMAL), (clock.end(4), simpy.events.URGENT)]
    env.run()
    assert order == ["normal [('a', 2.0, 2.0), ('c', 2.0, 2.0)]"]
    assert server.heard[-1] == ("b", 5.0, 5.0)
    assert chain.callbacks is None  # processed: nothing pending


def test_a_cut_jump_tells_no_finish_past_its_last_step():
    env = simpy.Environment()
    server = _Server(env)
    chain = _FinishChain(server, ["a", "b"], [(1, 0), (4, 1)], _clock())
    chain.limit = 3  # an arrival cut the jump after step 2
    env.run()
    assert server.heard == [("a", 2.0, 2.0)]
    assert not env._queue


def test_same_queue_entries_as_a_timeout_per_step():
    """Each entry is what ``Timeout(env, end - now)`` with URGENT priority would queue: simpy's
    ``schedule`` puts it at ``now + delay``, ``now`` the previous finish's time."""
    env = simpy.Environment(initial_time=0.25)  # a start time whose sums round
    server = _Server(env)
    clock = DecodeClock(0.25, [(6, 0.1, 2, 0, 0, 0)], 0.0, 0.0, 0.0, 0.0)
    _FinishChain(server, ["a", "b", "c"], [(0, 0), (2, 1), (5, 2)], clock)
    popped = []
    while env._queue:
        t, p, _, _ = env._queue[0]
        popped.append((t, p))
        env.step()
    expected, now = [], 0.25
    for step in (0, 2, 5):
        expected.append((now + (clock.end(step) - now), simpy.events.URGENT))
        now = clock.end(step)
    assert popped == expected
    assert [h[1] for h in server.heard] == [clock.end(0), clock.end(2), clock.end(5)]
