"""Rule 8 of issue 11: the logs read pool usage after a batch's results are processed
(``process_batch_result_prefill`` / ``_decode`` -> ``report_prefill_stats`` /
``report_decode_stats``, batch_result_processor.py), so a step's ``#full token`` no longer holds
the requests that finished in it; under overlap it already holds the next batch's allocation."""

from __future__ import annotations

import numpy as np
import pytest
import simpy

from simulator.engine.config import SimConfig
from simulator.engine.metrics import Recorder
from simulator.engine.request import SimRequest
from simulator.engine.server import ServerModel, ServerPools


class _UnitCost:
    """Every forward costs 1 s: enough to order the events."""

    def prefill_time(self, extend, prefix):
        return 1.0

    def decode_time(self, bs, full_ctx, swa_ctx):
        return 1.0

    def decode_terms(self, bs):
        return (1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


POOLS = ServerPools(
    page_size=1,
    full_tokens=1000,
    swa_tokens=1000,
    window=4096,
    max_running_requests=8,
    chunked_prefill_size=512,
)


def _frames(**cfg) -> dict:
    """A (10 in, 3 out) and B (20 in, 5 out), distinct tokens (page keys cover prompt and
    output), both at t = 0."""
    env = simpy.Environment()
    rec = Recorder()
    server = ServerModel(env, SimConfig(**cfg), POOLS, _UnitCost(), observer=rec)
    reqs = [
        SimRequest("A", np.arange(0, 13, dtype=np.int64), 10, 3),
        SimRequest("B", np.arange(100, 125, dtype=np.int64), 20, 5),
    ]
    for r in reqs:
        server.submit(r)
    env.run()
    assert all(r.finish_s == r.finish_s and not r.aborted for r in reqs)
    return rec.frames()


@pytest.mark.parametrize("fast_forward", [False, True])
def test_plain_loop_reads_usage_after_the_releases(fast_forward):
    """Plain loop. Prefill [A, B]: 30 slots, both checkpointed and locked: 30. Decodes 1-4 add
    2, 2, 1, 1 slots; A's 3rd token comes at decode 2, its 10 + 2 slots go to the tree
    (evictable): 34 - 12 = 22; B's 5th at decode 4: 24 - 24 = 0. Read before the forward, as
    before rule 8, the decode column was 32, 34, 23, 24."""
    frames = _frames(disable_overlap_schedule=True, fast_forward=fast_forward)
    assert frames["prefill_batches"]["full_token"].tolist() == [30]
    assert frames["decode_steps"]["full_token"].tolist() == [32, 22, 23, 0]
    assert frames["decode_steps"]["swa_token"].tolist() == [32, 22, 23, 0]


def test_overlap_loop_reads_usage_after_the_next_launch():
    """Overlap loop: a result is processed after the next batch was launched. The prefill
    (30 slots) is read after decode 1's 2 slots: 32. Decode 1 after decode 2's: 34. A leaves
    decode 3's batch (it finishes in flight), so decode 2 is read after decode 3's 1 slot and
    A's release of 12: 35 - 12 = 23. Decode 3 after decode 4's slot: 24; decode 4 after B's
    release with nothing launched: 0. Read at launch they were 30 and 32, 34, 35, 24."""
    frames = _frames(disable_overlap_schedule=False)
    assert frames["prefill_batches"]["full_token"].tolist() == [32]
    assert frames["decode_steps"]["full_token"].tolist() == [34, 23, 24, 0]
