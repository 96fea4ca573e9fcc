"""The simulation loop's plain-Python modules that setup.py also compiles with Cython (issue 14).

The ``.py`` file stays the one source: Cython compiles it as it is (no type declarations), which
takes the interpreter's bytecode dispatch out of the scheduler loop, the decode jump and the cache
controller, with Python's own semantics for every object and number, so the results are the same
bit for bit (tests/test_compiled_core.py runs both builds). Each build is loaded only while it
matches its source: setup.py records the SHA-256 of every compiled ``.py`` in
``compiled_sources.txt`` next to this file, and :class:`CompiledFinder` imports a module's
extension only when the source still has that hash; an edited source (or a missing record)
loads the ``.py``, so a stale build can never run. ``KVPLAN_PURE_PYTHON=1`` loads every ``.py``;
``KVPLAN_REQUIRE_COMPILED=1`` turns a stale or missing build into an ImportError (CI).
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import EXTENSION_SUFFIXES, ExtensionFileLoader, ModuleSpec, SourceFileLoader

#: The modules compiled in place (``simulator/engine/server.py`` -> ``server.*.so``).
COMPILED_MODULES = (
    "simulator.engine.server",
    "simulator.engine.fast_forward",
    "simulator.engine.decode_clock",
    "simulator.engine.decode_jump",
    "simulator.engine.admission",
    "simulator.engine.waiting_queue",
    "simulator.engine.step_costs",
    "simulator.engine.server_state",
    "simulator.engine.request",
    "simulator.engine.clients",
    "simulator.engine.intake",
    "simulator.engine.failures",
    "simulator.engine.overlap",
    "simulator.engine.overlap_jump",
    "simulator.engine.chunk_train",
    "simulator.engine.jump_core",
    "simulator.engine.metrics",
    "simulator.engine.rounds",
    "simulator.engine.request_rows",
    "simulator.radix.cache",
    "simulator.swa_window",
    "simulator.kv_allocator",
    "simulator.request_kv",
    "simulator.cost.roofline",
    "simulator.cost.prefill_sums",
    "simulator.cost.step_prices",
    "policies.swa_eviction",
    "traces.page_fill",
)

# os.path, not pathlib or hashlib: this module loads with the package (``kvplan --help`` too)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORD = os.path.join(ROOT, "simulator", "compiled_sources.txt")


#: The oldest Cython that compiles the plain modules correctly: Cython 3.3.0's build of
#: ``simulator/engine/fast_forward.py`` crashes the interpreter (a segmentation fault in the first
#: simulation, seen on Python 3.12.3; 3.3.1 runs it bit for bit), so setup.py leaves the plain
#: modules as Python under older Cythons. The radix core's ``.pyx`` builds with any Cython 3.
MIN_CYTHON_PLAIN = (3, 3, 1)


def cython_compiles_plain(version: str) -> bool:
    """Whether Cython ``version`` (e.g. ``"3.3.0"``, ``"3.4.0b1"``) may compile the plain modules."""
    parts: list[int] = []
    for piece in version.split(".")[:3]:
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        parts.append(int(digits or 0))
    while len(parts) < 3:
        parts.append(0)
    return tuple(parts) >= MIN_CYTHON_PLAIN


def source_path(name: str) -> str:
    """The ``.py`` file of module ``name`` in this checkout."""
    return os.path.join(ROOT, *name.split(".")) + ".py"


def source_hash(path: str) -> str:
    import hashlib

    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def module_hash(name: str, memo: dict[str, str] | None = None) -> str:
    """What a build of ``name`` is recorded under: its ``.py``'s hash, or, where a ``.pxd``
    (Cython's typed declarations for the compiled build) sits beside it, the hash of both.
    ``memo`` (module -> hash) keeps each module's hash for later calls (the finder's, one
    process: a shared dependency is hashed once, not once per module that cimports it)."""
    if memo is not None and name in memo:
        return memo[name]
    src = source_path(name)
    pxd = src[: -len(".py")] + ".pxd"
    if not os.path.exists(pxd):
        found = source_hash(src)
    else:
        # a build checks at import the layout of each compiled module its .pxd cimports: an edit
        # of one of those makes this build stale too (else it would meet that module's .py)
        deps = "".join(f"+{module_hash(dep, memo)}" for dep in pxd_cimports(pxd))
        found = f"{source_hash(src)}+{source_hash(pxd)}{deps}"
    if memo is not None:
        memo[name] = found
    return found


def pxd_cimports(pxd: str) -> list[str]:
    """The modules of :data:`COMPILED_MODULES` that the ``.pxd`` file ``pxd`` cimports."""
    with open(pxd) as f:
        words = [line.split() for line in f]
    names = [w[1] for w in words if len(w) > 2 and w[0] == "from" and w[2] == "cimport"]
    return [n for n in names if n in COMPILED_MODULES]


def read_record() -> dict[str, str]:
    """The source hashes the last build compiled (module -> SHA-256); empty without a build."""
    try:
        with open(RECORD) as f:
            lines = f.read().splitlines()
    except OSError:
        return {}
    return dict(line.split() for line in lines if line.strip())


def write_record(names: tuple[str, ...] = COMPILED_MODULES) -> None:
    """Record the sources of ``names`` as built (setup.py, after cythonizing them)."""
    with open(RECORD, "w") as f:
        f.write("".join(f"{n} {module_hash(n)}\n" for n in names))


def extension_path(name: str) -> str | None:
    """The built extension of ``name`` next to its source, or None."""
    stem = source_path(name)[: -len(".py")]
    for suffix in EXTENSION_SUFFIXES:
        if os.path.exists(stem + suffix):
            return stem + suffix
    return None


class CompiledFinder:
    """A ``sys.meta_path`` finder for :data:`COMPILED_MODULES`: the extension where it is built
    from the current source and the compiled path is on, else the ``.py``."""

    def __init__(self) -> None:
        self._record: dict[str, str] | None = None
        self._hashes: dict[str, str] = {}  # module_hash's memo for this process
        self.loaded: dict[str, str] = {}  # module -> "compiled" or why the source was loaded

    def find_spec(self, name: str, path=None, target=None) -> ModuleSpec | None:
        if name not in COMPILED_MODULES:
            return None
        from importlib.util import spec_from_file_location

        src = source_path(name)
        so = extension_path(name)
        why = self._why_source(name, src, so)
        self.loaded[name] = why or "compiled"
        if why is None:
            return spec_from_file_location(name, so, loader=ExtensionFileLoader(name, so))
        if why != "KVPLAN_PURE_PYTHON=1" and os.environ.get("KVPLAN_REQUIRE_COMPILED") == "1":
            raise ImportError(f"KVPLAN_REQUIRE_COMPILED=1 but {name} loads its source: {why}")
        return spec_from_file_location(name, src, loader=SourceFileLoader(name, src))

    def _why_source(self, name: str, src: str, so: str | None) -> str | None:
        """Why ``name`` loads its ``.py`` (None: its extension is loaded)."""
        if os.environ.get("KVPLAN_PURE_PYTHON") == "1":
            return "KVPLAN_PURE_PYTHON=1"
        if so is None:
            return "not built"
        if self._record is None:
            self._record = read_record()
        if self._record.get(name) != module_hash(name, self._hashes):
            return "built from another version of the source"
        return None


FINDER = CompiledFinder()


def install() -> None:
    """Put :data:`FINDER` first on ``sys.meta_path`` (once)."""
    if FINDER not in sys.meta_path:
        sys.meta_path.insert(0, FINDER)
