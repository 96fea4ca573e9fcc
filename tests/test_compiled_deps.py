"""A compiled module's build goes stale with the compiled modules its ``.pxd`` cimports.

``cache.pxd`` cimports ``SWAKVAllocator`` from ``kv_allocator``: a ``cache`` build imports that
type's C layout, so after an edit of ``kv_allocator.py`` (loaded as source until rebuilt) the
old ``cache`` build would fail at import (a ValueError). Its recorded hash covers the
dependency's, so the finder loads ``cache.py`` instead.
"""

from __future__ import annotations

import simulator.compiled_modules as cm


def test_cache_pxd_cimports_the_allocator() -> None:
    pxd = cm.source_path("simulator.radix.cache")[: -len(".py")] + ".pxd"
    assert cm.pxd_cimports(pxd) == ["simulator.kv_allocator", "simulator.request_kv", "simulator.swa_window"]


def test_an_edit_of_a_cimported_module_changes_the_dependent_hash(monkeypatch) -> None:
    before_cache = cm.module_hash("simulator.radix.cache")
    before_clock = cm.module_hash("simulator.engine.decode_clock")
    real = cm.source_hash
    allocator = cm.source_path("simulator.kv_allocator")
    monkeypatch.setattr(cm, "source_hash", lambda p: "edited" if p == allocator else real(p))
    assert cm.module_hash("simulator.radix.cache") != before_cache
    assert cm.module_hash("simulator.engine.decode_clock") == before_clock  # no such cimport
