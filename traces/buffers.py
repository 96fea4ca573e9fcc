"""Growable integer buffers, so readers stream records into compact arrays instead of lists of dicts."""

from __future__ import annotations

from array import array

import numpy as np

_NP = {"q": np.int64, "Q": np.uint64, "d": np.float64, "l": np.int64}


class IntBuffer:
    """An ``array.array`` that grows by C-level ``extend``; ``numpy()`` returns it without a copy."""

    __slots__ = ("_a",)

    def __init__(self, typecode: str = "q"):
        self._a = array(typecode)

    def append(self, value: int | float) -> None:
        self._a.append(value)

    def extend(self, values: list) -> None:
        """Raises TypeError/OverflowError on a bad value; callers turn that into a located error."""
        self._a.extend(values)

    def extend_numpy(self, values: np.ndarray) -> None:
        """Append a numpy array of this buffer's dtype (a C-level copy of its bytes)."""
        self._a.frombytes(np.ascontiguousarray(values, dtype=_NP[self._a.typecode]).tobytes())

    def __len__(self) -> int:
        return len(self._a)

    def numpy(self) -> np.ndarray:
        if len(self._a) == 0:
            return np.zeros(0, dtype=_NP[self._a.typecode])
        return np.frombuffer(self._a, dtype=_NP[self._a.typecode])


class FloatBuffer(IntBuffer):
    """Float64 variant for arrival times."""

    def __init__(self) -> None:
        super().__init__("d")
