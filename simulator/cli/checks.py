"""Constraints on one flag's value: finite, ranges, integer bounds, allowed names.

A :class:`Check` is data (the bounds), so the one table of server flags (``server_flags.py``) and
the table of command flags (``validation.py``) can say what each flag accepts, and one function
applies them to every command before any work starts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from simulator.errors import FlagError

# Token counts: kvplan's per-request arrays are 32-bit (a length of 2**31 or more overflows them).
MAX_TOKENS = 2**31 - 1
# numpy.random.RandomState and random.seed both take a seed in [0, 2**32).
MAX_SEED = 2**32 - 1


@dataclass(frozen=True)
class Check:
    """What one numeric or enumerated flag accepts. ``lo``/``hi`` are inclusive bounds unless
    ``lo_open``/``hi_open``; floats must be finite unless ``allow_inf`` (then only +inf);
    ``choices`` lists the allowed names of a text flag."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    allow_inf: bool = False
    choices: Callable[[], Sequence[str]] | None = None
    why: str = ""

    def __call__(self, flag: str, value: Any) -> None:
        """Raise :class:`FlagError` naming ``flag`` if ``value`` breaks the constraint."""
        if value is None or isinstance(value, bool):
            return
        if self.choices is not None:
            allowed = list(self.choices())
            if value not in allowed:
                raise FlagError(f"{flag} {value!r} is not one of: {', '.join(allowed)}")
            return
        if isinstance(value, float) and math.isnan(value):
            raise FlagError(f"{flag} must be a number, got nan")
        if isinstance(value, float) and math.isinf(value) and not (self.allow_inf and value > 0):
            raise FlagError(f"{flag} must be finite, got {value}")
        if not self._in_range(value):
            raise FlagError(f"{flag} must be {self.describe()}, got {value}{self.why}")

    def _in_range(self, value: float) -> bool:
        if self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo):
            return False
        return not (self.hi is not None and (value >= self.hi if self.hi_open else value > self.hi))

    def describe(self) -> str:
        """The accepted range in words, e.g. ``in (0, 1]`` or ``>= 1``."""
        if self.lo is not None and self.hi is not None:
            left, right = "(" if self.lo_open else "[", ")" if self.hi_open else "]"
            return f"in {left}{_num(self.lo)}, {_num(self.hi)}{right}"
        if self.lo is not None:
            return f"{'>' if self.lo_open else '>='} {_num(self.lo)}"
        return f"{'<' if self.hi_open else '<='} {_num(self.hi)}"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


AT_LEAST_1 = Check(lo=1)
TOKENS = Check(lo=1, hi=MAX_TOKENS)  # a positive token count
TOKENS_OR_ZERO = Check(lo=0, hi=MAX_TOKENS)
POSITIVE = Check(lo=0, lo_open=True)  # finite and > 0
NON_NEGATIVE = Check(lo=0)  # finite and >= 0
FRACTION = Check(lo=0, hi=1, lo_open=True)  # in (0, 1]
RATE = Check(lo=0, lo_open=True, allow_inf=True)  # > 0; inf = no pacing (SGLang's benchmarks)
SEED = Check(lo=0, hi=MAX_SEED)
