# cython: boundscheck=False, wraparound=False, initializedcheck=False
"""Mooncake JSON lines scanned straight into arrays (issue 14): a typed loop in the compiled build.

``json`` makes a Python int for every hash id, a list per record and a dict per line, and
:func:`traces.readers.mooncake_chunks.plain_chunk` then packs them into arrays: most of the time
of reading a trace. :func:`scan_lines` reads the plain lines' text directly: an object with the
four keys ``timestamp``, ``input_length``, ``output_length`` and ``hash_ids`` (each once, in any
order, without escapes), JSON numbers and JSON whitespace, nothing after the ``}`` but the line
end. Any other line (another key, a string or a bool, a number out of range, a count of ids the
input length does not need, bad JSON) makes it answer None, and the reader parses that chunk with
``json`` as before, which gives the same values or the located error. So the values are the ones
``json`` + ``plain_chunk`` give: integers are read exactly (as ``int()`` reads them), an integer
timestamp becomes the nearest double (as numpy converts a Python int) and a fractional one is
``float()`` of its text (as ``json`` reads it). Pure Python runs the same code (tests use it);
the reader calls it only in the compiled build, where it is fast (:data:`COMPILED`). The compiled
build reads its arrays without bounds checks (the first line): every index is checked by the code
itself (the cursor against the line's end, the ids against the buffer's capacity).
"""

from __future__ import annotations

import numpy as np

from traces.jsonl import MAX_TOKENS

#: Whether this module runs as its compiled extension (``simulator.compiled_modules``).
COMPILED = not __file__.endswith(".py")

#: The keys of a plain record and their bits in :attr:`LineScanner.seen`.
_TIMESTAMP, _INPUT, _OUTPUT, _HASH_IDS = 1, 2, 4, 8
#: Decimal digits that always fit an int64 (the value of a longer integer is checked with int()).
_SAFE_DIGITS = 18
_MAX_TOKENS = MAX_TOKENS
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


def scan_lines(chunk: list, block_size: int) -> tuple | None:
    """(line numbers, timestamps as float64, input lengths, output lengths, hash ids per record,
    the hash ids) of ``chunk``'s ``(line_number, text)`` records; None when one is not plain."""
    m = len(chunk)
    joined = "".join([text for _, text in chunk])
    if not joined.isascii():
        return None
    arrays = (
        np.empty(m, dtype=np.int64),
        np.empty(m, dtype=np.float64),
        np.empty(m, dtype=np.int64),
        np.empty(m, dtype=np.int64),
        np.empty(m, dtype=np.int64),
    )
    lines, ts, n_in, n_out, counts = arrays  # the compiled build's typed views of them
    # an id takes a digit and a separator: a line of n characters holds fewer than n / 2 ids
    scanner = LineScanner(joined.encode("ascii"), np.empty(len(joined) // 2 + 1, dtype=np.int64))
    end = 0
    for k in range(m):
        lineno, text = chunk[k]
        start = end
        end += len(text)
        if not scanner.record(start, end) or scanner.ids != -(-scanner.n_in // block_size):
            return None
        lines[k] = lineno
        ts[k] = scanner.t
        n_in[k] = scanner.n_in
        n_out[k] = scanner.n_out
        counts[k] = scanner.ids
    return (*arrays, scanner.hashes_array[: scanner.h])


class LineScanner:
    """The lines of a chunk (``data``, their ASCII bytes one after the other) one record at a
    time: its fields, and its hash ids appended to ``hashes``."""

    def __init__(self, data: bytes, hashes: np.ndarray) -> None:
        self.hashes_array = hashes
        self.hashes = hashes  # the compiled build's typed view of the same memory
        self.h = 0  # ids written
        self.cap = len(hashes)
        self.data = data
        self.text = data  # the compiled build's typed view of the same bytes
        self.n = 0  # the end of the current line in data
        self.i = 0  # the cursor
        self.t = 0.0
        self.n_in = 0
        self.n_out = 0
        self.ids = 0
        self.value = 0  # the last integer read

    def record(self, start: int, end: int) -> bool:
        """Read the line ``data[start:end]``; False when it is not a plain record."""
        self.n = end
        self.i = start + 1
        if start >= end or self.text[start] != ord("{"):
            return False
        seen = 0
        while True:
            key = self.key()
            if key == 0 or seen & key or not self.colon():
                return False
            seen |= key
            if not self.field(key):
                return False
            c = self.skip_ws()
            self.i += 1
            if c == ord("}"):
                break
            if c != ord(","):
                return False
        if seen != _TIMESTAMP | _INPUT | _OUTPUT | _HASH_IDS:
            return False
        rest = self.n - self.i  # only a line end may follow
        if rest == 0:
            return True
        if rest == 1:
            return self.text[self.i] == ord("\n")
        return rest == 2 and self.text[self.i] == ord("\r") and self.text[self.i + 1] == ord("\n")

    def field(self, key: int) -> bool:
        """Read the value of ``key`` at the cursor."""
        self.skip_ws()
        if key == _HASH_IDS:
            return self.id_list()
        if key == _TIMESTAMP:
            return self.timestamp()
        if not self.integer() or not 1 <= self.value <= _MAX_TOKENS:
            return False
        if key == _INPUT:
            self.n_in = self.value
        else:
            self.n_out = self.value
        return True

    def skip_ws(self) -> int:
        """Move past JSON whitespace; the character code there (0 at the end of the line: a
        trace line has no NUL, :class:`traces.source.TraceInput` refuses them)."""
        i = self.i
        n = self.n
        while i < n:
            c = self.text[i]
            if c != ord(" ") and c != ord("\t") and c != ord("\n") and c != ord("\r"):
                self.i = i
                return c
            i += 1
        self.i = n
        return 0

    def key(self) -> int:
        """The bit of the key at the cursor (a plain key: no escapes), 0 for any other."""
        if self.skip_ws() != ord('"'):
            return 0
        start = self.i + 1
        end = start
        while end < self.n and self.text[end] != ord('"'):
            if self.text[end] == ord("\\"):
                return 0  # an escape: json's path
            end += 1
        if end >= self.n:
            return 0
        self.i = end + 1
        # the four names differ in length
        if self.spells(start, end, b"hash_ids"):
            return _HASH_IDS
        if self.spells(start, end, b"timestamp"):
            return _TIMESTAMP
        if self.spells(start, end, b"input_length"):
            return _INPUT
        if self.spells(start, end, b"output_length"):
            return _OUTPUT
        return 0

    def spells(self, start: int, end: int, word: bytes) -> bool:
        """Whether ``data[start:end]`` is ``word``."""
        if end - start != len(word):
            return False
        for k in range(end - start):
            if self.text[start + k] != word[k]:
                return False
        return True

    def colon(self) -> bool:
        if self.skip_ws() != ord(":"):
            return False
        self.i += 1
        return True

    def digits(self) -> int:
        """Move past a JSON integer's digits at the cursor (no leading zero); how many (0: none).
        Its value is in :attr:`value` when it has at most ``_SAFE_DIGITS`` digits."""
        i = self.i
        n = self.n
        if i >= n or not ord("0") <= self.text[i] <= ord("9"):
            return 0
        v = 0
        while i < n:
            c = self.text[i]
            if not ord("0") <= c <= ord("9"):
                break
            if i - self.i < _SAFE_DIGITS:
                v = v * 10 + (c - ord("0"))
            i += 1
        count = i - self.i
        if count > 1 and self.text[self.i] == ord("0"):
            return 0  # a leading zero is not JSON
        self.value = v
        self.i = i
        return count

    def integer(self) -> bool:
        """Read a JSON integer at the cursor into :attr:`value`; False when it is not one or
        is outside int64 (or is followed by a fraction or an exponent: a float)."""
        start = self.i
        negative = self.i < self.n and self.text[self.i] == ord("-")
        if negative:
            self.i += 1
        count = self.digits()
        if count == 0:
            return False
        if self.i < self.n and self.text[self.i] in b".eE":
            return False
        if count > _SAFE_DIGITS:
            big = int(self.data[start : self.i])
            if not _INT64_MIN <= big <= _INT64_MAX:
                return False
            self.value = big
        elif negative:
            self.value = -self.value
        return True

    def timestamp(self) -> bool:
        """Read a finite JSON number at the cursor into :attr:`t`."""
        start = self.i
        if self.integer():
            if self.i - start > _SAFE_DIGITS:
                return False  # a huge integer: json's path converts and checks it
            self.t = float(self.value)
            return True
        self.i = start
        if self.i < self.n and self.text[self.i] == ord("-"):
            self.i += 1
        if self.digits() == 0:
            return False
        if self.i >= self.n or self.text[self.i] not in b".eE":
            return False  # an integer beyond int64: json's path converts and checks it
        if self.text[self.i] == ord("."):
            self.i += 1
            if self.fraction_digits() == 0:
                return False
        if self.i < self.n and self.text[self.i] in b"eE":
            self.i += 1
            if self.i < self.n and self.text[self.i] in b"+-":
                self.i += 1
            if self.fraction_digits() == 0:
                return False
        t = float(self.data[start : self.i])
        if t - t != 0.0:  # inf or nan
            return False
        self.t = t
        return True

    def fraction_digits(self) -> int:
        """Move past decimal digits (leading zeros allowed); how many."""
        i = self.i
        while i < self.n and ord("0") <= self.text[i] <= ord("9"):
            i += 1
        count = i - self.i
        self.i = i
        return count

    def id_list(self) -> bool:
        """Read a JSON list of int64 integers at the cursor into the hash ids."""
        if self.i >= self.n or self.text[self.i] != ord("["):
            return False
        self.i += 1
        first = self.h
        c = self.skip_ws()
        if c == ord("]"):
            self.i += 1
            self.ids = 0
            return True
        while True:
            if not self.integer() or self.h >= self.cap:
                return False
            self.hashes[self.h] = self.value
            self.h += 1
            c = self.skip_ws()
            self.i += 1
            if c == ord("]"):
                break
            if c != ord(","):
                return False
            self.skip_ws()
        self.ids = self.h - first
        return True
