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

Hashing every source at each start-up cost some 28M instructions (half a percent of a 12k-request
run, issue 14), so the record also keeps each hashed file's size and modification time (ns): a
file whose size and time are still the recorded ones, and whose time is older than the record by
:data:`STAMP_MARGIN_NS` (more than any file system's timestamp granularity, so that no later
write can have left the same time), is the file that was hashed, and its hash is not recomputed.
Any other file (edited, replaced, touched, or written too close to the build) is hashed as before.
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
    "simulator.engine.record_pack",
    "simulator.engine.observer",
    "simulator.radix.cache",
    "simulator.swa_window",
    "simulator.kv_allocator",
    "simulator.request_kv",
    "simulator.cost.roofline",
    "simulator.cost.prefill_sums",
    "simulator.cost.step_prices",
    "policies.swa_eviction",
    "traces.page_fill",
    "traces.readers.mooncake_lines",
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


#: How much older than the record a file's modification time must be for its stamp to stand
#: for its hash (2 s: far coarser than any file system's timestamps).
STAMP_MARGIN_NS = 2_000_000_000


def read_record() -> dict[str, str]:
    """The source hashes the last build compiled (module -> SHA-256); empty without a build."""
    return {name: entry[0] for name, entry in read_stamps()[0].items()}


def read_stamps() -> tuple[dict[str, tuple[str, list[str]]], int]:
    """The record: module -> (hash, the stamps ``path:size:mtime_ns`` of the files it hashed),
    and the record's own modification time (ns); empty and 0 without a build."""
    try:
        with open(RECORD) as f:
            written = os.fstat(f.fileno()).st_mtime_ns
            lines = f.read().splitlines()
    except OSError:
        return {}, 0
    entries = {}
    for line in lines:
        words = line.split()
        if len(words) >= 2:
            entries[words[0]] = (words[1], words[2:])
    return entries, written


def hashed_files(name: str) -> list[str]:
    """The files :func:`module_hash` reads for ``name`` (its ``.py``, ``.pxd`` and the files of the
    modules that ``.pxd`` cimports), each once."""
    src = source_path(name)
    pxd = src[: -len(".py")] + ".pxd"
    if not os.path.exists(pxd):
        return [src]
    files = [src, pxd]
    for dep in pxd_cimports(pxd):
        files += [f for f in hashed_files(dep) if f not in files]
    return files


def file_stamp(path: str) -> str | None:
    """``path:size:mtime_ns`` of a file (``path`` relative to the checkout), None if missing."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return f"{os.path.relpath(path, ROOT)}:{st.st_size}:{st.st_mtime_ns}"


def stamps_hold(stamps: list[str], written_ns: int, memo: dict[str, str | None]) -> bool:
    """Whether every stamped file still has its size and time, older than the record's by
    :data:`STAMP_MARGIN_NS` (``memo``: path -> current stamp, so a shared file is read once)."""
    if not stamps:
        return False
    for stamp in stamps:
        parts = stamp.rsplit(":", 2)
        if len(parts) != 3:
            return False
        full = os.path.join(ROOT, parts[0])
        if full not in memo:
            memo[full] = file_stamp(full)
        if memo[full] != stamp or int(parts[2]) > written_ns - STAMP_MARGIN_NS:
            return False
    return True


def write_record(names: tuple[str, ...] = COMPILED_MODULES) -> None:
    """Record the sources of ``names`` as built (setup.py, after cythonizing them): each module's
    hash and the stamps of the files hashed (taken before hashing them)."""
    lines = []
    for n in names:
        stamps = [file_stamp(f) or "" for f in hashed_files(n)]
        lines.append(" ".join([n, module_hash(n), *stamps]) + "\n")
    with open(RECORD, "w") as f:
        f.write("".join(lines))


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
        self._stamps: tuple[dict[str, tuple[str, list[str]]], int] | None = None  # read_stamps()
        self._files: dict[str, str | None] = {}  # stamps_hold's memo for this process
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
        if self._record.get(name) != self._current_hash(name):
            return "built from another version of the source"
        return None

    def _current_hash(self, name: str) -> str:
        """:func:`module_hash` of ``name``, taken from the record when its files' stamps hold."""
        if self._stamps is None:
            self._stamps = read_stamps()
        entries, written = self._stamps
        entry = entries.get(name)
        if entry is not None and stamps_hold(entry[1], written, self._files):
            return entry[0]
        return module_hash(name, self._hashes)


FINDER = CompiledFinder()


def install() -> None:
    """Put :data:`FINDER` first on ``sys.meta_path`` (once)."""
    if FINDER not in sys.meta_path:
        sys.meta_path.insert(0, FINDER)
