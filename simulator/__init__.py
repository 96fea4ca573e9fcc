"""kvplan simulator: SGLang-faithful KV pools, radix cache, scheduler and cost model.

Importing this package never imports torch; only ``gpu_replay`` needs it.
"""

__version__ = "0.1.0"
