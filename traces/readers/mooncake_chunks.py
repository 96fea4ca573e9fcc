"""Mooncake records a chunk at a time: a few C-level passes check a plain chunk (issue 14).

A chunk is *plain* when every record is an object whose ``timestamp`` is an int or a finite
float, whose lengths are ints in [1, MAX_TOKENS] and whose ``hash_ids`` is a list of
``ceil(input_length / block_size)`` int64 integers: exactly the records the record-by-record
checks of :func:`traces.readers.mooncake.read_mooncake` accept without a string timestamp. Any
other chunk goes through those checks, which accept it or raise the located error, so what a
trace reads as, and every error message, is the same either way.
"""

from __future__ import annotations

from itertools import chain
from operator import itemgetter
from typing import Any

import numpy as np

from traces.jsonl import MAX_TOKENS

_FIELDS = itemgetter("timestamp", "input_length", "output_length", "hash_ids")
_NUMBER = {int, float}
_INT = {int}


def plain_chunk(objs: list[Any], block_size: int) -> tuple[np.ndarray, ...] | None:
    """(timestamps as float64, input lengths, output lengths, hash ids per record, the hash ids)
    of a plain chunk; None when a record may not be plain."""
    if set(map(type, objs)) != {dict}:
        return None
    try:
        ts, n_in, n_out, ids = zip(*map(_FIELDS, objs), strict=True)
    except KeyError:
        return None
    if not (set(map(type, ts)) <= _NUMBER and set(map(type, n_in)) == _INT == set(map(type, n_out))):
        return None
    if set(map(type, ids)) != {list}:
        return None
    try:
        t = np.array(ts, dtype=np.float64)
        a_in = np.array(n_in, dtype=np.int64)
        a_out = np.array(n_out, dtype=np.int64)
    except OverflowError:
        return None
    for a in (a_in, a_out):
        if not 1 <= int(a.min()) <= int(a.max()) <= MAX_TOKENS:
            return None
    if not np.isfinite(t).all():
        return None
    counts = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    if not np.array_equal(counts, -(-a_in // block_size)):
        return None
    flat = list(chain.from_iterable(ids))
    if set(map(type, flat)) != _INT:  # no bools, floats or strings among the ids
        return None
    try:
        hashes = np.array(flat, dtype=np.int64)
    except OverflowError:
        return None
    return t, a_in, a_out, counts, hashes
