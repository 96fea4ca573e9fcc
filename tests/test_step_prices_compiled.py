"""The compiled build's typed step prices (``simulator/cost/step_prices.pxd``: C doubles) and
prefill sums (``prefill_sums.pxd``) price every step exactly as their ``.py`` does (issue 14).

Both builds run in child processes (a module is compiled or not within one process) over the
same grid: small and large batches, a profile's unhidden fractions and MoE tiles, prefix lengths
past the window, and lengths whose products exceed 2**53; ``float.hex`` compares the bits.
"""

from __future__ import annotations

import os

import pytest

from simulator.compiled_modules import extension_path, module_hash, read_record
from tests.compiled_child import run_child

CHILD = """
import json
from simulator.compiled_modules import FINDER
from simulator.cost import CostModel
from simulator.cost.prefill_sums import prefill_sums_loop
from simulator.gpus import get_gpu
from simulator.models import load_model

profiles = [None, {"version": 1, "coefficients": {
                   "dense_unhidden_fraction": 0.3, "moe_unhidden_fraction": 0.2,
                   "prefill_attention_unhidden_fraction": 0.5, "moe_flops_half_tokens": 96.0,
                   "moe_tile_tokens": 64, "moe_decode_tile_tokens": 16,
                   "decode_layer_overhead_s": 3}}]
batches = [([1], [0]), ([100], [0]), ([4096], [131072]), ([7, 0, 300], [5, 9, 128]),
           ([3] * 40, list(range(40))), ([1 << 20], [1 << 27])]
huge = [([2**40 + 1], [2**30 + 3]), ([2**52 - 1, 5], [2**52 - 3, 2**51 + 1])]  # products past 2**53
out = []
for model in ("gpt-oss-120b", "Gemma-3-27B"):
    for profile in profiles:
        cost = CostModel.from_presets(load_model(model), get_gpu("H200"), 8, profile)
        for e, p in batches:
            out.append(cost.prefill_time(e, p).hex())
            out.append([x.hex() for x in cost.prefill_breakdown(e, p).values()])
        for bs, full, swa in [(1, 1, 1), (3, 3000, 384), (4, 10**6, 512), (333, 10**9, 10**7)]:
            out.append(cost.decode_time(bs, full, swa).hex())
        for window in (None, 128):
            for e, p in batches + huge:
                out.append([x.hex() for x in prefill_sums_loop(e, p, window)])
print(json.dumps(dict(loaded=FINDER.loaded, out=out)))
"""

MODULES = ("simulator.cost.step_prices", "simulator.cost.prefill_sums")


def _child(pure: bool) -> dict:
    return run_child(CHILD, pure)


def test_typed_prices_equal_the_source_bit_for_bit() -> None:
    record = read_record()
    if not all(extension_path(n) is not None and record.get(n) == module_hash(n) for n in MODULES):
        if os.environ.get("KVPLAN_REQUIRE_COMPILED") == "1":
            pytest.fail("KVPLAN_REQUIRE_COMPILED=1 but the step prices are not built")
        pytest.skip("the step prices are not built (no Cython or C compiler at install)")
    compiled, pure = _child(pure=False), _child(pure=True)
    assert all(compiled["loaded"][n] == "compiled" for n in MODULES)
    assert compiled["out"] == pure["out"]
