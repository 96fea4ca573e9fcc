"""kvplan simulator: SGLang-faithful KV pools, radix cache, scheduler and cost model.

Importing this package never imports torch; only ``gpu_replay`` needs it. The library's entry
point for one configuration is ``simulator.run_config(trace, SimConfig(...)) -> RunResult``
(``simulator/run.py``); it and ``SimConfig`` load on first use, so importing the package is cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from simulator import compiled_modules as _compiled_modules

_compiled_modules.install()  # the simulation loop's compiled modules, while built from their source

__version__ = "0.1.0"

__all__ = ["RunResult", "SimConfig", "run_config"]

if TYPE_CHECKING:
    from simulator.engine.config import SimConfig
    from simulator.run import RunResult, run_config

_LAZY = {
    "RunResult": "simulator.run",
    "run_config": "simulator.run",
    "SimConfig": "simulator.engine.config",
}


def __getattr__(name: str) -> Any:
    """Load the public entry points on first use (PEP 562)."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'simulator' has no attribute {name!r}")
