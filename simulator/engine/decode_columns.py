"""The decode-steps frame's columns as a mapping that builds some of them on their first read.

The summary reads only the step count, the token usages and the round of each decode step; the
step times, ``#running-req``, ``#queue-req`` and the round share are for the frames, which a run
that only prints its summary never builds (:class:`~simulator.engine.frames.LazyFrames`). The
recorder hands :class:`DecodeColumns` the columns it built and a function for the others, and
settles it (builds what is left) before it records the next decode step, so a column read late
is the one it would have built at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

import numpy as np


class DecodeColumns(Mapping):
    """``names`` -> column, in ``names`` order: those in ``built`` as given, the others from
    ``build(name)`` on first read (or at :meth:`settle`). Pickles as the plain dict."""

    __slots__ = ("_names", "_cols", "_build")

    def __init__(
        self, names: tuple[str, ...], built: dict[str, np.ndarray], build: Callable[[str], np.ndarray]
    ) -> None:
        self._names = names
        self._cols = built
        self._build: Callable[[str], np.ndarray] | None = build

    def __getitem__(self, name: str) -> np.ndarray:
        col = self._cols.get(name)
        if col is None:
            if name not in self._names or self._build is None:
                raise KeyError(name)
            col = self._cols[name] = self._build(name)
        return col

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def settle(self) -> None:
        """Build every column not built yet; the builder is dropped (it reads the recorder)."""
        if self._build is not None:
            for name in self._names:
                self[name]
            self._build = None

    def __reduce__(self):
        self.settle()
        return dict, ({name: self._cols[name] for name in self._names},)
