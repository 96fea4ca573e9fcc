"""Build hook for the optional compiled core (everything else is in pyproject.toml).

``simulator/radix/_core_*.pyx`` (nodes, the LRU leaf heap, the tree's base and the tree) are
Cython; the simulation loop's plain modules (``simulator.compiled_modules.COMPILED_MODULES``) are
compiled from their ``.py`` as they are. Each is an optional extension: without Cython or numpy at
build time it is left out, and without a C compiler the build warns and goes on, so
``pip install -e .`` always succeeds and kvplan runs the pure-Python modules.
``KVPLAN_PURE_PYTHON=1`` at build time skips the extensions too.
"""

from __future__ import annotations

import importlib.util
import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
CORE_MODULES = ("_core_node", "_core_heap", "_core_base", "_core_tree", "_core_alloc")
# the plain modules compiled from their .py: Python's semantics for every untyped name, so no
# annotation turns into a C type; no fused multiply-add where Cython infers a C double
PLAIN_DIRECTIVES = dict(language_level=3, annotation_typing=False, binding=True)
C_FLAGS = ["-O2", "-ffp-contract=off"]


def compiled_modules():
    """``simulator/compiled_modules.py``, loaded by path (the package may not be importable)."""
    path = os.path.join(HERE, "simulator", "compiled_modules.py")
    spec = importlib.util.spec_from_file_location("_kvplan_compiled_modules", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class RecordingBuildExt(build_ext):
    """``build_ext`` that records the source hash of every plain module it built, so that a
    build is loaded only while it matches its source (``simulator.compiled_modules``)."""

    def finalize_options(self) -> None:
        super().finalize_options()
        # compile the extensions side by side (``build_ext --parallel``): some thirty C files of
        # generated code, the longest step of a fresh install; an explicit -j N still wins
        if self.parallel is None:
            self.parallel = os.cpu_count() or 1

    def run(self) -> None:
        self._built: list[str] = []  # appended from the build threads (list.append is atomic)
        super().run()
        cm = compiled_modules()
        if self.inplace or self.editable_mode:
            cm.write_record(tuple(n for n in cm.COMPILED_MODULES if n in self._built))

    def build_extension(self, ext) -> None:
        super().build_extension(ext)  # raises (caught for optional ones) when it fails
        self._built.append(ext.name)


def core_extensions() -> list[Extension]:
    """The compiled core's extensions, or none where they cannot be generated."""
    if os.environ.get("KVPLAN_PURE_PYTHON") == "1":
        return []
    try:
        import numpy
        from Cython.Build import cythonize
    except ImportError:
        return []
    exts = [
        Extension(
            f"simulator.radix.{name}",
            [f"simulator/radix/{name}.pyx"],
            include_dirs=[numpy.get_include()],
            define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
            extra_compile_args=["-O2"],
            optional=True,
        )
        for name in CORE_MODULES
    ]
    built = cythonize(exts, language_level=3, quiet=True)
    cm = compiled_modules()
    import Cython

    if not cm.cython_compiles_plain(Cython.__version__):
        print(
            f"warning: Cython {Cython.__version__} is older than {cm.MIN_CYTHON_PLAIN}: "
            "the simulation loop's modules stay pure Python"
        )
        for ext in built:
            ext.optional = True
        return built
    for name in cm.COMPILED_MODULES:
        src = os.path.relpath(cm.source_path(name), HERE)
        # numpy's headers: a .pxd may cimport the radix core's declarations (numpy arrays)
        ext = Extension(
            name, [src], include_dirs=[numpy.get_include()], extra_compile_args=C_FLAGS, optional=True
        )
        try:  # one module Cython cannot translate stays pure Python; the others still build
            built += cythonize([ext], compiler_directives=PLAIN_DIRECTIVES, quiet=True)
        except Exception as exc:  # noqa: BLE001 - Cython reports several error types
            print(f"warning: {name} stays pure Python: Cython failed ({exc})")
    for ext in built:  # cythonize makes new Extensions and drops ``optional``
        ext.optional = True
    return built


setup(ext_modules=core_extensions(), cmdclass={"build_ext": RecordingBuildExt})
