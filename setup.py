"""Build hook for the optional compiled radix-tree core (everything else is in pyproject.toml).

``simulator/radix/_core_*.pyx`` (nodes, the LRU leaf heap, the tree's base and the tree) are
Cython; each is an optional extension: without Cython or numpy at build time it is left out, and
without a C compiler the build warns and goes on, so ``pip install -e .`` always succeeds and
kvplan runs its pure-Python tree (``simulator.radix.unified``). ``KVPLAN_PURE_PYTHON=1`` at build
time skips the extensions too.
"""

from __future__ import annotations

import os

from setuptools import Extension, setup

CORE_MODULES = ("_core_node", "_core_heap", "_core_base", "_core_tree")


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
    for ext in built:  # cythonize makes new Extensions and drops ``optional``
        ext.optional = True
    return built


setup(ext_modules=core_extensions())
