"""What to change when the weights leave no KV budget: advice computed from the numbers, and
only advice that can work (a fraction in (0, 1], a TP that leaves room), in the flags every
command that sizes pools has (``--mem-fraction-static``, ``--tp``)."""

from __future__ import annotations

import math

# ServerArgs refuses a --mem-fraction-static outside (0, 1]
_MAX_FRACTION = 1.0
_MAX_TP = 1024


def no_kv_budget_advice(
    *, fraction: float, tp: int, pre_bytes: int, model_bytes: int, mm_bytes: float
) -> str:
    """The advice that ends the "no GPU memory for the KV cache" error.

    ``rest = (pre - model / tp) - pre * (1 - fraction) - mm`` must be positive (gpu_memory.py);
    so the fraction must exceed ``(model / tp + mm) / pre``, and at a given fraction the TP must
    exceed ``model / (pre * fraction - mm)``.
    """
    parts = []
    if fraction <= 0:
        parts.append(
            f"SGLang's default --mem-fraction-static is {fraction:.4g} here: it reserves 128 MiB per "
            f"TP rank, more than the GPU holds at tp={tp}; lower --tp"
        )
    # rounded up to SGLang's 3 decimals: any value above it leaves room
    needed = math.ceil((model_bytes / tp + mm_bytes) / pre_bytes * 1000) / 1000
    if needed < _MAX_FRACTION:
        if fraction <= 0:
            parts[-1] += f" or pass --mem-fraction-static above {needed:.3f} (at most 1)"
        else:
            parts.append(f"raise --mem-fraction-static above {needed:.3f} (at most 1)")
    tp_needed = _tp_that_fits(fraction, pre_bytes, model_bytes, mm_bytes)
    if fraction > 0 and tp_needed is not None and tp_needed > tp:
        parts.append(f"use --tp {tp_needed} or more (at --mem-fraction-static {fraction:.4g})")
    if not parts:
        return "no --mem-fraction-static or --tp makes room on this GPU; use a GPU with more memory"
    text = "; or ".join(parts)
    return text[0].upper() + text[1:]


def _tp_that_fits(fraction: float, pre_bytes: int, model_bytes: int, mm_bytes: float) -> int | None:
    """The smallest power-of-two TP whose per-rank weights leave a KV budget at ``fraction``."""
    room = pre_bytes * fraction - mm_bytes
    if room <= 0:
        return None
    tp = 1
    while tp <= _MAX_TP:
        if model_bytes // tp < room:
            return tp
        tp *= 2
    return None
