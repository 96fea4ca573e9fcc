"""HiCache host pool sizes against SGLang 0.5.23's own (the HiCache oracle, drive_hicache.py).

One oracle process builds SGLang's host pools (``UnifiedRadixCache.init_hicache``) for a handful
of ratio / --hicache-size / page / geometry combinations and reports their capacities; kvplan's
:func:`simulator.sizing.hicache.host_pool_tokens` must give the same numbers. Skipped when the
oracle venv is missing, failed instead under ``KVPLAN_REQUIRE_ORACLE=1``.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from oracle_harness import oracle_dir, oracle_missing_reason, oracle_python

from simulator.sizing.hicache import DevicePool, host_pool_tokens

DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}

# (page, full tokens, swa tokens, ratio, size GB, layers, full layers, heads, head dim, dtype)
COMBOS = [
    (1, 2048, 1024, 3.0, 0.0, 4, 1, 1, 8, "float16"),  # HICACHE.md fact 2: 6145 / 3073
    (1, 2048, 1024, 2.0, 0.0002, 4, 1, 1, 8, "float16"),  # fact 2: 2500 / 1251
    (16, 3072, 1536, 2.0, 0.0, 4, 1, 1, 8, "float16"),  # fact 22: 6160
    (16, 4096, 2048, 0.7, 0.0, 6, 2, 2, 16, "bfloat16"),  # host smaller than device
    (64, 4096, 2048, 1.5, 0.0, 4, 1, 2, 8, "float16"),
    (16, 2048, 1024, 2.0, 0.0015, 6, 2, 2, 16, "float32"),  # size split by device bytes
    (64, 8192, 1536, 1.0, 0.004, 8, 2, 1, 8, "float16"),
]

SCRIPT = """
import json, sys
sys.path.insert(0, sys.argv[1])
import drive_hicache as d
out = []
for argv in json.loads(sys.argv[2]):
    a = d.parse_args(argv)
    cache = d.build(a)[3]
    hk, hs = d.host_pools(cache)
    out.append([hk.size, hs.size])
print("RESULT " + json.dumps(out))
"""


def _argv(c: tuple) -> list[str]:
    page, full, swa, ratio, size, layers, full_layers, heads, dim, dtype = c
    return [
        "--page-size", str(page), "--full-size", str(full), "--swa-size", str(swa),
        "--hicache-ratio", str(ratio), "--hicache-size", str(size), "--layers", str(layers),
        "--full-layers", str(full_layers), "--head-num", str(heads), "--head-dim", str(dim),
        "--dtype", dtype, "--conversations", "1", "--turns", "1",
    ]  # fmt: skip


def _kvplan(c: tuple) -> tuple[int, int]:
    page, full, swa, ratio, size, layers, full_layers, heads, dim, dtype = c
    per_layer = 2 * heads * dim * DTYPE_BYTES[dtype]  # K and V, one token, one layer
    f_bpt, s_bpt = per_layer * full_layers, per_layer * (layers - full_layers)
    # Device pools allocate size + page rows per layer (memory_pool.py MHATokenToKVPool).
    dev_full = DevicePool(full, f_bpt, (full + page) * f_bpt)
    dev_swa = DevicePool(swa, s_bpt, (swa + page) * s_bpt)
    return host_pool_tokens(dev_full, dev_swa, page, ratio, size)


@pytest.fixture(scope="module")
def oracle_sizes() -> list[list[int]]:
    reason = oracle_missing_reason("0.5.23")
    if reason is not None:
        if os.environ.get("KVPLAN_REQUIRE_ORACLE") == "1":
            pytest.fail(f"KVPLAN_REQUIRE_ORACLE=1 but {reason}")
        pytest.skip(reason)
    argvs = json.dumps([_argv(c) for c in COMBOS])
    proc = subprocess.run(
        [str(oracle_python("0.5.23")), "-c", SCRIPT, str(oracle_dir()), argvs],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(oracle_dir()),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


@pytest.mark.parametrize("i", range(len(COMBOS)), ids=[str(c[:5]) for c in COMBOS])
def test_host_pool_sizes_match_sglang(oracle_sizes, i):
    assert list(_kvplan(COMBOS[i])) == oracle_sizes[i]


def test_published_examples():
    """HICACHE.md facts 2 and 22, without the oracle."""
    assert _kvplan(COMBOS[0]) == (6145, 3073)
    assert _kvplan(COMBOS[1]) == (2500, 1251)
    assert _kvplan(COMBOS[2])[0] == 6160
