"""The simulation loop's modules compiled from their ``.py`` (``simulator/compiled_modules.py``)
run the same simulations as their source, bit for bit, and a build loads only while it matches
its source.

Both paths run in child processes (a module is either compiled or not within one process): the
default, which loads the builds, and ``KVPLAN_PURE_PYTHON=1``, which loads every ``.py``. Where
nothing is built the compiled half is skipped, unless ``KVPLAN_REQUIRE_COMPILED=1`` (CI).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from simulator.compiled_modules import (
    COMPILED_MODULES,
    CompiledFinder,
    extension_path,
    module_hash,
    read_record,
    source_hash,
    source_path,
)
from tests.compiled_child import run_child

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import importlib, json, sys
from simulator.compiled_modules import COMPILED_MODULES, FINDER
from simulator.engine.config import SimConfig
from simulator.engine.metrics import Recorder
from simulator.engine.simulate import simulate
from traces import generate_bench_multiturn
from traces.generators.bench_multiturn import BenchMultiturnArgs

for name in COMPILED_MODULES:
    importlib.import_module(name)
files = {name: sys.modules[name].__file__ for name in COMPILED_MODULES}
runs = []
small = BenchMultiturnArgs(
    num_clients=16, max_parallel=16, request_length=400, output_length=300, num_rounds=3, seed=5
)
wide = BenchMultiturnArgs(
    num_clients=48, max_parallel=48, request_length=1500, output_length=600, num_rounds=2, seed=7
)
configs = [
    (small, dict(page_size=16, max_total_tokens=30_000, seed=5)),  # evictions, retractions
    (small, dict(page_size=16, max_total_tokens=30_000, seed=5, disable_overlap_schedule=False)),
    (wide, dict(page_size=64)),  # long decode jumps in a big pool
    (wide, dict(page_size=64, disable_overlap_schedule=False, swa_eviction="window")),
]
for workload, kwargs in configs:
    cfg = SimConfig(model="gpt-oss-120b", gpu="H200", tp=8, **kwargs)
    rec = Recorder.from_config(cfg)
    simulate(generate_bench_multiturn(workload), cfg, rec)
    frames = {k: v.to_dict("list") for k, v in rec.frames().items()}
    runs.append(repr((rec.summary(), frames, rec.counters)))
print(json.dumps(dict(files=files, loaded=FINDER.loaded, runs=runs)))
"""


def child(pure: bool) -> dict:
    return run_child(CHILD, pure)


def built() -> bool:
    """Every listed module is built from its current source (whatever KVPLAN_PURE_PYTHON says)."""
    record = read_record()
    return all(extension_path(n) is not None and record.get(n) == module_hash(n) for n in COMPILED_MODULES)


@pytest.fixture(scope="module")
def both() -> tuple[dict, dict]:
    if os.environ.get("KVPLAN_PURE_PYTHON") != "1" and not built():
        if os.environ.get("KVPLAN_REQUIRE_COMPILED") == "1":
            pytest.fail("KVPLAN_REQUIRE_COMPILED=1 but the compiled engine modules are not built")
    return child(pure=False), child(pure=True)


def test_pure_python_loads_every_source(both) -> None:
    _, pure = both
    assert all(f.endswith(".py") for f in pure["files"].values())
    assert set(pure["loaded"].values()) == {"KVPLAN_PURE_PYTHON=1"}


def test_the_default_loads_every_build(both) -> None:
    if not built():
        if os.environ.get("KVPLAN_REQUIRE_COMPILED") == "1":
            pytest.fail("KVPLAN_REQUIRE_COMPILED=1 but the compiled engine modules are not built")
        pytest.skip("the compiled engine modules are not built (no Cython or C compiler at install)")
    compiled, _ = both
    assert not any(f.endswith(".py") for f in compiled["files"].values())
    assert set(compiled["loaded"].values()) == {"compiled"}


def test_simulations_equal_both_ways(both) -> None:
    """Plain and overlap loops, a small pool (evictions, retractions) and a big one (long jumps,
    window eviction): summary, frames and counters are the same text."""
    compiled, pure = both
    assert len(compiled["runs"]) == 4
    for a, b in zip(compiled["runs"], pure["runs"], strict=True):
        assert a == b


def test_a_stale_build_loads_its_source(monkeypatch) -> None:
    """A build whose recorded hash is not its source's (or that has no record) is not loaded;
    under KVPLAN_REQUIRE_COMPILED=1 that is an ImportError; KVPLAN_PURE_PYTHON=1 wins over both."""
    monkeypatch.delenv("KVPLAN_PURE_PYTHON", raising=False)
    monkeypatch.delenv("KVPLAN_REQUIRE_COMPILED", raising=False)
    name = "simulator.engine.decode_clock"
    src = source_path(name)
    finder = CompiledFinder()
    so, stale = "/nowhere/decode_clock.so", "built from another version of the source"
    finder._record = {name: "0" * 64}
    assert finder._why_source(name, src, so) == stale
    finder._record = {}
    assert finder._why_source(name, src, so) == stale
    assert finder._why_source(name, src, None) == "not built"
    finder._record = {name: module_hash(name)}
    assert finder._why_source(name, src, so) is None
    monkeypatch.setenv("KVPLAN_PURE_PYTHON", "1")
    assert finder._why_source(name, src, so) == "KVPLAN_PURE_PYTHON=1"
    monkeypatch.delenv("KVPLAN_PURE_PYTHON")
    finder._record = {name: "0" * 64}
    spec = finder.find_spec(name)
    assert spec is not None and spec.origin == src  # the source, not the stale build
    monkeypatch.setenv("KVPLAN_REQUIRE_COMPILED", "1")
    with pytest.raises(ImportError, match="KVPLAN_REQUIRE_COMPILED"):
        finder.find_spec(name)
    assert finder.find_spec("simulator.engine.config") is None  # not a compiled module


def test_a_build_records_its_pxd_too(tmp_path, monkeypatch) -> None:
    """A module's typed ``.pxd`` changes its compiled build, so the record covers it: a build
    recorded before the ``.pxd`` was edited (or added) is stale."""
    import simulator.compiled_modules as cm

    monkeypatch.setattr(cm, "ROOT", str(tmp_path))
    (tmp_path / "pkg").mkdir()
    py = tmp_path / "pkg" / "mod.py"
    py.write_text("x = 1\n")
    only_py = cm.module_hash("pkg.mod")
    assert only_py == source_hash(str(py))
    pxd = tmp_path / "pkg" / "mod.pxd"
    pxd.write_text("cdef int y\n")
    with_pxd = cm.module_hash("pkg.mod")
    assert with_pxd != only_py
    pxd.write_text("cdef long y\n")
    assert cm.module_hash("pkg.mod") not in (with_pxd, only_py)


def test_cython_older_than_3_3_1_leaves_the_plain_modules_as_python() -> None:
    """Cython 3.3.0's build of fast_forward.py segfaulted the first simulation (Python 3.12.3 on
    the GPU host); setup.py asks this predicate before compiling the plain modules."""
    from simulator.compiled_modules import cython_compiles_plain

    assert not cython_compiles_plain("3.3.0")
    assert not cython_compiles_plain("3.0.11")
    assert not cython_compiles_plain("3.3.0rc1")
    assert cython_compiles_plain("3.3.1")
    assert cython_compiles_plain("3.4.0b1")
    assert cython_compiles_plain("4.0")
