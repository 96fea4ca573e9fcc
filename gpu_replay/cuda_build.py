"""Builds ``gpu_replay/csrc/kv_transfer.cu`` with the machine's nvcc and loads it through ctypes.

The library has no torch headers (plain ``extern "C"`` entry points over raw addresses and a
stream handle), so it builds in seconds and serves any torch build on the GPU machine. The
shared object is cached by a hash of the source and the nvcc version, under
``$KVPLAN_CUDA_CACHE`` (default ``~/.cache/kvplan/cuda``).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

__all__ = ["SOURCE", "build", "library", "nvcc_path"]

SOURCE = Path(__file__).resolve().parent / "csrc" / "kv_transfer.cu"
_I64, _INT, _PTR = ctypes.c_int64, ctypes.c_int, ctypes.c_void_p


def nvcc_path() -> str | None:
    """nvcc from $CUDA_HOME, /usr/local/cuda or PATH, or None."""
    for root in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if root and (Path(root) / "bin" / "nvcc").exists():
            return str(Path(root) / "bin" / "nvcc")
    return shutil.which("nvcc")


def build(out_dir: str | Path | None = None, arch: str = "sm_90") -> Path:
    """Compile the library (if its cached copy is missing) and return the .so path."""
    nvcc = nvcc_path()
    if nvcc is None:
        raise RuntimeError("nvcc not found (set CUDA_HOME)")
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    digest = hashlib.sha256(SOURCE.read_bytes() + version.encode() + arch.encode()).hexdigest()[:16]
    cache = Path(out_dir or os.environ.get("KVPLAN_CUDA_CACHE") or Path.home() / ".cache/kvplan/cuda")
    cache.mkdir(parents=True, exist_ok=True)
    lib = cache / f"kv_transfer-{digest}.so"
    if not lib.exists():
        tmp = lib.with_suffix(f".{os.getpid()}.tmp")
        num = arch.removeprefix("sm_")
        cmd = [nvcc, "-O3", "-std=c++17", f"-gencode=arch=compute_{num},code={arch}", "-shared"]
        cmd += ["-Xcompiler", "-fPIC", "-o", str(tmp), str(SOURCE)]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"nvcc failed:\n{res.stderr[-4000:]}")
        tmp.replace(lib)
    return lib


@functools.cache
def library() -> ctypes.CDLL:
    """The built library with argument types declared (built on first use)."""
    lib = ctypes.CDLL(str(build()))
    lib.kvt_rows.argtypes = [_PTR, _PTR, _INT, _PTR, _PTR, _I64, _I64, _I64, _I64, _I64]
    lib.kvt_rows.argtypes += [_INT, _INT, _INT, _INT, _INT, _INT, _PTR]
    lib.kvt_bulk.argtypes = [
        _PTR,
        _PTR,
        _INT,
        _PTR,
        _PTR,
        _I64,
        _I64,
        _I64,
        _INT,
        _I64,
        _INT,
        _INT,
        _INT,
        _PTR,
        _INT,
    ]
    lib.kvt_ce_pages.argtypes = [
        _PTR,
        _PTR,
        _INT,
        _PTR,
        _PTR,
        _I64,
        _I64,
        _I64,
        _I64,
        _INT,
        _INT,
        _INT,
        _INT,
        _PTR,
    ]
    lib.kvt_ce_pitched.argtypes = [
        _PTR,
        _PTR,
        _INT,
        _PTR,
        _PTR,
        _I64,
        _I64,
        _I64,
        _I64,
        _I64,
        _I64,
        _INT,
        _INT,
        _PTR,
    ]
    lib.kvt_ce_fan.argtypes = [_PTR, _PTR, _INT, _PTR, _PTR, _I64, _I64, _I64, _I64]
    lib.kvt_ce_fan.argtypes += [_INT, _INT, _INT, _INT, _INT, _PTR, _PTR]
    lib.kvt_ce_3d.argtypes = [_I64, _I64, _I64, _I64, _I64, _I64, _PTR, _PTR, _PTR, _I64]
    lib.kvt_ce_3d.argtypes += [_INT, _INT, _INT, _INT, _INT, _PTR, _PTR]
    lib.kvt_ce_layers_start.argtypes = [_PTR, _PTR, _INT, _INT, _PTR, _PTR, _I64, _I64, _I64, _I64]
    lib.kvt_ce_layers_start.argtypes += [_INT, _INT, _INT, _INT, _PTR, _PTR, _INT, ctypes.POINTER(_PTR)]
    lib.kvt_ce_layers_wait.argtypes = [_PTR, _INT, _PTR]
    lib.kvt_ce_layers_finish.argtypes = [_PTR]
    lib.kvt_graph_create.argtypes = [_I64, _PTR, _PTR, _I64, ctypes.POINTER(_PTR)]
    lib.kvt_graph_copy.argtypes = [_PTR, _PTR, _PTR, _INT, _PTR, _PTR, _I64, _I64, _I64, _I64, _INT, _PTR]
    lib.kvt_graph_destroy.argtypes = [_PTR]
    lib.kvt_sleep.argtypes = [_I64, _PTR]
    lib.kvt_host_alloc.argtypes = [_I64, ctypes.c_uint, ctypes.POINTER(ctypes.c_void_p)]
    lib.kvt_host_free.argtypes = [_PTR]
    for fn in (
        lib.kvt_rows,
        lib.kvt_bulk,
        lib.kvt_ce_pages,
        lib.kvt_ce_pitched,
        lib.kvt_ce_fan,
        lib.kvt_ce_3d,
        lib.kvt_ce_layers_start,
        lib.kvt_ce_layers_wait,
        lib.kvt_ce_layers_finish,
        lib.kvt_graph_create,
        lib.kvt_graph_copy,
        lib.kvt_graph_destroy,
        lib.kvt_sleep,
        lib.kvt_host_alloc,
        lib.kvt_host_free,
    ):
        fn.restype = _INT
    return lib
