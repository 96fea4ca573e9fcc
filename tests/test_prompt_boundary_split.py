"""A full-attention tree splits a request's cached path at its prompt boundary (SGLang 0.5.23
``UnifiedRadixCache.checkpoint_into_tree``, mem_cache/unified_radix_cache.py): with one
component (FULL) it inserts the page-aligned prompt a second time, so eviction can drop the
output KV and keep the prompt. Hybrid SWA trees (FULL + SWA) do not.

Usually the prompt already ends a node (the prefill checkpoint inserted it); it does not when a
request finishes on its prefill result under overlap with its EOS slot in flight, or when a
re-prefill (after retraction) checkpoints prompt + outputs in one piece."""

from __future__ import annotations

import numpy as np
import pytest

from policies.eviction_order import EVICTION_ORDERS
from policies.tombstone import TOMBSTONING
from simulator.engine.step_replay import run_lines
from simulator.engine.step_workload import StepKnobs
from simulator.radix.cache import build_controller
from simulator.request_kv import ReqKV


def _tokens(start: int, n: int) -> list[int]:
    return list(range(start, start + n))


def test_overlap_eos_on_prefill_result_leaves_a_one_token_leaf():
    """Overlap loop, ``--no-swa``, page 1, FULL pool 64 (hand-computed; SGLang's own loop gives
    the same lines). A (20-token prompt, max_new 5, EOS on its first token) prefills at step 0
    and is in step 1's decode batch (one more slot, 21) when its EOS is processed, so 20 + 1
    tokens enter the tree: two nodes, 20 and 1. B (43 tokens, 3 out) arrives at 3 and fills the
    free 43. Step 4's decode needs 1 slot: eviction frees A's 1-token leaf only (evictable 21 ->
    20); step 5's needs 1 more and frees the 20-token prompt. One 21-token node would be evicted
    whole at step 4 (kvplan before the split: 21, then nothing at step 5)."""
    rows = [
        dict(rid="A", input_ids=_tokens(0, 20), output_ids=[500], max_new_tokens=5, ignore_eos=False),
        dict(rid="B", input_ids=_tokens(1000, 43), output_ids=[600, 601, 602], arrival_step=3),
    ]
    lines = run_lines(rows, StepKnobs(no_swa=True, full_tokens=64))
    steps = [x for x in lines if x["type"] == "step"]
    assert steps[1]["finished"] == ["A"] and steps[1]["full_evictable"] == 21
    got = [(s["step"], s.get("full_evicted"), s["full_evictable"], s["full_used"]) for s in steps[3:6]]
    assert got == [(3, None, 21, 43), (4, 1, 20, 44), (5, 20, 0, 45)]


def _controller(hybrid: bool):
    tomb, lru = TOMBSTONING.create("unified"), EVICTION_ORDERS.create("lru")
    if hybrid:
        return build_controller(tomb, 256, 256, 1, 64, lru)
    return build_controller(tomb, 256, 256, 1, 1 << 40, lru, hybrid=False)


def _checkpointed_leaves(hybrid: bool, finished: bool) -> list[int]:
    """A request of prompt 10 + 5 outputs whose 15 tokens enter an empty tree in one checkpoint
    (a re-prefill of prompt + outputs; ``finished``: its release). The node lengths, root first."""
    cache = _controller(hybrid)
    req = ReqKV(rid="r", pages=np.arange(100, 116, dtype=np.int64), prompt_len=10, output_len=6)
    req.num_outputs = 5
    cache.match(req)
    cache.lock_prefix(req)
    cache.alloc_for_extend(req)
    if finished:
        cache.release(req, 15)
    else:
        cache.checkpoint(req, 15, finished=False)
    return sorted(n.length for n in cache.tree.iter_nodes() if n is not cache.tree.root)


@pytest.mark.parametrize("finished", [False, True])
def test_full_attention_checkpoint_splits_at_the_prompt(finished):
    """prompt 10 + 5 outputs: a full-attention tree holds 10 and 5, a hybrid one a single 15."""
    assert _checkpointed_leaves(hybrid=False, finished=finished) == [5, 10]
    assert _checkpointed_leaves(hybrid=True, finished=finished) == [15]
