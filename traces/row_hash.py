"""pandas' row hash of a request table, computed with numpy alone (issue 14).

``provenance.trace_hash`` hashes a trace's request table with
``pandas.util.hash_pandas_object(frame, index=False)``. A ``kvplan run`` whose trace was read
into numpy columns (:class:`traces.request_table.RequestTable`) gets the same uint64 per row from
here, without importing pandas (a third of the start-up). What pandas does, which this follows
(``pandas/core/util/hashing.py``: ``hash_array``, ``_hash_ndarray``, ``combine_hash_arrays``;
``hash_object_array`` in ``pandas/_libs/hashing.pyx``):

* a number column: its bits as uint64 (floats: every NaN as ``np.nan``'s bits, -0.0 as 0.0),
  then the mixing step below;
* a string column: SipHash-2-4 (key ``"0123456789123456"``) of each value's UTF-8 bytes, then
  the mixing step; a missing value hashes to 2**64 - 1, unmixed;
* the row: the columns' hashes combined like a Python tuple hash (CPython's tupleobject.c).

``tests/test_trace_row_hash.py`` compares this with pandas on every reader's traces.
"""

from __future__ import annotations

import numpy as np

_U64 = np.uint64
#: pandas' ``_default_hash_key``.
HASH_KEY = b"0123456789123456"
#: The hash of a missing value (pandas' ``lib.u8max``).
MISSING = _U64(0xFFFFFFFFFFFFFFFF)


def _rotl(x: np.ndarray, b: int) -> np.ndarray:
    return (x << _U64(b)) | (x >> _U64(64 - b))


def _rounds(v: list[np.ndarray], n: int) -> None:
    """``n`` SipRounds on the state ``v`` (four uint64 arrays), in place."""
    v0, v1, v2, v3 = v
    for _ in range(n):
        v0 = v0 + v1
        v1 = _rotl(v1, 13) ^ v0
        v0 = _rotl(v0, 32)
        v2 = v2 + v3
        v3 = _rotl(v3, 16) ^ v2
        v0 = v0 + v3
        v3 = _rotl(v3, 21) ^ v0
        v2 = v2 + v1
        v1 = _rotl(v1, 17) ^ v2
        v2 = _rotl(v2, 32)
    v[:] = [v0, v1, v2, v3]


def siphash24(data: np.ndarray, lengths: np.ndarray, key: bytes = HASH_KEY) -> np.ndarray:
    """SipHash-2-4 of byte strings given as a zero-padded uint8 matrix (one row per string, at
    least ``max(lengths) // 8 * 8 + 8`` columns) and their lengths; one uint64 per string."""
    n = len(lengths)
    words = np.ascontiguousarray(data, dtype=np.uint8).view("<u8").astype(_U64, copy=False)
    k0, k1 = np.frombuffer(key, dtype="<u8").astype(_U64)
    state = [
        np.full(n, k0 ^ _U64(0x736F6D6570736575)),
        np.full(n, k1 ^ _U64(0x646F72616E646F6D)),
        np.full(n, k0 ^ _U64(0x6C7967656E657261)),
        np.full(n, k1 ^ _U64(0x7465646279746573)),
    ]
    lengths = np.asarray(lengths, dtype=np.int64)
    blocks = lengths // 8
    for j in range(int(blocks.max()) if n else 0):
        active = blocks > j
        m = words[:, j]
        before = list(state)
        state[3] = state[3] ^ m
        _rounds(state, 2)
        state[0] = state[0] ^ m
        state[:] = [np.where(active, new, old) for new, old in zip(state, before, strict=True)]
    # the last word: the tail bytes (the padding is zero) and the length's low byte on top
    last = words[np.arange(n), blocks] | ((lengths.astype(_U64) & _U64(0xFF)) << _U64(56))
    state[3] = state[3] ^ last
    _rounds(state, 2)
    state[0] = state[0] ^ last
    state[2] = state[2] ^ _U64(0xFF)
    _rounds(state, 4)
    return state[0] ^ state[1] ^ state[2] ^ state[3]


def _mix(vals: np.ndarray) -> np.ndarray:
    """pandas' redistribution of a column's 64-bit values (the end of ``_hash_ndarray``)."""
    vals = vals ^ (vals >> _U64(30))
    vals = vals * _U64(0xBF58476D1CE4E5B9)
    vals = vals ^ (vals >> _U64(27))
    vals = vals * _U64(0x94D049BB133111EB)
    return vals ^ (vals >> _U64(31))


def hash_numbers(values: np.ndarray) -> np.ndarray:
    """pandas' hash of a numpy number column (int or float, at most 8 bytes per value)."""
    kind = f"u{values.dtype.itemsize}"
    uints = values.view(kind).astype(_U64)
    if values.dtype.kind == "f":
        uints[np.isnan(values)] = np.array(np.nan, dtype=values.dtype).view(kind)
        uints[uints == np.array(-0.0, dtype=values.dtype).view(kind)] = 0
    return _mix(uints)


def hash_int_labels(values: np.ndarray) -> np.ndarray:
    """pandas' hash of a string column holding the decimal labels of ``values`` (integers)."""
    unique, codes = np.unique(np.asarray(values, dtype=np.int64), return_inverse=True)
    text = unique.astype("S")  # decimal ASCII, zero-padded to the longest
    width = text.dtype.itemsize // 8 * 8 + 8
    data = np.zeros((len(unique), width), dtype=np.uint8)
    data[:, : text.dtype.itemsize] = text.view(np.uint8).reshape(len(unique), -1)
    # the label lengths (numpy.char's str_len would import numpy.char at every run)
    lengths = (data[:, : text.dtype.itemsize] != 0).sum(axis=1)
    return _mix(siphash24(data, lengths))[codes.reshape(-1)]


def combine_rows(columns: list[np.ndarray], n: int) -> np.ndarray:
    """The row hash from the columns' hashes (pandas' ``combine_hash_arrays``)."""
    if not columns:
        return np.full(n, 0x345678 + 97531, dtype=_U64)
    mult = _U64(1000003)
    out = np.zeros(n, dtype=_U64) + _U64(0x345678)
    for i, h in enumerate(columns):
        inverse_i = len(columns) - i
        out = (out ^ h) * mult
        mult = mult + _U64(82520 + inverse_i + inverse_i)
    return out + _U64(97531)
